// Every request within the server's limits gets its reply, however large;
// one past a limit is refused up front naming that limit. Never a transport
// error about message size. Remote (a tensormorphd on loopback) and
// embedded, with the same cases.
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/embedded/embedded_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph::reply_limits_test {
namespace {

using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::testing::AllOf;

// The demo's Q4_K tensor of 256 x 256 and its BF16 source.
constexpr char kTensor[] = "blk.0.attn_q.weight";

class ReplyLimitsTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    // A 2048 x 1024 F32 tensor (a hole on disk): a heatmap of exactly
    // max_heatmap_cells cells, each its own element.
    big_dir_ = new std::string(::tensormorph::testing::MakeTempDir());
    ::tensormorph::testing::WriteSparseSafetensors(
        *big_dir_ + "/big.safetensors",
        R"({"big":{"dtype":"F32","shape":[2048,1024],)"
        R"("data_offsets":[0,8388608]}})",
        8388608);
    cli_ = new CliModes({::tensormorph::testing::DemoDir(), *big_dir_});
  }
  static void TearDownTestSuite() {
    delete cli_;
    cli_ = nullptr;
  }
  void SetUp() override {
    auto c = GetParam() ? Client::Connect(cli_->server().address())
                        : EmbeddedClient();
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }
  static std::string Quant() {
    return ::tensormorph::testing::DemoDir() + "/model-q4_k_m.gguf";
  }
  static std::string Source() {
    return ::tensormorph::testing::DemoDir() + "/source";
  }
  v1::Limits Limits() {
    auto info = client_->GetServerInfo();
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? info->limits() : v1::Limits();
  }

  static CliModes* cli_;
  static std::string* big_dir_;
  std::unique_ptr<Client> client_;
};
CliModes* ReplyLimitsTest::cli_ = nullptr;
std::string* ReplyLimitsTest::big_dir_ = nullptr;

