// Diff gates ("METRIC OP NUMBER"): what parses, what is refused and why, and
// which tensors trip them with which reasons.
#include "core/diff/gate.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TensorDiff Diff(double max_err_steps, double sqnr_db) {
  TensorDiff d;
  d.name = "w";
  d.count = 100;
  d.max_err_steps = max_err_steps;
  d.sqnr_db = sqnr_db;
  return d;
}

TEST(DiffGateTest, ParsesEveryOperatorWithOrWithoutBlanks) {
  struct Case {
    const char* text;
    DiffGate::Op op;
    double threshold;
  };
  const Case cases[] = {
      {"max_err_steps>0.51", DiffGate::Op::kGreater, 0.51},
      {" sqnr_db < 25 ", DiffGate::Op::kLess, 25},
      {"clipped>=1", DiffGate::Op::kGreaterEqual, 1},
      {"cosine<=0.999", DiffGate::Op::kLessEqual, 0.999},
      {"induced_zeros == 0", DiffGate::Op::kEqual, 0},
      {"above_half_step!=0", DiffGate::Op::kNotEqual, 0},
      {"sqnr_db<-5e1", DiffGate::Op::kLess, -50},
      {"sqnr_db==inf", DiffGate::Op::kEqual,
       std::numeric_limits<double>::infinity()},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto g = ParseDiffGate(c.text);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->text, c.text);
    EXPECT_EQ(g->op, c.op);
    EXPECT_EQ(g->threshold, c.threshold);
  }
}

TEST(DiffGateTest, RefusesWhatIsNotAGateNamingItAndTheMetrics) {
  struct Case {
    const char* text;
    const char* why;
  };
  const Case cases[] = {
      {"bogus>1", "unknown metric 'bogus'"},
      {"max_err_steps", "is not METRIC OP NUMBER"},
      {"max_err_steps>", "is not METRIC OP NUMBER"},
      {">0.5", "is not METRIC OP NUMBER"},
      {"max_err_steps=>0.5", "is not METRIC OP NUMBER"},
      {"max_err_steps>0.5x", "'0.5x', not a number"},
      {"max_err_steps>nan", "NaN"},
      {"", "is not METRIC OP NUMBER"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto g = ParseDiffGate(c.text);
    const auto invalid = [](const std::string& said) {
      return StatusIs(absl::StatusCode::kInvalidArgument, said);
    };
    EXPECT_THAT(
        g, AllOf(invalid(std::string("gate '") + c.text + "'"), invalid(c.why),
                 invalid("metrics: max_err_steps, p99_err_steps"),
                 invalid("induced_zero_fraction")));
  }
}

TEST(DiffGateTest, ReasonsNameTheMetricItsValueAndTheGateAsWritten) {
  std::vector<DiffGate> gates;
  for (const char* t : {"max_err_steps>0.513", "sqnr_db < 25", "clipped>0"})
    gates.push_back(*ParseDiffGate(t));
  EXPECT_THAT(TrippedReasons(gates, Diff(0.5133, 20)),
              ElementsAre("max_err_steps = 0.5133 (max_err_steps>0.513)",
                          "sqnr_db = 20 (sqnr_db < 25)"));
  EXPECT_THAT(TrippedReasons(gates, Diff(0.5125, 40)), ElementsAre());
}

TEST(DiffGateTest, InfiniteSqnrOfAnExactTensorPassesAMinimum) {
  const DiffGate g = *ParseDiffGate("sqnr_db<25");
  EXPECT_FALSE(Trips(g, Diff(0, std::numeric_limits<double>::infinity())));
}

TEST(DiffGateTest, ANanMetricTripsOnlyNotEqual) {
  const TensorDiff d = Diff(0, std::nan(""));
  EXPECT_FALSE(Trips(*ParseDiffGate("sqnr_db<25"), d));
  EXPECT_FALSE(Trips(*ParseDiffGate("sqnr_db>=25"), d));
  EXPECT_TRUE(Trips(*ParseDiffGate("sqnr_db!=25"), d));
}

TEST(DiffGateTest, InducedZeroFractionIsOverTheSourcesNonzeros) {
  TensorDiff d;
  d.count = 10;
  d.source_zeros = 6;
  d.induced_zeros = 1;
  EXPECT_EQ(*DiffMetric(d, "induced_zero_fraction"), 0.25);
  d.source_zeros = 10;
  d.induced_zeros = 0;
  EXPECT_EQ(*DiffMetric(d, "induced_zero_fraction"), 0);
  EXPECT_FALSE(DiffMetric(d, "bogus").has_value());
}

}  // namespace
}  // namespace tensormorph
