#pragma once
// Strict reading of one YAML mapping. Every key a section accepts is asked for by
// name; finish() then rejects whatever was not asked for, listing the keys that are
// valid. A misspelt key must never be silently ignored: a run that trains for the
// default 10 epochs because `epoch: 50` was misspelt wastes a day.
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace bigtrain {

// Where the values came from: the file name for YAML marks, and the `--set`
// overrides by dotted key (their nodes carry no useful line numbers).
struct ConfigOrigin {
  std::string file;                                 // "<string>" for text not from a file
  std::map<std::string, std::string> overrides;     // "train.epochs" -> "--set train.epochs=3"
  // When set, every dotted key a section asks for (sections included) is recorded:
  // the reader's own table of the keys it knows (known_config_keys).
  std::shared_ptr<std::set<std::string>> asked_keys;
};

class ConfigSection {
 public:
  ConfigSection(YAML::Node node, std::string path, std::shared_ptr<const ConfigOrigin> origin);

  // Scalars with a default when the key is absent. A present value of the wrong type
  // or out of range is an Error naming the file, line and key.
  bool get_bool(std::string_view key, bool fallback);
  std::int64_t get_int(std::string_view key, std::int64_t fallback, std::int64_t min, std::int64_t max);
  std::uint64_t get_u64(std::string_view key, std::uint64_t fallback);
  double get_double(std::string_view key, double fallback, double min, double max);
  std::string get_string(std::string_view key, std::string fallback);
  std::string get_choice(std::string_view key, std::string fallback, const std::vector<std::string>& choices);
  std::vector<double> get_doubles(std::string_view key, std::vector<double> fallback);
  std::vector<std::string> get_strings(std::string_view key, std::vector<std::string> fallback);
  // The raw node of a key handed on to another module's parser (the model spec).
  YAML::Node get_node(std::string_view key);
  // A nested mapping; absent keys give an empty section (all defaults).
  ConfigSection section(std::string_view key);

  // Throws when the mapping holds a key nobody asked for.
  void finish() const;

  const std::string& path() const { return path_; }
  // "file:line:column" (1-based) of `key`'s value, or the --set that provided it.
  std::string where(std::string_view key) const;
  [[noreturn]] void fail(std::string_view key, const std::string& message) const;

 private:
  YAML::Node value_of(std::string_view key);
  std::string dotted(std::string_view key) const;

  YAML::Node node_;
  std::string path_;
  std::shared_ptr<const ConfigOrigin> origin_;
  std::set<std::string, std::less<>> asked_;
};

// Applies one `a.b.c=value` override to `root`: the value is parsed as YAML (so
// numbers, booleans and lists work), intermediate mappings are created. The key's
// validity is checked later by the sections that read it.
void apply_override(YAML::Node& root, std::string_view assignment, ConfigOrigin& origin);

}  // namespace bigtrain
