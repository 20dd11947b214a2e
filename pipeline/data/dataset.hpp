#pragma once
// Which images a run trains, validates and tests on, and their labels.
//
// A split is a CSV manifest `path,label` (paths relative to the manifest; an
// optional header line `path,label`; blank lines and lines starting with # are
// skipped; RFC 4180 quoting) or a folder with one sub-folder per class. A label is
// a class name, or an integer index into the class list when it names no class.
// The class list is fixed before any image is read: the config's data.classes, or
// else the sorted distinct labels of the training split (numerically when all are
// integers), and is saved with the run so later splits and inference agree on it.
#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/config/config.hpp"

namespace bigtrain {

struct Sample {
  std::string path;    // absolute
  int label = 0;       // index into Dataset::classes
  std::string origin;  // "train.csv:12" or the folder, for messages
};

struct SkippedSample {
  std::string origin;
  std::string reason;
};

struct Dataset {
  std::vector<std::string> classes;
  std::vector<Sample> train, val, test;
  std::vector<SkippedSample> skipped;  // data.on_bad_image = skip

  std::vector<std::int64_t> class_counts(const std::vector<Sample>& split) const;
};

// One manifest line as written: the label not yet resolved to a class.
struct ManifestEntry {
  std::string path;  // absolute
  std::string label;
  std::string origin;
};

// Reads a manifest file or a class-folder tree. Throws Error naming the file and line.
std::vector<ManifestEntry> read_split(const std::string& manifest_or_folder);

// How much of each image load_dataset checks before training starts.
enum class ImageCheck {
  exists,  // a regular file
  header,  // and its header opens (tiler::open_image: format, size, layout)
};

// Builds the dataset: reads the splits, fixes the classes, resolves labels (an
// unknown label is an Error naming the manifest line), checks that images exist
// and, with ImageCheck::header, open (failing: Error naming the manifest line and
// the reason, or skipped and listed when data.on_bad_image = skip), and splits
// validation off training (stratified, seeded) when data.val is empty. Checking
// headers first means a corrupt scan fails the run in seconds, not in epoch 3.
Dataset load_dataset(const DataConfig& config, std::uint64_t seed, ImageCheck check = ImageCheck::exists);

// Stratified split: for each class, a seeded shuffle sends round(n * fraction)
// samples (at least one when the class has two or more) to the second part. The
// order of both parts is the input order.
void stratified_split(const std::vector<Sample>& all, std::size_t num_classes, double fraction, std::uint64_t seed,
                      std::vector<Sample>& keep, std::vector<Sample>& held_out);

}  // namespace bigtrain
