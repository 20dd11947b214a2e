// The oracle of docs/learning.md: for every label object of a make-demo-data split
// (SPLIT.objects.csv, role "label"), one window of --side pixels that holds it whole
// at a random offset, saved as a PNG with the object's class. These are the tiles a
// perfect tile selection would hand the encoder, with their true labels: training on
// them tells whether the encoder can read the evidence at all, apart from the weak
// label (docs/learning.md, "the oracle").
//
//   evidence_crops_cpp --data data/seed10c --split train --out data/oracle [--side 192] [--seed 1]
#include <CLI/CLI.hpp>
#include <opencv2/imgcodecs.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct LabelObject {
  int value = 0, x = 0, y = 0, width = 0, height = 0;
};

[[noreturn]] void fail(const std::string& message) {
  std::cerr << "evidence_crops: " << message << "\n";
  std::exit(1);
}

std::map<std::string, std::vector<LabelObject>> read_label_objects(const std::filesystem::path& objects_csv) {
  std::ifstream in(objects_csv);
  if (!in) fail(objects_csv.string() + ": cannot open (make-demo-data writes it beside each split's manifest)");
  std::string line;
  std::getline(in, line);
  if (line.rfind("path,role,value,x,y,width,height", 0) != 0)
    fail(objects_csv.string() + ": header is '" + line + "', expected path,role,value,x,y,width,height");
  std::map<std::string, std::vector<LabelObject>> by_image;
  for (int row = 2; std::getline(in, line); ++row) {
    std::stringstream fields(line);
    std::vector<std::string> f(7);
    for (auto& field : f) std::getline(fields, field, ',');
    if (f[1] != "label") continue;
    try {
      by_image[f[0]].push_back({std::stoi(f[2]), std::stoi(f[3]), std::stoi(f[4]), std::stoi(f[5]), std::stoi(f[6])});
    } catch (const std::exception&) {
      fail(objects_csv.string() + ":" + std::to_string(row) + ": not a number in '" + line + "'");
    }
  }
  return by_image;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Crops a window around every label object of a make-demo-data split"};
  std::filesystem::path data, out;
  std::string split = "train";
  int side = 192;
  unsigned seed = 1;
  app.add_option("--data", data, "folder make-demo-data wrote")->required();
  app.add_option("--split", split, "train, val or test")->capture_default_str();
  app.add_option("--out", out, "folder for the crops and SPLIT.csv")->required();
  app.add_option("--side", side, "window side in pixels")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--seed", seed, "offset of each object in its window")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const auto by_image = read_label_objects(data / (split + ".objects.csv"));
  std::filesystem::create_directories(out);
  std::mt19937 rng(seed);
  const std::filesystem::path manifest_path = out / (split + ".csv");
  const std::filesystem::path partial = out / (split + ".csv.partial");
  std::ofstream manifest(partial);
  manifest << "path,label\n";
  int crops = 0;
  for (const auto& [path, objects] : by_image) {
    const cv::Mat image = cv::imread((data / path).string(), cv::IMREAD_UNCHANGED);
    if (image.empty()) fail((data / path).string() + ": cannot read the image");
    if (image.cols < side || image.rows < side)
      fail((data / path).string() + ": smaller than the " + std::to_string(side) + "-pixel window");
    for (const LabelObject& o : objects) {
      if (o.width > side || o.height > side)
        fail((data / path).string() + ": a label object of " + std::to_string(o.width) + "x" +
             std::to_string(o.height) + " does not fit a window of " + std::to_string(side));
      // Any window holding the object wholly: the object is not always in the middle,
      // as in a real tile grid.
      const int x0 = std::clamp(o.x + o.width - side + static_cast<int>(rng() % (side - o.width + 1)), 0, image.cols - side);
      const int y0 = std::clamp(o.y + o.height - side + static_cast<int>(rng() % (side - o.height + 1)), 0, image.rows - side);
      const std::string name = split + "_" + std::to_string(crops++) + ".png";
      if (!cv::imwrite((out / name).string(), image(cv::Rect(x0, y0, side, side))))
        fail((out / name).string() + ": cannot write");
      manifest << name << "," << o.value << "\n";
    }
  }
  manifest.close();
  if (!manifest) fail(partial.string() + ": write failed");
  std::filesystem::rename(partial, manifest_path);
  std::cout << split << ": " << crops << " crops of " << side << "x" << side << " from " << by_image.size()
            << " images -> " << manifest_path.string() << "\n";
}
