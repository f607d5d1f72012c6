// The summary's ranked lists, as the service, the router and diff-merge all
// build them.
#include "core/diff_parts/ranked_lists.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tensormorph {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(RankedListsTest, WorstTensorsAreTheFiveLargestErrorsTiesByName) {
  const RankedLists s = RankDiffEntries({{"g", 0.1},
                                         {"b", 0.9},
                                         {"a", 0.9},
                                         {"f", 0.2},
                                         {"c", 0.5},
                                         {"e", 0.3},
                                         {"d", 0.4}});
  EXPECT_THAT(s.worst_tensors, ElementsAre("a", "b", "c", "d", "e"));
  EXPECT_THAT(s.flagged, IsEmpty());
}

TEST(RankedListsTest, ANanIsTheWorstAndTheOrderIsStillTotal) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const RankedLists s =
      RankDiffEntries({{"z", 0.5}, {"y", nan}, {"x", nan}, {"w", 1e9}});
  EXPECT_THAT(s.worst_tensors, ElementsAre("x", "y", "w", "z"));
}

TEST(RankedListsTest, FlaggedIsEveryFlaggedNameSorted) {
  const RankedLists s =
      RankDiffEntries({{"m", 0.1, true}, {"b", 0.2, false}, {"a", 0.3, true}});
  EXPECT_THAT(s.flagged, ElementsAre("a", "m"));
  EXPECT_THAT(s.worst_tensors, ElementsAre("a", "b", "m"));
  const RankedLists none = RankDiffEntries({});
  EXPECT_THAT(none.flagged, IsEmpty());
  EXPECT_THAT(none.worst_tensors, IsEmpty());
}

}  // namespace
}  // namespace tensormorph
