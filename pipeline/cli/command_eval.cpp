// `bigtrain eval CONFIG --checkpoint CKPT [--split test|val] [--out DIR]`: a
// checkpoint's metrics on a labelled split of the config's data.
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "kernels/device_select.hpp"
#include "pipeline/cli/command_registry.hpp"
#include "pipeline/common/atomic_file.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/data/dataset.hpp"
#include "pipeline/engine/metrics.hpp"
#include "pipeline/infer/evaluate.hpp"
#include "pipeline/infer/infer.hpp"

namespace bigtrain::cli {
namespace {
namespace fs = std::filesystem;

RegisterCommand eval_command("eval", [](CLI::App& app) {
  app.description("Evaluate a checkpoint on the config's test or validation split: loss, accuracy, balanced "
                  "accuracy, per-class precision/recall, confusion matrix (CSV, PNG), ROC AUC, JSON summary");
  auto config_path = std::make_shared<std::string>();
  auto checkpoint_path = std::make_shared<std::string>();
  auto split = std::make_shared<std::string>("test");
  auto out = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  auto json = std::make_shared<bool>(false);
  app.add_option("config", *config_path, "the run's YAML config (its data section names the splits)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--checkpoint", *checkpoint_path, "the checkpoint to evaluate")->required();
  app.add_option("--split", *split, "test or val")->check(CLI::IsMember({"test", "val"}))->capture_default_str();
  app.add_option("--out", *out, "output folder (default: <output.dir>/eval_<split>)");
  app.add_option("--set", *overrides, "override a config key (repeatable)");
  app.add_flag("--json", *json, "print the JSON summary instead of a table");
  return std::function<int()>([=] {
    Config config = load_config(*config_path, *overrides);
    set_cuda_backend_device(static_cast<int>(config.device.index));
    const Backend backend = kernels::select_backend(config.device.type);
    spdlog::info("device: {}", kernels::describe_backend_choice(backend));
    if (backend == Backend::cuda)
      kernels::apply_cuda_limits(config.device.memory_limit_bytes, config.train.cudnn_workspace_bytes);
    LoadedCheckpoint checkpoint = load_checkpoint_for_inference(*checkpoint_path);
    // Labels resolve against the checkpoint's class order, whatever the config says.
    if (!config.data.classes.empty() && config.data.classes != checkpoint.classes)
      throw Error(fmt::format("{}: data.classes differs from the checkpoint's classes", config.source));
    config.data.classes = checkpoint.classes;
    const Dataset dataset = load_dataset(config.data, config.train.seed);
    const std::vector<Sample>& samples = *split == "test" ? dataset.test : dataset.val;
    if (samples.empty())
      throw Error(fmt::format("{}: the {} split is empty (data.{} is not set)", config.source, *split, *split));

    InferenceOptions options;
    options.backend = backend;
    options.threads = static_cast<int>(config.device.threads);
    options.tiles_in_flight = config.device.tiles_in_flight;
    InferenceEngine engine(checkpoint, options);
    const EvaluationReport report = evaluate_split(engine, checkpoint.classes, samples, *split);
    for (const auto& [path, error] : report.failures) spdlog::error("{}", error);

    const fs::path dir = out->empty() ? fs::path(config.output.dir) / fmt::format("eval_{}", *split) : fs::path(*out);
    fs::create_directories(dir);
    write_file_atomically((dir / "summary.json").string(), evaluation_json(report) + "\n");
    write_file_atomically((dir / "confusion.csv").string(), confusion_csv(report.metrics, checkpoint.classes));
    write_file_atomically((dir / "predictions.csv").string(), predictions_csv(report));
    write_confusion_png((dir / "confusion.png").string(), report.metrics, checkpoint.classes);

    const ClassificationMetrics& m = report.metrics;
    if (*json) {
      fmt::print("{}\n", evaluation_json(report));
    } else {
      fmt::print("{} split: {} images ({} failed), {} tiles\n", *split, m.images, report.failures.size(),
                 report.stats.tiles);
      fmt::print("loss {:.4f}  accuracy {:.4f}  balanced accuracy {:.4f}{}\n", m.loss, m.accuracy,
                 m.balanced_accuracy, m.auc ? fmt::format("  ROC AUC {:.4f}", *m.auc) : std::string());
      for (std::size_t k = 0; k < checkpoint.classes.size(); ++k)
        fmt::print("  {:>12}  precision {}  recall {}\n", checkpoint.classes[k],
                   std::isnan(report.precision[k]) ? std::string("  -   ") : fmt::format("{:.4f}", report.precision[k]),
                   std::isnan(m.recall[k]) ? std::string("  -   ") : fmt::format("{:.4f}", m.recall[k]));
      fmt::print("{}", confusion_csv(m, checkpoint.classes));
    }
    spdlog::info("wrote {}/{{summary.json, confusion.csv, confusion.png, predictions.csv}}", dir.string());
    return report.failures.empty() ? 0 : 1;
  });
});

}  // namespace
}  // namespace bigtrain::cli
