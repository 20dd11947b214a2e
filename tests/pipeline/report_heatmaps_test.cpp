// The report's heatmap section: which validation images are scanned first, the
// manifest the trainer writes, and how report.html captions correct and wrong ones.
// (The heatmaps of a real run, drawn from its best checkpoint, are checked by
// cli.report_render.)
#include "pipeline/train/report_heatmaps.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <opencv2/imgcodecs.hpp>

#include "kernels/core/error.hpp"
#include "pipeline/report/report.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_png(const fs::path& path, int value) {
  cv::imwrite(path.string(), cv::Mat(8, 8, CV_8UC3, cv::Scalar(value, value, value)));
}

TEST(ReportHeatmaps, ScanOrderTakesClassesInTurn) {
  // Labels 0 0 0 1 2 1: class 0's first, class 1's first, class 2's first, then the seconds.
  std::vector<Sample> val;
  for (int label : {0, 0, 0, 1, 2, 1}) val.push_back({"x", label, ""});
  EXPECT_EQ(heatmap_scan_order(val, 3), (std::vector<std::size_t>{0, 3, 4, 1, 5, 2}));
  EXPECT_TRUE(heatmap_scan_order({}, 2).empty());
}

TEST(ReportHeatmaps, ManifestRoundTripsAndRefusesPaths) {
  ReportHeatmapSet set;
  set.epoch = 3;
  set.quantity = "attention";
  set.scanned = 6;
  set.validation_images = 10;
  set.heatmaps.push_back({"val_wrong_1_a.png", "/d/a.png", "cat", "dog", 0.75, 12, false});
  const ReportHeatmapSet back = parse_report_heatmaps_json(report_heatmaps_json(set), "m.json");
  EXPECT_EQ(back.epoch, 3);
  EXPECT_EQ(back.scanned, 6u);
  ASSERT_EQ(back.heatmaps.size(), 1u);
  EXPECT_EQ(back.heatmaps[0].predicted_class, "dog");
  EXPECT_DOUBLE_EQ(back.heatmaps[0].probability, 0.75);
  EXPECT_FALSE(back.heatmaps[0].correct);
  // A manifest naming a file outside heatmaps/ is refused (the page embeds what it names).
  set.heatmaps[0].file = "../secret.png";
  EXPECT_THROW(parse_report_heatmaps_json(report_heatmaps_json(set), "m.json"), Error);
  EXPECT_THROW(parse_report_heatmaps_json("{\"epoch\": 1}", "m.json"), Error);
}

TEST(ReportHeatmaps, PageCaptionsCorrectAndWrongImagesFromTheManifest) {
  const fs::path dir = fs::temp_directory_path() / ("bigtrain_report_heatmaps_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "heatmaps");
  std::ofstream(dir / "metrics.csv") << "epoch,split,loss,accuracy\n1,train,0.9,0.5\n1,val,0.8,0.5\n";
  ReportHeatmapSet set;
  set.epoch = 1;
  set.quantity = "attention";
  set.scanned = 4;
  set.validation_images = 4;
  set.heatmaps = {{"val_correct_1_a.png", "/d/a.png", "cat", "cat", 0.9, 9, true},
                  {"val_wrong_1_b.png", "/d/b.png", "dog", "cat", 0.6, 7, false}};
  write_png(dir / "heatmaps" / "val_correct_1_a.png", 10);
  write_png(dir / "heatmaps" / "val_wrong_1_b.png", 200);
  write_png(dir / "heatmaps" / "mine.png", 90);  // someone's own heatmap
  std::ofstream(dir / "heatmaps" / kReportHeatmapsManifest) << report_heatmaps_json(set);
  const std::string html = read(write_run_report(dir.string()));
  const auto correct = html.find("<figure data-outcome=\"correct\"><img alt=\"val_correct_1_a.png\" src=\"data:image/png;base64,");
  const auto wrong = html.find("<figure data-outcome=\"wrong\"><img alt=\"val_wrong_1_b.png\" src=\"data:image/png;base64,");
  ASSERT_NE(correct, std::string::npos) << html;
  ASSERT_NE(wrong, std::string::npos);
  EXPECT_LT(correct, wrong);
  EXPECT_NE(html.find("true dog, predicted cat (p=0.60) · 7 tiles"), std::string::npos);
  EXPECT_NE(html.find("best checkpoint (epoch 1): 1 correct and 1 wrong, found among the first 4 of 4"),
            std::string::npos);
  EXPECT_NE(html.find("<figure data-outcome=\"other\"><img alt=\"mine.png\""), std::string::npos);
  EXPECT_EQ(html.find("heatmaps-missing"), std::string::npos);
  // A broken manifest does not lose the page: it says what is wrong.
  std::ofstream(dir / "heatmaps" / kReportHeatmapsManifest) << "{not json";
  const std::string broken = read(write_run_report(dir.string()));
  EXPECT_NE(broken.find(kReportHeatmapsManifest), std::string::npos);
  EXPECT_NE(broken.find("data-chart=\"loss\""), std::string::npos);
  fs::remove_all(dir);
}

TEST(ReportHeatmaps, NoCheckpointIsAnErrorNamingIt) {
  const fs::path dir = fs::temp_directory_path() / ("bigtrain_report_heatmaps_none_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  try {
    write_report_heatmaps(dir.string(), {{"x.png", 0, ""}}, 1);
    FAIL() << "no checkpoint must throw";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("best.safetensors"), std::string::npos) << error.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace bigtrain
