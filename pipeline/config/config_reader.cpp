#include "pipeline/config/config_reader.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kernels/core/error.hpp"

namespace bigtrain {
namespace {

std::string describe_value(const YAML::Node& node) {
  if (node.IsScalar()) return fmt::format("'{}'", node.Scalar());
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "nothing";
}

bool is_prefix_key(const std::string& prefix, const std::string& key) {
  return key == prefix || (key.size() > prefix.size() && key.compare(0, prefix.size(), prefix) == 0 &&
                           key[prefix.size()] == '.');
}

}  // namespace

ConfigSection::ConfigSection(YAML::Node node, std::string path, std::shared_ptr<const ConfigOrigin> origin)
    : node_(std::move(node)), path_(std::move(path)), origin_(std::move(origin)) {}

std::string ConfigSection::dotted(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

std::string ConfigSection::where(std::string_view key) const {
  const std::string full = key.empty() ? path_ : dotted(key);
  // The longest override that covers this key names it best.
  const std::string* best = nullptr;
  std::size_t best_length = 0;
  for (const auto& [override_key, text] : origin_->overrides) {
    if (is_prefix_key(override_key, full) && override_key.size() >= best_length) {
      best = &text;
      best_length = override_key.size();
    }
  }
  if (best) return *best;
  // A value --set created below this key (`--set train.epochs.x=1` makes `epochs` a mapping).
  for (const auto& [override_key, text] : origin_->overrides)
    if (!full.empty() && is_prefix_key(full, override_key)) return text;
  YAML::Mark mark = YAML::Mark::null_mark();
  if (node_.IsMap() && !key.empty()) {
    for (const auto& entry : node_) {
      if (entry.first.IsScalar() && entry.first.Scalar() == key) {
        mark = entry.first.Mark();
        break;
      }
    }
  }
  if (mark.is_null() && node_.IsDefined()) mark = node_.Mark();
  if (mark.is_null()) return origin_->file;
  return fmt::format("{}:{}:{}", origin_->file, mark.line + 1, mark.column + 1);
}

void ConfigSection::fail(std::string_view key, const std::string& message) const {
  throw Error(fmt::format("{}: `{}` {}", where(key), key.empty() ? path_ : dotted(key), message));
}

YAML::Node ConfigSection::value_of(std::string_view key) {
  asked_.emplace(key);
  if (origin_->asked_keys) origin_->asked_keys->insert(dotted(key));
  if (!node_.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  const YAML::Node& map = node_;  // const lookup never inserts the key
  YAML::Node value = map[std::string(key)];
  if (!value.IsDefined() || value.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
  return value;
}

bool ConfigSection::get_bool(std::string_view key, bool fallback) {
  YAML::Node value = value_of(key);
  if (!value.IsDefined()) return fallback;
  bool result = false;
  if (!value.IsScalar() || !YAML::convert<bool>::decode(value, result))
    fail(key, fmt::format("must be true or false, got {}", describe_value(value)));
  return result;
}

std::int64_t ConfigSection::get_int(std::string_view key, std::int64_t fallback, std::int64_t min, std::int64_t max) {
  YAML::Node value = value_of(key);
  if (!value.IsDefined()) return fallback;
  std::int64_t result = 0;
  if (!value.IsScalar() || !YAML::convert<std::int64_t>::decode(value, result))
    fail(key, fmt::format("must be an integer, got {}", describe_value(value)));
  if (result < min || result > max) fail(key, fmt::format("must be in [{}, {}], got {}", min, max, result));
  return result;
}

std::uint64_t ConfigSection::get_u64(std::string_view key, std::uint64_t fallback) {
  YAML::Node value = value_of(key);
  if (!value.IsDefined()) return fallback;
  std::uint64_t result = 0;
  if (!value.IsScalar() || value.Scalar().starts_with('-') || !YAML::convert<std::uint64_t>::decode(value, result))
    fail(key, fmt::format("must be a non-negative integer, got {}", describe_value(value)));
  return result;
}

double ConfigSection::get_double(std::string_view key, double fallback, double min, double max) {
  YAML::Node value = value_of(key);
  if (!value.IsDefined()) return fallback;
  double result = 0.0;
  if (!value.IsScalar() || !YAML::convert<double>::decode(value, result) || result != result)
    fail(key, fmt::format("must be a number, got {}", describe_value(value)));
  if (result < min || result > max) fail(key, fmt::format("must be in [{}, {}], got {}", min, max, result));
  return result;
}

std::string ConfigSection::get_string(std::string_view key, std::string fallback) {
  YAML::Node value = value_of(key);
  if (!value.IsDefined()) return fallback;
  if (!value.IsScalar()) fail(key, fmt::format("must be a string, got {}", describe_value(value)));
  return value.Scalar();
}

std::string ConfigSection::get_choice(std::string_view key, std::string fallback,
                                      const std::vector<std::string>& choices) {
  std::string result = get_string(key, std::move(fallback));
  for (const auto& choice : choices)
    if (choice == result) return result;
  fail(key, fmt::format("must be one of {}, got '{}'", fmt::join(choices, " | "), result));
}

std::vector<double> ConfigSection::get_doubles(std::string_view key, std::vector<double> fallback) {
  YAML::Node value = value_of(key);
  if (!value.IsDefined()) return fallback;
  if (!value.IsSequence()) fail(key, fmt::format("must be a list of numbers, got {}", describe_value(value)));
  std::vector<double> result;
  for (const auto& item : value) {
    double number = 0.0;
    if (!item.IsScalar() || !YAML::convert<double>::decode(item, number))
      fail(key, fmt::format("must be a list of numbers, but holds {}", describe_value(item)));
    result.push_back(number);
  }
  return result;
}

std::vector<std::string> ConfigSection::get_strings(std::string_view key, std::vector<std::string> fallback) {
  YAML::Node value = value_of(key);
  if (!value.IsDefined()) return fallback;
  if (!value.IsSequence()) fail(key, fmt::format("must be a list of strings, got {}", describe_value(value)));
  std::vector<std::string> result;
  for (const auto& item : value) {
    if (!item.IsScalar()) fail(key, fmt::format("must be a list of strings, but holds {}", describe_value(item)));
    result.push_back(item.Scalar());
  }
  return result;
}

YAML::Node ConfigSection::get_node(std::string_view key) { return value_of(key); }

ConfigSection ConfigSection::section(std::string_view key) {
  YAML::Node value = value_of(key);
  if (value.IsDefined() && !value.IsMap()) fail(key, fmt::format("must be a mapping of keys, got {}", describe_value(value)));
  return ConfigSection(value, dotted(key), origin_);
}

void ConfigSection::finish() const {
  if (!node_.IsMap()) return;
  for (const auto& entry : node_) {
    const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : std::string("<non-scalar key>");
    if (asked_.contains(key)) continue;
    throw Error(fmt::format("{}: unknown key `{}`; valid keys{}: {}", where(key), dotted(key),
                            path_.empty() ? std::string() : fmt::format(" in `{}`", path_), fmt::join(asked_, ", ")));
  }
}

void apply_override(YAML::Node& root, std::string_view assignment, ConfigOrigin& origin) {
  const std::string text(assignment);
  const auto equals = assignment.find('=');
  BT_CHECK(equals != std::string_view::npos && equals > 0, "--set {}: expected KEY=VALUE, e.g. --set train.epochs=5",
           text);
  const std::string key(assignment.substr(0, equals));
  const std::string value_text(assignment.substr(equals + 1));
  std::vector<std::string> parts;
  for (std::size_t begin = 0;;) {
    const auto dot = key.find('.', begin);
    parts.push_back(key.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin));
    BT_CHECK(!parts.back().empty(), "--set {}: the key `{}` has an empty part", text, key);
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  YAML::Node value;
  try {
    value = value_text.empty() ? YAML::Node(YAML::NodeType::Null) : YAML::Load(value_text);
  } catch (const YAML::Exception& error) {
    throw Error(fmt::format("--set {}: the value is not valid YAML: {}", text, error.msg));
  }
  if (!root.IsMap()) root = YAML::Node(YAML::NodeType::Map);
  YAML::Node current = root;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node child = current[parts[i]];
    if (!child.IsDefined() || child.IsNull()) {
      current[parts[i]] = YAML::Node(YAML::NodeType::Map);
      child = current[parts[i]];
    }
    BT_CHECK(child.IsMap(), "--set {}: `{}` is a value, not a section with keys", text, parts[i]);
    current.reset(child);
  }
  current[parts.back()] = value;
  origin.overrides[key] = "--set " + text;
}

}  // namespace bigtrain