TEST_P(ReplyLimitsTest, ServerInfoShowsEveryLimit) {
  const v1::Limits l = Limits();
  EXPECT_EQ(l.max_scalars_per_call(), 100'000);
  EXPECT_EQ(l.max_reply_bytes(), 64 << 20);
  EXPECT_EQ(l.max_top_k(), 100'000);
  EXPECT_GT(l.max_worst_groups(), 0);
  EXPECT_EQ(l.max_bins(), 100'000);
  EXPECT_EQ(l.max_heatmap_side(), 4096);
  EXPECT_GT(l.max_heatmap_cells(), 0);
  EXPECT_GT(l.max_concurrent_streams(), 0);
  EXPECT_GT(l.max_slice_bytes(), 0);
  EXPECT_GT(l.max_concurrent_diffs(), 0);
  EXPECT_GT(l.max_call_seconds(), 0);
  EXPECT_GT(l.max_idle_write_seconds(), 0);
  EXPECT_EQ(l.max_list_depth(), 16);
  EXPECT_EQ(l.max_list_page_size(), 1000);
  EXPECT_GT(l.max_list_scanned_per_call(), 0);
  EXPECT_EQ(l.max_streams_per_peer(), 16);
  EXPECT_EQ(l.max_reply_bytes_in_flight(), int64_t{1} << 30);
  EXPECT_EQ(l.max_reply_bytes_per_peer(), int64_t{256} << 20);
}

TEST_P(ReplyLimitsTest, AsManyScalarsAsTheLimitAllowsComeBackInOneReply) {
  const int64_t limit = Limits().max_scalars_per_call();
  v1::InspectScalarsRequest req;
  req.set_checkpoint(Quant());
  req.set_tensor(kTensor);
  for (int64_t i = 0; i < limit; ++i) req.add_flat_indices(i * 7 % 65536);
  auto r = client_->InspectScalars(req);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->scalars_size(), limit);
  EXPECT_EQ(r->scalars(limit - 1).flat_index(), (limit - 1) * 7 % 65536);

  req.add_flat_indices(0);  // one past it
  auto over = client_->InspectScalars(req);
  EXPECT_THAT(over, AllOf(HasReason(ErrorReason::kLimitExceeded),
                          HasMetadata("limit", "max_scalars_per_call")));
}

TEST_P(ReplyLimitsTest, ADiffWithTwentyThousandWorstElementsArrivesWhole) {
  v1::QuantDiffRequest req;
  req.set_checkpoint(Quant());
  req.set_reference(Source());
  req.set_filter(kTensor);
  req.set_top_k(20'000);
  int reports = 0;
  absl::Status s = client_->QuantDiff(req, [&](const v1::QuantDiffEvent& e) {
    if (e.has_tensor()) {
      ++reports;
      EXPECT_EQ(e.tensor().worst_size(), 20'000);
    }
    return true;
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(reports, 1);
}

// Each limit from the side that succeeds: a request at the limit gets its
// whole reply, however large.
TEST_P(ReplyLimitsTest, RequestsAtEachLimitGetTheirWholeReply) {
  const v1::Limits l = Limits();
  v1::QuantDiffRequest diff;
  diff.set_checkpoint(Quant());
  diff.set_reference(Source());
  diff.set_filter("blk.0.ffn_down.weight");  // 256 x 512
  diff.set_top_k(static_cast<int32_t>(l.max_top_k()));
  diff.set_worst_groups(static_cast<int32_t>(l.max_worst_groups()));
  int64_t worst = -1;
  absl::Status s = client_->QuantDiff(diff, [&](const v1::QuantDiffEvent& e) {
    if (e.has_tensor()) worst = e.tensor().worst_size();
    return true;
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(worst, l.max_top_k());

  v1::GetHeatmapRequest heat;
  heat.set_checkpoint(*big_dir_ + "/big.safetensors");
  heat.set_tensor("big");
  heat.set_width(1024);
  heat.set_height(2048);
  ASSERT_EQ(int64_t{1024} * 2048, l.max_heatmap_cells());
  auto h = client_->GetHeatmap(heat);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->values_size(), l.max_heatmap_cells());

  v1::ComputeStatsRequest stats;
  stats.set_checkpoint(Quant());
  stats.set_tensor(kTensor);
  stats.set_bins(static_cast<int32_t>(l.max_bins()));
  auto st = client_->ComputeStats(stats);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->histogram_size(), l.max_bins());
}

TEST_P(ReplyLimitsTest, RequestsPastALimitAreRefusedNamingIt) {
  const v1::Limits l = Limits();
  v1::QuantDiffRequest diff;
  diff.set_checkpoint(Quant());
  diff.set_reference(Source());
  diff.set_top_k(static_cast<int32_t>(l.max_top_k() + 1));
  absl::Status s =
      client_->QuantDiff(diff, [](const v1::QuantDiffEvent&) { return true; });
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kLimitExceeded),
                       HasMetadata("limit", "max_top_k")));

  v1::GetHeatmapRequest heat;
  heat.set_checkpoint(Quant());
  heat.set_tensor(kTensor);
  heat.set_width(4096);
  heat.set_height(4096);
  auto h = client_->GetHeatmap(heat);
  EXPECT_THAT(h, AllOf(HasReason(ErrorReason::kLimitExceeded),
                       HasMetadata("limit", "max_heatmap_cells")));
  heat.set_width(static_cast<int32_t>(l.max_heatmap_side() + 1));
  heat.set_height(1);
  h = client_->GetHeatmap(heat);
  EXPECT_THAT(h, AllOf(HasReason(ErrorReason::kLimitExceeded),
                       HasMetadata("limit", "max_heatmap_side")));

  v1::ComputeStatsRequest stats;
  stats.set_checkpoint(Quant());
  stats.set_tensor(kTensor);
  stats.set_bins(static_cast<int32_t>(l.max_bins() + 1));
  auto st = client_->ComputeStats(stats);
  EXPECT_THAT(st, AllOf(HasReason(ErrorReason::kLimitExceeded),
                        HasMetadata("limit", "max_bins")));
  stats.set_bins(-5);
  st = client_->ComputeStats(stats);
  EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(ReplyLimitsTest, CliDiffWithALargeTopSucceeds) {
  CommandResult r =
      cli_->Run(GetParam(), {"diff", Quant(), Source(), "--filter", kTensor,
                             "--top", "20000", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto report = nlohmann::json::parse(r.out.substr(0, r.out.find('\n')));
  EXPECT_EQ(report["tensor"]["worst"].size(), 20'000u);
}

INSTANTIATE_TEST_SUITE_P(BothModes, ReplyLimitsTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Remote" : "Embedded";
                         });

}  // namespace
}  // namespace tensormorph::reply_limits_test
