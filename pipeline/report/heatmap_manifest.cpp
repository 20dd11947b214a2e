#include "pipeline/report/heatmap_manifest.hpp"

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/core/error.hpp"

namespace bigtrain {
namespace fs = std::filesystem;

std::string report_heatmaps_json(const ReportHeatmapSet& set) {
  nlohmann::json json{{"epoch", set.epoch},
                      {"checkpoint", "checkpoints/best.safetensors"},
                      {"quantity", set.quantity},
                      {"scanned", set.scanned},
                      {"validation_images", set.validation_images},
                      {"heatmaps", nlohmann::json::array()}};
  for (const auto& h : set.heatmaps)
    json["heatmaps"].push_back({{"file", h.file},
                                {"image", h.image},
                                {"true_class", h.true_class},
                                {"predicted_class", h.predicted_class},
                                {"probability", h.probability},
                                {"tiles", h.tiles},
                                {"correct", h.correct}});
  return json.dump(2) + "\n";
}

ReportHeatmapSet parse_report_heatmaps_json(const std::string& text, const std::string& source) {
  try {
    const auto json = nlohmann::json::parse(text);
    ReportHeatmapSet set;
    set.epoch = json.at("epoch").get<std::int64_t>();
    set.quantity = json.at("quantity").get<std::string>();
    set.scanned = json.at("scanned").get<std::size_t>();
    set.validation_images = json.at("validation_images").get<std::size_t>();
    for (const auto& h : json.at("heatmaps")) {
      ReportHeatmap item;
      item.file = h.at("file").get<std::string>();
      BT_CHECK(fs::path(item.file).filename().string() == item.file, "{}: heatmap file '{}' is not a plain name",
               source, item.file);
      item.image = h.at("image").get<std::string>();
      item.true_class = h.at("true_class").get<std::string>();
      item.predicted_class = h.at("predicted_class").get<std::string>();
      item.probability = h.at("probability").get<double>();
      item.tiles = h.at("tiles").get<std::int64_t>();
      item.correct = h.at("correct").get<bool>();
      set.heatmaps.push_back(std::move(item));
    }
    return set;
  } catch (const nlohmann::json::exception& error) {
    throw Error(fmt::format("{}: {}", source, error.what()));
  }
}

}  // namespace bigtrain
