// The summary's ranked lists, as the service and diff-merge both build them.
#include "proto/diff_summary.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tensormorph {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(DiffSummaryTest, WorstTensorsAreTheFiveLargestErrorsTiesByName) {
  v1::DiffSummary s;
  SetRankedLists({{"g", 0.1},
                  {"b", 0.9},
                  {"a", 0.9},
                  {"f", 0.2},
                  {"c", 0.5},
                  {"e", 0.3},
                  {"d", 0.4}},
                 &s);
  EXPECT_THAT(s.worst_tensors(), ElementsAre("a", "b", "c", "d", "e"));
  EXPECT_THAT(s.flagged(), IsEmpty());
}

TEST(DiffSummaryTest, ANanIsTheWorstAndTheOrderIsStillTotal) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  v1::DiffSummary s;
  SetRankedLists({{"z", 0.5}, {"y", nan}, {"x", nan}, {"w", 1e9}}, &s);
  EXPECT_THAT(s.worst_tensors(), ElementsAre("x", "y", "w", "z"));
}

TEST(DiffSummaryTest, FlaggedIsEveryFlaggedNameSortedAndReplacesTheOld) {
  v1::DiffSummary s;
  s.add_flagged("stale");
  s.add_worst_tensors("stale");
  SetRankedLists({{"m", 0.1, true}, {"b", 0.2, false}, {"a", 0.3, true}}, &s);
  EXPECT_THAT(s.flagged(), ElementsAre("a", "m"));
  EXPECT_THAT(s.worst_tensors(), ElementsAre("a", "b", "m"));
  SetRankedLists({}, &s);
  EXPECT_THAT(s.flagged(), IsEmpty());
  EXPECT_THAT(s.worst_tensors(), IsEmpty());
}

}  // namespace
}  // namespace tensormorph
