// The split of a diff plan into parts: a pure function that every part of
// a batch diff, on any machine, computes alike; every pair in exactly one
// part; balanced by bytes within the stated bound; a shard file's tensors
// kept together while that costs no balance.
#include "core/diff_parts/partition.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::testing::AllOf;
using ::testing::Each;

std::vector<DiffPlanItem> RandomPlan(std::mt19937_64& rng, int items,
                                     int files) {
  std::vector<DiffPlanItem> plan;
  std::uniform_int_distribution<int> file(0, files - 1);
  // Sizes over four orders of magnitude, as norms and projections are.
  std::uniform_int_distribution<int> exp(0, 4), mant(1, 9);
  for (int i = 0; i < items; ++i) {
    int64_t bytes = mant(rng);
    for (int e = exp(rng); e > 0; --e) bytes *= 10;
    plan.push_back({absl::StrCat("t", i),
                    absl::StrCat("r", i),
                    {bytes},
                    absl::StrCat("shard-", file(rng)),
                    bytes});
  }
  return plan;
}

std::vector<int64_t> Loads(const std::vector<DiffPlanItem>& plan,
                           const std::vector<int32_t>& parts, int32_t n) {
  std::vector<int64_t> loads(n, 0);
  for (size_t i = 0; i < plan.size(); ++i) loads[parts[i]] += plan[i].bytes;
  return loads;
}

TEST(DiffPartitionTest, EveryItemIsInExactlyOnePartInRange) {
  std::mt19937_64 rng(1);
  for (int32_t n : {1, 2, 3, 7, 64}) {
    const auto plan = RandomPlan(rng, 50, 6);
    auto parts = PartitionDiffPlan(plan, n);
    ASSERT_TRUE(parts.ok()) << parts.status();
    ASSERT_EQ(parts->size(), plan.size());
    for (int32_t p : *parts) {
      EXPECT_GE(p, 0);
      EXPECT_LT(p, n);
    }
  }
}

TEST(DiffPartitionTest, TheSamePlanGivesTheSamePartsEveryTime) {
  std::mt19937_64 rng(2);
  const auto plan = RandomPlan(rng, 200, 9);
  auto first = PartitionDiffPlan(plan, 5);
  ASSERT_TRUE(first.ok());
  // A copy (other addresses, other heap order) splits identically.
  const std::vector<DiffPlanItem> copy = plan;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(*PartitionDiffPlan(copy, 5), *first);
  // Pinned: a change of the rule changes what deployed jobs compute, so it
  // must be deliberate (parts of old and new plans would not merge).
  const std::vector<DiffPlanItem> small = {{"a", "a", {}, "f1", 100},
                                           {"b", "b", {}, "f1", 10},
                                           {"c", "c", {}, "f2", 60},
                                           {"d", "d", {}, "f2", 50},
                                           {"e", "e", {}, "f3", 30}};
  // Two parts: every file fits (110 <= 125); f1 and f2 tie at 110 (f1
  // first by name), f3 goes to the lower-numbered of two equal parts.
  EXPECT_EQ(*PartitionDiffPlan(small, 2),
            (std::vector<int32_t>{0, 0, 1, 1, 0}));
  // Three: f1 and f2 exceed 83 and are split; a 100, c 60, d 50, f3's 30,
  // b 10, each to the emptiest part.
  EXPECT_EQ(*PartitionDiffPlan(small, 3),
            (std::vector<int32_t>{0, 1, 1, 2, 2}));
}

// The bound the header states: no part holds more than total/N plus the
// largest unit dealt (a kept file group, at most floor(total/N), or one
// tensor of a split group).
TEST(DiffPartitionTest, EveryPartStaysWithinTheBalanceBound) {
  std::mt19937_64 rng(3);
  for (int round = 0; round < 300; ++round) {
    const int items = 1 + static_cast<int>(rng() % 120);
    const int files = 1 + static_cast<int>(rng() % 12);
    const int32_t n = 1 + static_cast<int32_t>(rng() % 16);
    const auto plan = RandomPlan(rng, items, files);
    auto parts = PartitionDiffPlan(plan, n);
    ASSERT_TRUE(parts.ok());
    int64_t total = 0, largest_item = 0;
    std::map<std::string, int64_t> group;
    for (const auto& it : plan) {
      total += it.bytes;
      largest_item = std::max(largest_item, it.bytes);
      group[it.file] += it.bytes;
    }
    int64_t largest_unit = largest_item;
    for (const auto& [file, bytes] : group) {
      if (bytes <= total / n) largest_unit = std::max(largest_unit, bytes);
    }
    for (int64_t load : Loads(plan, *parts, n)) {
      // load <= total/N + largest_unit, in integers.
      EXPECT_LE((load - largest_unit) * n, total)
          << "round " << round << ": " << items << " items in " << files
          << " files, " << n << " parts";
    }
  }
}

