// The header rules are one closed list, named as docs/errors.md lists them.
#include "core/format/header_rule.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::testing::AllOf;

TEST(HeaderRuleTest, TheTableIsInEnumOrderWithUniqueKebabCaseNames) {
  std::set<std::string> names;
  for (size_t i = 0; i < HeaderRuleTable().size(); ++i) {
    const HeaderRuleInfo& info = HeaderRuleTable()[i];
    EXPECT_EQ(static_cast<size_t>(info.rule), i) << info.name;
    EXPECT_TRUE(names.insert(std::string(info.name)).second) << info.name;
    EXPECT_FALSE(info.name.empty());
    for (char c : info.name) {
      EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')
          << info.name;
    }
  }
  EXPECT_EQ(HeaderRuleName(HeaderRule::kDataEnd), HeaderRuleTable().back().name)
      << "a rule appended to the enum needs its row in the table";
}

TEST(HeaderRuleTest, AnErrorCarriesFileRuleAndExtraMetadataInOrder) {
  const absl::Status s = HeaderRuleError(HeaderRule::kOffset, "m", "f.gguf",
                                         {{"tensor", "a"}, {"expected", "0"}});
  EXPECT_THAT(
      s, AllOf(HasReason(ErrorReason::kHeaderInvalid),
               HasMetadata("file", "f.gguf"), HasMetadata("rule", "offset"),
               HasMetadata("tensor", "a"), HasMetadata("expected", "0")));
  const ErrorMetadata m = ReasonMetadataOf(s);
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0].first, "file");
  EXPECT_EQ(m[1].first, "rule");
}

// docs/errors.md holds the table row for row, in this format.
TEST(HeaderRuleTest, DocsListEveryRuleAsTheTableSays) {
  std::ifstream in(TENSORMORPH_DOCS_DIR "/errors.md");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  for (const HeaderRuleInfo& info : HeaderRuleTable()) {
    const std::string row = absl::StrCat("| `", info.name, "` | ", info.formats,
                                         " | ", info.when, " |");
    EXPECT_NE(text.str().find(row), std::string::npos)
        << "docs/errors.md lacks the row\n"
        << row;
  }
}

}  // namespace
}  // namespace tensormorph
