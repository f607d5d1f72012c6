// CallStats keeps a bounded set of methods whatever names clients call, and
// files each duration in the bucket the text format's "le" means.
#include "server/call_stats.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tensormorph {
namespace {

const CallStats::MethodSnapshot* Find(
    const std::vector<CallStats::MethodSnapshot>& all,
    absl::string_view method) {
  for (const auto& m : all) {
    if (m.method == method) return &m;
  }
  return nullptr;
}

TEST(CallStatsTest, CountsByMethodAndCode) {
  CallStats stats;
  CallStats::Method* get = stats.ForMethod("GetTensor");
  EXPECT_EQ(stats.ForMethod("GetTensor"), get);  // one entry per name
  get->Record(grpc::StatusCode::OK, absl::Milliseconds(1));
  get->Record(grpc::StatusCode::NOT_FOUND, absl::Milliseconds(2));
  get->Record(static_cast<grpc::StatusCode>(99), absl::Milliseconds(3));
  const auto all = stats.Snapshot();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].method, "GetTensor");
  EXPECT_EQ(all[0].calls[grpc::StatusCode::OK], 1);
  EXPECT_EQ(all[0].calls[grpc::StatusCode::NOT_FOUND], 1);
  EXPECT_EQ(all[0].calls[grpc::StatusCode::UNKNOWN], 1);  // out of range
  EXPECT_EQ(all[0].cumulative_buckets.back(), 3);
  EXPECT_NEAR(all[0].sum_seconds, 0.006, 1e-12);
}

TEST(CallStatsTest, ABucketHoldsDurationsUpToAndIncludingItsBound) {
  CallStats stats;
  CallStats::Method* m = stats.ForMethod("M");
  m->Record(grpc::StatusCode::OK, absl::Microseconds(100));  // le 0.0001
  m->Record(grpc::StatusCode::OK, absl::Microseconds(101));  // le 0.00025
  m->Record(grpc::StatusCode::OK, absl::Seconds(60));        // le 60
  m->Record(grpc::StatusCode::OK, absl::Seconds(61));        // +Inf only
  m->Record(grpc::StatusCode::OK, -absl::Seconds(1));        // as zero
  const auto all = stats.Snapshot();
  const auto& b = all[0].cumulative_buckets;
  EXPECT_EQ(CallStats::kDurationBounds[0], 0.0001);
  EXPECT_EQ(b[0], 2);
  EXPECT_EQ(b[1], 3);
  EXPECT_EQ(b[CallStats::kDurationBounds.size() - 1], 4);
  EXPECT_EQ(b.back(), 5);
}

TEST(CallStatsTest, NamesPastTheBoundOrNotIdentifiersShareOneEntry) {
  CallStats stats;
  EXPECT_EQ(stats.ForMethod("bad-name")->name(), CallStats::kOtherMethod);
  EXPECT_EQ(stats.ForMethod("")->name(), CallStats::kOtherMethod);
  EXPECT_EQ(stats.ForMethod("9lives")->name(), CallStats::kOtherMethod);
  EXPECT_EQ(stats.ForMethod(std::string(129, 'a'))->name(),
            CallStats::kOtherMethod);
  for (size_t i = 0; i < CallStats::kMaxMethods; ++i) {
    EXPECT_EQ(stats.ForMethod(absl::StrCat("M", i))->name(),
              absl::StrCat("M", i));
  }
  EXPECT_EQ(stats.ForMethod("OneTooMany")->name(), CallStats::kOtherMethod);
  EXPECT_EQ(stats.ForMethod("M0")->name(), "M0");  // kept ones stay
  // Entries exist from their first use; a snapshot lists them by name.
  const auto all = stats.Snapshot();
  EXPECT_EQ(all.size(), CallStats::kMaxMethods + 1);
  EXPECT_NE(Find(all, CallStats::kOtherMethod), nullptr);
  EXPECT_EQ(all[0].method, CallStats::kOtherMethod);  // '(' sorts first
}

TEST(CallStatsTest, SpellsCodesAsGrpcDoes) {
  EXPECT_EQ(CallStats::CodeName(0), "OK");
  EXPECT_EQ(CallStats::CodeName(5), "NOT_FOUND");
  EXPECT_EQ(CallStats::CodeName(16), "UNAUTHENTICATED");
  EXPECT_EQ(CallStats::CodeName(17), "UNKNOWN");
  EXPECT_EQ(CallStats::CodeName(-1), "UNKNOWN");
}

}  // namespace
}  // namespace tensormorph
