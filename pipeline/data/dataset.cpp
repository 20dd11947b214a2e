#include "pipeline/data/dataset.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kernels/core/error.hpp"
#include "pipeline/common/random.hpp"
#include "tiler/image_source.hpp"

namespace bigtrain {
namespace fs = std::filesystem;
namespace {

std::string trim(std::string_view text) {
  const auto begin = text.find_first_not_of(" \t\r");
  if (begin == std::string_view::npos) return {};
  const auto end = text.find_last_not_of(" \t\r");
  return std::string(text.substr(begin, end - begin + 1));
}

// RFC 4180 fields of one line ("a,b", "\"a,b\",c", quotes doubled inside quotes).
std::vector<std::string> split_csv_line(const std::string& line, const std::string& origin) {
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false, was_quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"' && trim(field).empty()) {
      quoted = was_quoted = true;
      field.clear();
    } else if (c == ',') {
      fields.push_back(was_quoted ? field : trim(field));
      field.clear();
      was_quoted = false;
    } else {
      field += c;
    }
  }
  if (quoted) throw Error(fmt::format("{}: unterminated quote", origin));
  fields.push_back(was_quoted ? field : trim(field));
  return fields;
}

bool parse_index(const std::string& text, long long& value) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end;
}

bool is_image_file(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  static const std::set<std::string> kExtensions = {".tif", ".tiff", ".btf", ".png", ".jpg", ".jpeg", ".bmp"};
  return kExtensions.contains(ext);
}

std::vector<ManifestEntry> read_manifest(const std::string& manifest) {
  std::ifstream in(manifest);
  if (!in) throw Error(fmt::format("{}: cannot open the manifest", manifest));
  const fs::path base = fs::absolute(manifest).parent_path();
  std::vector<ManifestEntry> entries;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const std::string origin = fmt::format("{}:{}", manifest, number);
    const std::string stripped = trim(line);
    if (stripped.empty() || stripped.front() == '#') continue;
    const auto fields = split_csv_line(line, origin);
    if (number == 1 && fields.size() == 2 && fields[0] == "path" && fields[1] == "label") continue;
    if (fields.size() != 2)
      throw Error(fmt::format("{}: expected 2 fields `path,label`, found {}", origin, fields.size()));
    if (fields[0].empty()) throw Error(fmt::format("{}: the image path is empty", origin));
    if (fields[1].empty()) throw Error(fmt::format("{}: the label of '{}' is missing", origin, fields[0]));
    fs::path path(fields[0]);
    if (path.is_relative()) path = base / path;
    entries.push_back({path.lexically_normal().string(), fields[1], origin});
  }
  if (in.bad()) throw Error(fmt::format("{}: read error", manifest));
  if (entries.empty()) throw Error(fmt::format("{}: the manifest lists no images", manifest));
  return entries;
}

std::vector<ManifestEntry> read_class_folders(const std::string& root) {
  std::vector<fs::path> class_dirs;
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.is_directory()) class_dirs.push_back(entry.path());
  std::sort(class_dirs.begin(), class_dirs.end());
  std::vector<ManifestEntry> entries;
  for (const auto& dir : class_dirs) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.is_regular_file() && is_image_file(entry.path())) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const auto& file : files)
      entries.push_back({fs::absolute(file).lexically_normal().string(), dir.filename().string(), dir.string()});
  }
  if (entries.empty())
    throw Error(fmt::format("{}: no images found in class sub-folders (expected {}/<class>/<image>)", root, root));
  return entries;
}

std::vector<std::string> classes_from_labels(const std::vector<ManifestEntry>& entries) {
  std::vector<std::string> labels;
  bool all_integers = true;
  for (const auto& entry : entries) {
    long long value = 0;
    all_integers = all_integers && parse_index(entry.label, value);
    if (std::find(labels.begin(), labels.end(), entry.label) == labels.end()) labels.push_back(entry.label);
  }
  if (all_integers) {
    std::sort(labels.begin(), labels.end(), [](const std::string& a, const std::string& b) {
      long long x = 0, y = 0;
      parse_index(a, x);
      parse_index(b, y);
      return x < y;
    });
  } else {
    std::sort(labels.begin(), labels.end());
  }
  return labels;
}

int resolve_label(const ManifestEntry& entry, const std::vector<std::string>& classes) {
  const auto found = std::find(classes.begin(), classes.end(), entry.label);
  if (found != classes.end()) return static_cast<int>(found - classes.begin());
  long long index = 0;
  if (parse_index(entry.label, index) && index >= 0 && index < static_cast<long long>(classes.size()))
    return static_cast<int>(index);
  throw Error(fmt::format("{}: unknown label '{}'; the classes are {} (or their indices 0..{})", entry.origin,
                          entry.label, fmt::join(classes, ", "), classes.size() - 1));
}

