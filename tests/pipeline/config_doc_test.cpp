// docs/config.md against the config reader: every key the reader knows is
// documented, every documented key exists, and each documented default is the one
// the code fills in. The key set comes from the reader's own record of the keys it
// asks for (known_config_keys), not from a list kept by hand.
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "pipeline/config/config.hpp"

namespace bigtrain {
namespace {

const char* const kDoc = BIGTRAIN_SOURCE_DIR "/docs/config.md";

// key -> its default cell, from the table rows "| `section.key` | default | ..."
std::map<std::string, std::string> documented_keys() {
  std::ifstream in(kDoc);
  EXPECT_TRUE(in) << "cannot open " << kDoc;
  std::map<std::string, std::string> keys;
  const std::regex row(R"(^\| `([a-z_.0-9]+)` \| ([^|]*) \|)");
  for (std::string line; std::getline(in, line);) {
    std::smatch match;
    if (!std::regex_search(line, match, row)) continue;
    std::string cell = match[2].str();
    while (!cell.empty() && cell.back() == ' ') cell.pop_back();
    EXPECT_TRUE(keys.emplace(match[1].str(), cell).second) << match[1].str() << " is documented twice";
  }
  return keys;
}

TEST(ConfigDoc, EveryKeyOfTheReaderIsDocumentedAndNoOther) {
  const std::vector<std::string> code = known_config_keys();
  ASSERT_GT(code.size(), 50u);  // the reader's record works at all
  const std::map<std::string, std::string> doc = documented_keys();
  std::set<std::string> code_set(code.begin(), code.end());
  for (const auto& key : code_set)
    EXPECT_TRUE(doc.contains(key)) << "`" << key << "` is a config key (pipeline/config/config.cpp, net/model_spec.cpp) "
                                   << "missing from docs/config.md: add a row with its default, range and meaning";
  for (const auto& [key, unused] : doc)
    EXPECT_TRUE(code_set.contains(key)) << "docs/config.md documents `" << key << "`, which the config reader does not know";
}

// A documented default against the resolved config's value: numbers numerically,
// lists and words as written, "empty" for an empty string or list.
TEST(ConfigDoc, DocumentedDefaultsAreTheCodes) {
  const Config config = parse_config("data: {train: data.csv}", "<defaults>");
  const YAML::Node resolved = YAML::Load(config_to_yaml(config));
  int checked = 0;
  for (const auto& [key, cell] : documented_keys()) {
    // Required, model (net's preset-dependent defaults) and paths resolved at load: not comparable.
    if (key == "data.train" || key.starts_with("model.") || key == "output.dir") continue;
    YAML::Node value = YAML::Clone(resolved);
    std::stringstream parts(key);
    for (std::string part; std::getline(parts, part, '.');) value = value[part];
    if (cell == "empty") {
      EXPECT_TRUE(!value.IsDefined() || value.IsNull() || (value.IsScalar() && value.Scalar().empty()))
          << key << " is documented as empty";
      ++checked;
      continue;
    }
    ASSERT_TRUE(value.IsDefined()) << key << " is not in the resolved config";
    if (cell.size() > 2 && cell.front() == '`' && cell.back() == '`') {
      // A default that is another key's value: "`data.normalize`".
      YAML::Node other = YAML::Clone(resolved);
      std::stringstream other_parts(cell.substr(1, cell.size() - 2));
      for (std::string part; std::getline(other_parts, part, '.');) other = other[part];
      ASSERT_TRUE(other.IsDefined() && other.IsScalar()) << key << ": documented as " << cell << ", not a key";
      EXPECT_EQ(value.Scalar(), other.Scalar()) << key << " defaults to " << cell;
      ++checked;
      continue;
    }
    const YAML::Node documented = YAML::Load(cell);
    if (value.IsSequence()) {
      EXPECT_EQ(YAML::Dump(value), YAML::Dump(documented)) << key;
    } else {
      double a = 0, b = 0;
      if (YAML::convert<double>::decode(value, a) && YAML::convert<double>::decode(documented, b))
        EXPECT_DOUBLE_EQ(a, b) << key << ": documented default " << cell << ", the code's " << value.Scalar();
      else
        EXPECT_EQ(value.Scalar(), documented.Scalar()) << key;
    }
    ++checked;
  }
  EXPECT_GT(checked, 40);
}

}  // namespace
}  // namespace bigtrain
