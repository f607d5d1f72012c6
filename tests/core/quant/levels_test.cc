// GroupLevels on hand-made grids: the rules its header states, one each.
#include "core/quant/levels.h"

#include <cmath>
#include <vector>

#include "core/quant/block_util.h"
#include "gtest/gtest.h"

namespace tensormorph {
namespace {

TEST(GroupLevelsTest, AnIntegerGridIsScaleTimesLevelPlusOffsetInFloat) {
  ScalarInfo s;
  FillUniformSteps(0.1f, 0, 3, -0.25f, &s);
  const float scale = 0.1f, offset = -0.25f;
  std::vector<double> want;
  for (int l = 0; l <= 3; ++l) {
    const float product = scale * static_cast<float>(l);
    want.push_back(static_cast<double>(product + offset));
  }
  EXPECT_EQ(GroupLevels(s), want);
}

TEST(GroupLevelsTest, ANegativeScaleStillListsAscending) {
  ScalarInfo s;
  FillUniformSteps(-2, -8, 7, 0, &s);
  const std::vector<double> l = GroupLevels(s);
  ASSERT_EQ(l.size(), 16u);
  EXPECT_EQ(l.front(), -14);
  EXPECT_EQ(l.back(), 16);
}

TEST(GroupLevelsTest, DuplicatesAndSignedZerosCollapse) {
  ScalarInfo zero_scale;
  FillUniformSteps(0, -8, 7, 0, &zero_scale);
  EXPECT_EQ(GroupLevels(zero_scale), std::vector<double>{0});
  const double book[] = {0.0, -0.0, 1.0, -1.0, NAN, INFINITY};
  ScalarInfo s;
  FillCodebookSteps(0.5, book, 4, 0, &s);  // the finite entries only
  s.codebook_size = 6;                     // NaN and Inf are no level
  const std::vector<double> l = GroupLevels(s);
  EXPECT_EQ(l, (std::vector<double>{-0.5, 0, 0.5}));
  EXPECT_FALSE(std::signbit(l[1]));
}

TEST(GroupLevelsTest, PlainAndTooWideGridsListNothing) {
  EXPECT_TRUE(GroupLevels(ScalarInfo()).empty());
  ScalarInfo wide;
  FillUniformSteps(1, 0, 4294967295.0, 0, &wide);  // 32-bit codes
  EXPECT_TRUE(GroupLevels(wide).empty());
  ScalarInfo sixteen;
  FillUniformSteps(1, -32768, 32767, 0, &sixteen);
  EXPECT_EQ(GroupLevels(sixteen).size(), 65536u);
}

// HQQ's zero-point is a float: -Inf makes both ends of the grid +Inf.
TEST(GroupLevelsTest, InfiniteGridBoundsListNothing) {
  for (double zero : {INFINITY, -INFINITY}) {
    ScalarInfo s;
    FillUniformSteps(1, -zero, 15 - zero, 0, &s);
    EXPECT_TRUE(GroupLevels(s).empty()) << zero;
  }
}

}  // namespace
}  // namespace tensormorph
