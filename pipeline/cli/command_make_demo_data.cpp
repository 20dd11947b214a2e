// `bigtrain make-demo-data`: the Megapixel-MNIST-style demo set (scripts/make_demo_data drives it).
#include <algorithm>
#include <cctype>
#include <chrono>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "pipeline/cli/command_registry.hpp"
#include "pipeline/data/demo_data.hpp"

namespace bigtrain::cli {
namespace {

int parse_class(const std::string& item, int largest) {
  const bool digits = !item.empty() && item.size() <= 2 && std::all_of(item.begin(), item.end(), ::isdigit);
  const int value = digits ? std::stoi(item) : -1;
  if (value < 0 || value > largest)
    throw Error(fmt::format("--classes: '{}' is not a number 0..{} (e.g. --classes 3,5,8 or 0-49)", item, largest));
  return value;
}

// "3,5,8" or ranges "0-49"; numbers up to 9 for digits, 99 for --number-digits 2.
std::vector<int> parse_classes(const std::string& text, int largest) {
  std::vector<int> classes;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    const auto dash = item.find('-');
    if (dash == std::string::npos) {
      classes.push_back(parse_class(item, largest));
      continue;
    }
    const int first = parse_class(item.substr(0, dash), largest), last = parse_class(item.substr(dash + 1), largest);
    if (first > last) throw Error(fmt::format("--classes: the range '{}' is empty", item));
    for (int value = first; value <= last; ++value) classes.push_back(value);
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
  app.add_option("--digit-size", options->digit_size, "side of a digit on the canvas, pixels")->capture_default_str();
  app.add_option("--number-digits", options->number_digits,
                 "digits per object: 2 makes the classes two-digit numbers (--classes 0-49)")
      ->capture_default_str();
  app.add_option("--background", options->background,
                 "black, or textured (illumination gradient, smooth texture, pixel noise)")
      ->capture_default_str();
  app.add_option("--strokes", options->strokes, "curved strokes of digit width per canvas (clutter)")
      ->capture_default_str();
  app.add_option("--fragments", options->fragments, "pieces of other MNIST digits per canvas (clutter)")
      ->capture_default_str();
  app.add_option("--label-digits", options->label_digits, "copies of the label's digit (or number) per canvas")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--other-digits", options->other_digits,
                 "digits of other classes per canvas (0: every whole digit shows the label)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--block,--tile", options->block_size, "side of the TIFFs' square storage blocks")
      ->capture_default_str();
  app.add_option("--seed", options->seed, "random seed")->capture_default_str();
  return std::function<int()>([options, mnist, classes] {
    options->classes = parse_classes(*classes, options->number_digits == 2 ? 99 : 9);
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
