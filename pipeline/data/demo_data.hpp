#pragma once
// The demo dataset: Megapixel-MNIST-style canvases (Katharopoulos & Fleuret 2019)
// built from real MNIST digits. Each canvas is black with `label_digits` digits of
// its class, `other_digits` digits of other classes (never a majority) and
// line-shaped clutter, at 28 pixels per digit: the class is readable only at full
// resolution (resized to 224, a 1500-pixel canvas shrinks digits to ~4 pixels).
// Written as tiled, Deflate-compressed grayscale TIFFs with train/val/test manifests.
//
// The seed-scale options (issue 16) make the problem of the seeds instead: larger
// digits (digit_size), two-digit numbers as objects (number_digits 2: up to 100
// classes), a textured background (an illumination gradient, smooth texture and
// pixel noise, so no global brightness threshold separates objects from it) and
// clutter as bright as the digits (curved strokes, fragments of other MNIST digits).
// Every split also gets `<split>.objects.csv`, where each object is: the generator
// knows which tiles hold the evidence, so training diagnostics can measure it.
#include <cstdint>
#include <string>
#include <vector>

namespace bigtrain {

struct MnistDigits {
  std::int64_t count = 0;
  std::vector<std::uint8_t> pixels;  // count x 28 x 28, 0 = background
  std::vector<int> labels;
  const std::uint8_t* image(std::int64_t index) const { return pixels.data() + index * 28 * 28; }
};

// Reads MNIST's gzip'd IDX pair (as scripts/fetch_mnist writes them). Throws Error
// naming the file for anything that is not a well-formed IDX file.
MnistDigits load_mnist(const std::string& images_gz, const std::string& labels_gz);
// The pair from a folder holding mnist-images-idx3-ubyte.gz and mnist-labels-idx1-ubyte.gz.
MnistDigits load_mnist_folder(const std::string& folder);

struct DemoDataOptions {
  std::string out;
  std::int64_t size = 1500;            // canvas width = height, pixels
  std::vector<int> classes = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::int64_t train = 400, val = 100, test = 100;  // images per split (classes balanced)
  int label_digits = 3;
  int other_digits = 2;
  int clutter_lines = -1;  // -1: 50 per 1500x1500, scaled with the area
  int block_size = 256;    // the TIFF's storage blocks (not the network's tiles)
  std::uint64_t seed = 0;
  // Training canvases draw digits from the first `train_digit_fraction` of MNIST,
  // validation and test canvases from the rest: no digit image appears in both.
  double train_digit_fraction = 0.8;

  // Seed-scale options; the defaults leave the original demo's canvases unchanged.
  int digit_size = 28;              // side of a digit on the canvas (MNIST's 28 resampled)
  int number_digits = 1;            // digits per object: 2 makes `classes` numbers 0..99, labels "00".."99"
  std::string background = "black";  // black | textured
  int strokes = 0;                  // curved strokes of digit width (clutter)
  int fragments = 0;                // pieces of other MNIST digits (clutter)
};

// One object of a canvas, as written to <split>.objects.csv.
struct DemoObject {
  std::string role;   // label (one of the label's copies) | other | fragment
  int value = 0;      // the digit or number shown (-1 for a fragment)
  int x = 0, y = 0, width = 0, height = 0;  // level-0 pixels
};

// Reads <split>.objects.csv: objects per image path as written in the manifest
// (relative to the manifest's folder). Throws Error naming the file and line.
std::vector<std::pair<std::string, std::vector<DemoObject>>> read_demo_objects(const std::string& objects_csv);

struct DemoDataSummary {
  std::int64_t images = 0;
  std::vector<std::string> manifests;  // train.csv, val.csv, test.csv (those with images)
};

// Writes <out>/<split>/<index>.tif, <out>/<split>.csv (`path,label`, label = the
// digit, or the number zero-padded to number_digits) and <out>/<split>.objects.csv
// (`path,role,value,x,y,width,height`). Deterministic for a seed; images are built in
// parallel.
DemoDataSummary make_demo_data(const DemoDataOptions& options, const MnistDigits& digits);

}  // namespace bigtrain