// Why the image of `entry` cannot be used, or empty.
std::string image_problem(const ManifestEntry& entry, ImageCheck check) {
  std::error_code error;
  if (!fs::is_regular_file(entry.path, error))
    return fmt::format("image '{}' does not exist or is not a file", entry.path);
  if (check == ImageCheck::header) {
    try {
      tiler::open_image(entry.path);
    } catch (const std::exception& failure) {
      return failure.what();  // the tiler's errors name the file
    }
  }
  return {};
}

std::vector<Sample> resolve_split(const std::vector<ManifestEntry>& entries, const std::vector<std::string>& classes,
                                  bool skip_bad, ImageCheck check, std::vector<SkippedSample>& skipped) {
  std::vector<Sample> samples;
  samples.reserve(entries.size());
  for (const auto& entry : entries) {
    // Labels first, always an error: a wrong class name is a manifest mistake that
    // skipping would hide, not a bad scan.
    const int label = resolve_label(entry, classes);
    const std::string problem = image_problem(entry, check);
    if (!problem.empty()) {
      if (!skip_bad) throw Error(fmt::format("{}: {} (data.on_bad_image: skip leaves such images out)", entry.origin, problem));
      skipped.push_back({entry.origin, problem});
      continue;
    }
    samples.push_back({entry.path, label, entry.origin});
  }
  return samples;
}

}  // namespace

std::vector<std::int64_t> Dataset::class_counts(const std::vector<Sample>& split) const {
  std::vector<std::int64_t> counts(classes.size(), 0);
  for (const auto& sample : split) ++counts.at(static_cast<std::size_t>(sample.label));
  return counts;
}

std::vector<ManifestEntry> read_split(const std::string& manifest_or_folder) {
  std::error_code error;
  if (fs::is_directory(manifest_or_folder, error)) return read_class_folders(manifest_or_folder);
  if (!fs::exists(manifest_or_folder, error))
    throw Error(fmt::format("{}: no such manifest or class folder", manifest_or_folder));
  return read_manifest(manifest_or_folder);
}

void stratified_split(const std::vector<Sample>& all, std::size_t num_classes, double fraction, std::uint64_t seed,
                      std::vector<Sample>& keep, std::vector<Sample>& held_out) {
  std::vector<std::vector<std::size_t>> by_class(num_classes);
  for (std::size_t i = 0; i < all.size(); ++i) by_class.at(static_cast<std::size_t>(all[i].label)).push_back(i);
  std::vector<bool> is_held_out(all.size(), false);
  for (std::size_t c = 0; c < num_classes; ++c) {
    auto& members = by_class[c];
    // One stream per class: adding images of one class never moves another class's split.
    SplitMix64 rng(mix_seed(seed, 0x5B117ull, c));
    seeded_shuffle(members, rng);
    std::size_t count = static_cast<std::size_t>(std::llround(static_cast<double>(members.size()) * fraction));
    if (fraction > 0 && count == 0 && members.size() >= 2) count = 1;
    if (count >= members.size() && members.size() >= 1) count = members.size() - 1;  // keep one to train on
    for (std::size_t k = 0; k < count; ++k) is_held_out[members[k]] = true;
  }
  keep.clear();
  held_out.clear();
  for (std::size_t i = 0; i < all.size(); ++i) (is_held_out[i] ? held_out : keep).push_back(all[i]);
}

Dataset load_dataset(const DataConfig& config, std::uint64_t seed, ImageCheck check) {
  Dataset dataset;
  const bool skip_bad = config.on_bad_image == OnBadImage::skip;
  const auto train_entries = read_split(config.train);
  dataset.classes = config.classes.empty() ? classes_from_labels(train_entries) : config.classes;
  {
    std::set<std::string> unique(dataset.classes.begin(), dataset.classes.end());
    BT_CHECK(unique.size() == dataset.classes.size(), "data.classes lists a class twice: {}",
             fmt::join(dataset.classes, ", "));
    BT_CHECK(dataset.classes.size() >= 2, "{}: a classifier needs at least two classes, found {}", config.train,
             fmt::join(dataset.classes, ", "));
  }
  auto train = resolve_split(train_entries, dataset.classes, skip_bad, check, dataset.skipped);
  if (!config.val.empty()) {
    dataset.train = std::move(train);
    dataset.val = resolve_split(read_split(config.val), dataset.classes, skip_bad, check, dataset.skipped);
  } else if (config.val_fraction > 0) {
    stratified_split(train, dataset.classes.size(), config.val_fraction, seed, dataset.train, dataset.val);
  } else {
    dataset.train = std::move(train);
  }
  if (!config.test.empty())
    dataset.test = resolve_split(read_split(config.test), dataset.classes, skip_bad, check, dataset.skipped);
  BT_CHECK(!dataset.train.empty(), "{}: no usable training images", config.train);
  return dataset;
}

}  // namespace bigtrain
