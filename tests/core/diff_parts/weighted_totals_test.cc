// A diff summary's importance-weighted totals: the weighted tensors' sums
// in name order, the others listed, and no figure when nothing was weighed.
#include "core/diff_parts/weighted_totals.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tensormorph {
namespace {

using ::testing::ElementsAre;

TEST(WeightedTotalsTest, AddsTheWeightedTensorsInNameOrder) {
  const WeightedTotals t = SumWeighted({{"b", 1, "", 1, 4},
                                        {"a", 1, "", 1e16, 5},
                                        {"c", 2, "", 0, 0},
                                        {"d", 3, "30 values, needs 24", 0, 0}});
  EXPECT_EQ(t.weighted, 2);
  EXPECT_EQ(t.sq_err, 1e16 + 1);
  EXPECT_EQ(t.energy, 9);
  EXPECT_DOUBLE_EQ(t.sqnr_db, 10 * std::log10(9 / (1e16 + 1)));
  EXPECT_THAT(t.missing, ElementsAre("c"));
  EXPECT_THAT(t.mismatched, ElementsAre("d: 30 values, needs 24"));
}

TEST(WeightedTotalsTest, AnExactWeightedTensorHasAnInfiniteSqnr) {
  EXPECT_EQ(SumWeighted({{"a", 1, "", 0, 3}}).sqnr_db,
            std::numeric_limits<double>::infinity());
}

// A matrix of another model weighs nothing: the totals are no figure (0,
// as in a report that was not weighted), not an SQNR of Infinity over no
// error at all.
TEST(WeightedTotalsTest, NothingWeighedGivesNoSqnr) {
  const WeightedTotals t =
      SumWeighted({{"a", 2, "", 0, 0}, {"b", 2, "", 0, 0}});
  EXPECT_EQ(t.weighted, 0);
  EXPECT_EQ(t.sqnr_db, 0);
  EXPECT_EQ(t.sq_err, 0);
  EXPECT_THAT(t.missing, ElementsAre("a", "b"));
}

}  // namespace
}  // namespace tensormorph
