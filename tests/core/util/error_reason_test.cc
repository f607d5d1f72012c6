// The error reasons: one closed list, carried by a Status as a payload that
// survives copies, and documented row for row in docs/errors.md.
#include "core/util/error_reason.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasReason;
using ::testing::ElementsAre;
using ::testing::Pair;

TEST(ErrorReasonTest, TableIsInEnumOrderWithUniqueUpperSnakeNames) {
  std::set<std::string> names;
  for (size_t i = 0; i < ErrorReasonTable().size(); ++i) {
    const ErrorReasonInfo& info = ErrorReasonTable()[i];
    EXPECT_EQ(static_cast<size_t>(info.reason), i) << info.name;
    EXPECT_TRUE(names.insert(std::string(info.name)).second) << info.name;
    for (char c : info.name) {
      EXPECT_TRUE((c >= 'A' && c <= 'Z') || c == '_') << info.name;
    }
  }
}

TEST(ErrorReasonTest, EveryCodeButOkHasOneGenericReason) {
  for (int c = 1; c <= 16; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    int generic = 0;
    for (const ErrorReasonInfo& info : ErrorReasonTable()) {
      generic += info.generic && info.code == code;
    }
    EXPECT_EQ(generic, 1) << absl::StatusCodeToString(code);
    EXPECT_EQ(InfoOf(GenericReason(code)).code, code);
  }
}

TEST(ErrorReasonTest, AttachedReasonAndMetadataSurviveCopies) {
  const absl::Status s = WithReason(
      absl::NotFoundError("no tensor 'x'"), ErrorReason::kTensorNotFound,
      {{"checkpoint", "m.gguf"}, {"tensor", "x:,1\n2"}});
  const absl::Status copy = s;
  EXPECT_EQ(AttachedReasonOf(copy), "TENSOR_NOT_FOUND");
  EXPECT_THAT(ReasonMetadataOf(copy), ElementsAre(Pair("checkpoint", "m.gguf"),
                                                  Pair("tensor", "x:,1\n2")));
  EXPECT_THAT(copy, HasReason(ErrorReason::kTensorNotFound));
  EXPECT_EQ(copy.message(), "no tensor 'x'");
}

TEST(ErrorReasonTest, WithoutAnAttachedReasonTheCodesGenericOne) {
  const absl::Status s = absl::InvalidArgumentError("bad");
  EXPECT_EQ(AttachedReasonOf(s), "");
  EXPECT_EQ(ReasonNameOf(s), "REQUEST_INVALID");
  EXPECT_THAT(s, HasReason(ErrorReason::kRequestInvalid));
  EXPECT_EQ(ReasonNameOf(absl::OkStatus()), "");
  EXPECT_EQ(
      ReasonNameOf(WithReason(absl::OkStatus(), ErrorReason::kTensorNotFound)),
      "");
}

TEST(ErrorReasonTest, CopyReasonKeepsItAcrossARewrappedMessage) {
  const absl::Status inner =
      LimitExceededError("too big", "max_slice_bytes", 1024, 4096);
  const absl::Status outer = CopyReason(
      inner,
      absl::Status(inner.code(), absl::StrCat("read: ", inner.message())));
  EXPECT_THAT(outer, HasReason(ErrorReason::kLimitExceeded));
  EXPECT_THAT(ReasonMetadataOf(outer),
              ElementsAre(Pair("limit", "max_slice_bytes"),
                          Pair("limit_value", "1024"), Pair("asked", "4096")));
}

TEST(ErrorReasonTest, AReasonThisBuildDoesNotKnowIsKept) {
  const absl::Status s =
      WithReasonName(absl::NotFoundError("x"), "SOMETHING_NEWER");
  EXPECT_EQ(ReasonNameOf(s), "SOMETHING_NEWER");
}

// docs/errors.md holds the table row for row, in this format.
TEST(ErrorReasonTest, DocsListEveryReasonAsTheTableSays) {
  std::ifstream in(TENSORMORPH_DOCS_DIR "/errors.md");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  for (const ErrorReasonInfo& info : ErrorReasonTable()) {
    std::vector<std::string> keys;
    for (absl::string_view k :
         absl::StrSplit(info.metadata, ", ", absl::SkipEmpty())) {
      keys.push_back(absl::StrCat("`", k, "`"));
    }
    const std::string row = absl::StrCat(
        "| `", info.name, "` | ", absl::StatusCodeToString(info.code), " | ",
        info.generic ? "generic" : "specific", " | ", info.when, " | ",
        absl::StrJoin(keys, ", "), " |");
    EXPECT_NE(text.str().find(row), std::string::npos)
        << "docs/errors.md lacks the row\n"
        << row;
  }
}

}  // namespace
}  // namespace tensormorph