TEST(DiffPartitionTest, AShardFilesTensorsStayTogetherWhenTheyFit) {
  // Four files of equal size into four parts: one file per part.
  std::vector<DiffPlanItem> plan;
  for (int f = 0; f < 4; ++f) {
    for (int t = 0; t < 5; ++t) {
      plan.push_back({absl::StrCat("f", f, ".t", t),
                      "",
                      {},
                      absl::StrCat("file", f),
                      10 + t});
    }
  }
  auto parts = PartitionDiffPlan(plan, 4);
  ASSERT_TRUE(parts.ok());
  std::map<std::string, std::set<int32_t>> parts_of_file;
  for (size_t i = 0; i < plan.size(); ++i)
    parts_of_file[plan[i].file].insert((*parts)[i]);
  for (const auto& [file, ps] : parts_of_file) {
    EXPECT_EQ(ps.size(), 1u) << file;
  }
  std::set<int32_t> used;
  for (const auto& [file, ps] : parts_of_file) used.insert(*ps.begin());
  EXPECT_EQ(used.size(), 4u);

  // One file into four parts: too big to keep, so split by tensors.
  for (auto& it : plan) it.file = std::string("one");
  parts = PartitionDiffPlan(plan, 4);
  ASSERT_TRUE(parts.ok());
  EXPECT_EQ(std::set<int32_t>(parts->begin(), parts->end()).size(), 4u);
}

TEST(DiffPartitionTest, MorePartsThanItemsLeavesPartsEmpty) {
  const std::vector<DiffPlanItem> plan = {
      {"a", "a", {}, "f", 5}, {"b", "b", {}, "g", 7}, {"c", "c", {}, "h", 9}};
  auto parts = PartitionDiffPlan(plan, 7);
  ASSERT_TRUE(parts.ok());
  // The largest first, each to the emptiest lowest-numbered part.
  EXPECT_EQ(*parts, (std::vector<int32_t>{2, 1, 0}));
  EXPECT_TRUE(PartitionDiffPlan({}, 3)->empty());
}

TEST(DiffPartitionTest, OnePartHoldsEverything) {
  std::mt19937_64 rng(4);
  const auto plan = RandomPlan(rng, 40, 5);
  EXPECT_THAT(*PartitionDiffPlan(plan, 1), Each(0));
}

TEST(DiffPartitionTest, RefusesACountOutOfRangeAndNegativeBytes) {
  const std::vector<DiffPlanItem> plan = {{"a", "a", {}, "f", 5}};
  EXPECT_THAT(PartitionDiffPlan(plan, 0),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("1 to 65536"), MessageNames("got 0")));
  EXPECT_FALSE(PartitionDiffPlan(plan, kMaxDiffParts + 1).ok());
  EXPECT_TRUE(PartitionDiffPlan(plan, kMaxDiffParts).ok());
  const std::vector<DiffPlanItem> bad = {{"a", "a", {}, "f", -1}};
  EXPECT_THAT(PartitionDiffPlan(bad, 2),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("'a'"), MessageNames("-1 bytes")));
}

TEST(DiffPartitionTest, CheckDiffPartNamesTheFieldTheRuleAndTheValue) {
  auto check = [](int32_t index, int32_t count) {
    return CheckDiffPart(count, index);
  };
  EXPECT_TRUE(check(0, 0).ok());
  EXPECT_TRUE(check(2, 3).ok());
  EXPECT_TRUE(check(65535, 65536).ok());
  // The field, its valid range and the value got.
  auto refused = [](absl::string_view field, absl::string_view range,
                    absl::string_view got) {
    return AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames(field),
                 MessageNames(range), MessageNames(got));
  };
  EXPECT_THAT(check(3, 3), refused("part.index", "0 to 2", "got 3"));
  EXPECT_THAT(check(-1, 3), refused("part.index", "0 to 2", "got -1"));
  EXPECT_THAT(check(0, 65537),
              refused("part.count", "1 to 65536", "got 65537"));
  EXPECT_THAT(check(0, -2), HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(check(1, 0), refused("part.index", "must be 0", "got 1"));
}

TEST(DiffPartitionTest, CheckDiffRunIdHoldsItsCharactersAndLength) {
  auto check = [](const std::string& run_id) { return CheckDiffRunId(run_id); };
  EXPECT_TRUE(check("").ok());                                      // none
  EXPECT_TRUE(check("3f2b9c1e-77aa-4c1d-9d7e-0c5b2f1e8a90").ok());  // a uid
  EXPECT_TRUE(check("nightly.2026-12-03T02:00").ok());
  EXPECT_TRUE(check(std::string(kMaxDiffRunIdLength, 'a')).ok());
  // The field, the limit or the characters allowed, and what was got where.
  auto refused = [](absl::string_view rule, absl::string_view got) {
    return AllOf(HasReason(ErrorReason::kRequestInvalid),
                 MessageNames("part.run_id"), MessageNames(rule),
                 MessageNames(got));
  };
  EXPECT_THAT(check(std::string(kMaxDiffRunIdLength + 1, 'a')),
              refused("128", "got 129"));
  EXPECT_THAT(check("night 2"),
              refused("A-Z a-z 0-9 . _ : -", "byte 0x20 at offset 5"));
  EXPECT_THAT(check("a/b"), refused("A-Z a-z 0-9 . _ : -", "'/' at offset 1"));
  EXPECT_THAT(check(std::string("x\xff\n")),
              refused("A-Z a-z 0-9 . _ : -", "byte 0xff at offset 1"));
  EXPECT_THAT(CheckDiffRunId("a\nb"), HasReason(ErrorReason::kRequestInvalid));
}

}  // namespace
}  // namespace tensormorph
