// The budget's knapsack is exact: on random small instances it agrees with
// trying every choice, and its tie-breaking is the documented one.
#include "core/compare/knapsack.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasReason;

using Items = std::vector<std::vector<KnapsackOption>>;

// Every choice tried: least error, then fewest bytes, then the
// lexicographically least option vector; errors added in item order.
std::optional<KnapsackChoice> BruteForce(const Items& items, int64_t budget) {
  std::optional<KnapsackChoice> best;
  std::vector<int> pick(items.size(), 0);
  while (true) {
    int64_t bytes = 0;
    double error = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      bytes += items[i][pick[i]].bytes;
      error += items[i][pick[i]].error;
    }
    // Odometer order is lexicographic: the first of equals is the least.
    if (bytes <= budget && (!best || error < best->error ||
                            (error == best->error && bytes < best->bytes))) {
      best = KnapsackChoice{pick, bytes, error};
    }
    size_t k = items.size();
    while (k > 0 && ++pick[k - 1] == static_cast<int>(items[k - 1].size())) {
      pick[k - 1] = 0;
      --k;
    }
    if (k == 0) break;
  }
  return best;
}

Items RandomItems(std::mt19937_64& rng, bool integer_errors) {
  std::uniform_int_distribution<int> count(1, 6), options(1, 4), bytes(0, 40);
  std::uniform_real_distribution<double> real(0, 10);
  std::uniform_int_distribution<int> small(0, 12);
  Items items(count(rng));
  for (auto& item : items) {
    item.resize(options(rng));
    for (KnapsackOption& o : item) {
      o.bytes = bytes(rng);
      o.error = integer_errors ? small(rng) : real(rng);
    }
  }
  return items;
}

TEST(KnapsackTest, EqualsBruteForceWithExactSumsChoiceForChoice) {
  std::mt19937_64 rng(34);
  for (int trial = 0; trial < 3000; ++trial) {
    const Items items = RandomItems(rng, /*integer_errors=*/true);
    const int64_t budget = std::uniform_int_distribution<int>(0, 160)(rng);
    const auto want = BruteForce(items, budget);
    auto got = SolveMultipleChoiceKnapsack(items, budget);
    if (!want) {
      EXPECT_THAT(got.status(), HasReason(ErrorReason::kRequestInvalid));
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->option, want->option) << "trial " << trial;
    EXPECT_EQ(got->bytes, want->bytes);
    EXPECT_EQ(got->error, want->error);
  }
}

TEST(KnapsackTest, EqualsBruteForceOnRealErrors) {
  std::mt19937_64 rng(35);
  for (int trial = 0; trial < 3000; ++trial) {
    const Items items = RandomItems(rng, /*integer_errors=*/false);
    const int64_t budget = std::uniform_int_distribution<int>(0, 160)(rng);
    const auto want = BruteForce(items, budget);
    auto got = SolveMultipleChoiceKnapsack(items, budget);
    if (!want) {
      EXPECT_FALSE(got.ok());
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->error, want->error) << "trial " << trial;
    EXPECT_EQ(got->bytes, want->bytes);
    // The sums reported are the chosen options' sums in item order.
    int64_t bytes = 0;
    double error = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      bytes += items[i][got->option[i]].bytes;
      error += items[i][got->option[i]].error;
    }
    EXPECT_EQ(got->bytes, bytes);
    EXPECT_EQ(got->error, error);
  }
}

TEST(KnapsackTest, TiesGoToFewerBytesThenTheFirstOptions) {
  // Two items of two equal options each, and a larger one with equal error.
  const Items items = {{{10, 1.0}, {10, 1.0}, {12, 1.0}}, {{5, 2.0}, {5, 2.0}}};
  auto c = SolveMultipleChoiceKnapsack(items, 100);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->option, (std::vector<int>{0, 0}));
  EXPECT_EQ(c->bytes, 15);
  EXPECT_EQ(c->error, 3.0);
}

TEST(KnapsackTest, SpendsTheBudgetWhereErrorFallsMost) {
  // Item 0 gains 9 from 10 more bytes, item 1 gains 1: with room for one
  // upgrade it goes to item 0.
  const Items items = {{{10, 10.0}, {20, 1.0}}, {{10, 2.0}, {20, 1.0}}};
  auto c = SolveMultipleChoiceKnapsack(items, 30);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->option, (std::vector<int>{1, 0}));
  EXPECT_EQ(c->bytes, 30);
  EXPECT_EQ(c->error, 3.0);
}

TEST(KnapsackTest, RefusesABudgetBelowTheSmallestChoice) {
  const Items items = {{{10, 1.0}, {20, 0.5}}, {{7, 1.0}}};
  EXPECT_THAT(SolveMultipleChoiceKnapsack(items, 16).status(),
              HasReason(ErrorReason::kRequestInvalid));
  EXPECT_TRUE(SolveMultipleChoiceKnapsack(items, 17).ok());
}

TEST(KnapsackTest, RefusesItemsWithoutOptionsOrWithBadValues) {
  EXPECT_THAT(SolveMultipleChoiceKnapsack({{}}, 10).status(),
              HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(SolveMultipleChoiceKnapsack({{{-1, 0.0}}}, 10).status(),
              HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(SolveMultipleChoiceKnapsack(
                  {{{1, std::numeric_limits<double>::quiet_NaN()}}}, 10)
                  .status(),
              HasReason(ErrorReason::kRequestInvalid));
}

TEST(KnapsackTest, StopsAtTheStateLimit) {
  Items items(12, std::vector<KnapsackOption>{{1, 3.0}, {2, 2.0}, {4, 1.0}});
  KnapsackLimits limits;
  limits.max_states = 8;
  EXPECT_THAT(SolveMultipleChoiceKnapsack(items, 1000, limits).status(),
              HasReason(ErrorReason::kLimitExceeded));
}

}  // namespace
}  // namespace tensormorph
