// The plan fingerprint: FNV-1a 64 as published, and a different value for
// a change of anything that makes two plans' parts not merge.
#include "core/diff_parts/fingerprint.h"

#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tensormorph {
namespace {

TEST(DiffFingerprintTest, Fnv1a64MatchesThePublishedVectors) {
  EXPECT_EQ(Fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(Fnv1a64("foobar"), 0x85944171f73967e8ull);
  // Continuing from a hash is hashing the concatenation.
  EXPECT_EQ(Fnv1a64("bar", Fnv1a64("foo")), Fnv1a64("foobar"));
}

struct Plan {
  DiffPlanKey key = {.top_k = 10, .worst_groups = 5, .count = 3};
  std::vector<DiffPlanItem> items = {{"a.weight", "a.weight", {4, 8}, "f", 1},
                                     {"b.weight", "b.weight", {8}, "f", 2}};
  std::string Fingerprint() const { return DiffPlanFingerprint(key, items); }
};

TEST(DiffFingerprintTest, SixteenHexDigitsStableForTheSamePlan) {
  Plan p;
  p.key.checkpoint = std::string("q");
  p.key.reference = std::string("s");
  const std::string f = p.Fingerprint();
  EXPECT_EQ(f.size(), 16u);
  EXPECT_EQ(f.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(Plan(p).Fingerprint(), f);
  // The shard file is not part of it (a router escapes non-UTF-8 names).
  Plan q = p;
  q.items[0].file = std::string("g");
  EXPECT_EQ(q.Fingerprint(), f);
}

TEST(DiffFingerprintTest, OnePathSpelledTwoWaysIsOnePlan) {
  Plan p;
  p.key.checkpoint = std::string("models/q");
  p.key.reference = std::string("/srv/s");
  const std::string f = p.Fingerprint();
  for (const char* q : {"models/q/", "./models/q", "models//q", "models/./q"}) {
    Plan other = p;
    other.key.checkpoint = q;
    EXPECT_EQ(other.Fingerprint(), f) << q;
  }
  Plan other = p;
  other.key.reference = std::string("/srv//s/");
  EXPECT_EQ(other.Fingerprint(), f);
  // Relative and absolute stay apart (no file system to resolve them), as
  // do paths through "..".
  other = p;
  other.key.reference = std::string("srv/s");
  EXPECT_NE(other.Fingerprint(), f);
  other = p;
  other.key.checkpoint = std::string("models/x/../q");
  EXPECT_NE(other.Fingerprint(), f);
}

TEST(DiffFingerprintTest, EveryPartOfThePlanChangesIt) {
  Plan base;
  base.key.checkpoint = std::string("q");
  base.key.reference = std::string("s");
  const std::string f = base.Fingerprint();
  const std::vector<std::pair<const char*, std::function<void(Plan&)>>>
      changes = {
          {"checkpoint", [](Plan& p) { p.key.checkpoint = std::string("q2"); }},
          {"reference", [](Plan& p) { p.key.reference = std::string("s2"); }},
          {"filter", [](Plan& p) { p.key.filter = std::string("*"); }},
          {"top_k", [](Plan& p) { p.key.top_k = 11; }},
          {"worst_groups", [](Plan& p) { p.key.worst_groups = 0; }},
          {"fail_on", [](Plan& p) { p.key.fail_on.push_back("sqnr_db<20"); }},
          {"count", [](Plan& p) { p.key.count = 4; }},
          {"a name", [](Plan& p) { p.items[1].name = "c.weight"; }},
          {"a reference name",
           [](Plan& p) { p.items[1].reference_name = "c.weight"; }},
          {"a shape",
           [](Plan& p) {
             p.items[0].shape = {8, 4};
           }},
          {"a pair's bytes (re-quantized at another size)",
           [](Plan& p) { p.items[0].bytes = 99; }},
          {"the order", [](Plan& p) { std::swap(p.items[0], p.items[1]); }},
          {"a pair less", [](Plan& p) { p.items.pop_back(); }},
          // Length prefixes: moving a byte between fields is a new plan.
          {"field boundaries",
           [](Plan& p) {
             p.key.checkpoint = std::string("qs");
             p.key.reference = std::string("");
           }},
      };
  for (const auto& [what, change] : changes) {
    Plan p = base;
    change(p);
    EXPECT_NE(p.Fingerprint(), f) << what;
  }
}

}  // namespace
}  // namespace tensormorph
