// `bigtrain make-demo-data`: the Megapixel-MNIST-style demo set (scripts/make_demo_data drives it).
#include <chrono>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "pipeline/cli/command_registry.hpp"
#include "pipeline/demo_data.hpp"

namespace bigtrain::cli {
namespace {

std::vector<int> parse_classes(const std::string& text) {
  std::vector<int> classes;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    if (item.size() != 1 || item[0] < '0' || item[0] > '9')
      throw Error(fmt::format("--classes: '{}' is not a digit 0..9 (e.g. --classes 3,5,8)", item));
    classes.push_back(item[0] - '0');
  }
  return classes;
}

RegisterCommand make_demo_data_command("make-demo-data", [](CLI::App& app) {
  app.description("Write the demo dataset: large canvases of MNIST digits (label = the majority digit) as tiled TIFFs");
  auto options = std::make_shared<DemoDataOptions>();
  auto mnist = std::make_shared<std::string>();
  auto classes = std::make_shared<std::string>("0,1,2,3,4,5,6,7,8,9");
  app.add_option("--out", options->out, "output folder (train/, val/, test/ and their .csv manifests)")->required();
  app.add_option("--mnist", *mnist, "folder with mnist-images-idx3-ubyte.gz and mnist-labels-idx1-ubyte.gz")
      ->required();
  app.add_option("--size", options->size, "canvas width and height in pixels")->capture_default_str();
  app.add_option("--classes", *classes, "digits used as classes, comma-separated")->capture_default_str();
  app.add_option("--train", options->train, "training images")->capture_default_str();
  app.add_option("--val", options->val, "validation images")->capture_default_str();
  app.add_option("--test", options->test, "test images")->capture_default_str();
  app.add_option("--clutter", options->clutter_lines, "clutter lines per canvas (-1: 50 per 1500x1500)")
      ->capture_default_str();
  app.add_option("--tile", options->tile_size, "TIFF tile size")->capture_default_str();
  app.add_option("--seed", options->seed, "random seed")->capture_default_str();
  return std::function<int()>([options, mnist, classes] {
    options->classes = parse_classes(*classes);
    const auto started = std::chrono::steady_clock::now();
    const MnistDigits digits = load_mnist_folder(*mnist);
    const DemoDataSummary summary = make_demo_data(*options, digits);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    spdlog::info("wrote {} images of {}x{} to {} in {:.1f} s", summary.images, options->size, options->size,
                 options->out, seconds);
    for (const auto& manifest : summary.manifests) fmt::print("{}\n", manifest);
    return 0;
  });
});

}  // namespace
}  // namespace bigtrain::cli
