// GetDiffReport: the server keeps each QuantDiff's report, so that a page
// restores a diff after a reload or from a shared link. Through a real
// server on loopback: the kept report is the stream's own events; a
// different filter is a different report; a file of either side that
// changed drops it (NOT_FOUND); a diff cancelled by its client is kept
// marked cancelled, with fewer reports than planned and no summary. The
// store itself: bounded by entries and bytes, least recently used first.
#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/status_mapping.h"
#include "server/diff_report_store.h"
#include "tests/support/loopback_server.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/sharded_diff_checkpoint.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::LoopbackServer;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::MessageOmits;
using ::tensormorph::testing::ShardedDiffCheckpoint;
using ::tensormorph::testing::StartLoopbackServer;
using ::testing::AllOf;

struct Report {
  grpc::Status status;
  v1::GetDiffReportResponse response;
};

class DiffReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ckpt_ = ::tensormorph::testing::WriteShardedDiffCheckpoint();
    server_ = StartLoopbackServer({ckpt_.root}, 2);
    stub_ = v1::Tensormorph::NewStub(grpc::CreateChannel(
        server_.address, grpc::InsecureChannelCredentials()));
  }

  v1::QuantDiffRequest Request() const {
    v1::QuantDiffRequest req;
    req.set_checkpoint(ckpt_.quant);
    req.set_reference(ckpt_.reference);
    req.add_fail_on("max_err_steps>0.5");
    return req;
  }

  // The stream's events but its progress, in order.
  std::vector<v1::QuantDiffEvent> Diff(const v1::QuantDiffRequest& req) {
    std::vector<v1::QuantDiffEvent> events;
    absl::Status s =
        server_.client->QuantDiff(req, [&](const v1::QuantDiffEvent& e) {
          if (!e.has_progress()) events.push_back(e);
          return true;
        });
    EXPECT_TRUE(s.ok()) << s;
    return events;
  }

  Report Kept(const v1::QuantDiffRequest& req) {
    Report r;
    grpc::ClientContext ctx;
    v1::GetDiffReportRequest get;
    *get.mutable_diff() = req;
    r.status = stub_->GetDiffReport(&ctx, get, &r.response);
    return r;
  }

  static void ExpectSameEvents(const v1::GetDiffReportResponse& kept,
                               const std::vector<v1::QuantDiffEvent>& sent) {
    ASSERT_EQ(kept.events_size(), static_cast<int>(sent.size()));
    for (size_t i = 0; i < sent.size(); ++i) {
      EXPECT_TRUE(MessageDifferencer::Equals(kept.events(i), sent[i]))
          << "event " << i;
    }
  }

  ShardedDiffCheckpoint ckpt_;
  LoopbackServer server_;
  std::unique_ptr<v1::Tensormorph::Stub> stub_;
};

TEST_F(DiffReportTest, KeptReportIsTheStreamsEventsMarkedComplete) {
  const std::vector<v1::QuantDiffEvent> sent = Diff(Request());
  ASSERT_FALSE(sent.empty());
  ASSERT_TRUE(sent.back().has_summary());
  Report r = Kept(Request());
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.response.state(), v1::DIFF_REPORT_COMPLETE);
  EXPECT_EQ(r.response.code(), 0);
  EXPECT_EQ(r.response.tensors_planned(),
            static_cast<int64_t>(ckpt_.compared.size()));
  ExpectSameEvents(r.response, sent);
  EXPECT_GE(r.response.age_seconds(), 0.0);
  // Another spelling of the same paths finds the same report.
  v1::QuantDiffRequest spelled = Request();
  spelled.set_checkpoint("./" + ckpt_.quant + "/");
  Report again = Kept(spelled);
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  ExpectSameEvents(again.response, sent);
}

TEST_F(DiffReportTest, NoneKeptIsNotFound) {
  Report r = Kept(Request());
  EXPECT_THAT(FromGrpcStatus(r.status), HasReason(ErrorReason::kNotFound));
}

TEST_F(DiffReportTest, ADifferentFilterIsADifferentReport) {
  const std::vector<v1::QuantDiffEvent> whole = Diff(Request());
  v1::QuantDiffRequest layer0 = Request();
  layer0.set_filter("model.layers.0.*");
  const std::vector<v1::QuantDiffEvent> part = Diff(layer0);
  ASSERT_LT(part.size(), whole.size());

  Report a = Kept(Request());
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  EXPECT_EQ(a.response.state(), v1::DIFF_REPORT_COMPLETE);
  ExpectSameEvents(a.response, whole);
  Report b = Kept(layer0);
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  EXPECT_EQ(b.response.state(), v1::DIFF_REPORT_PARTIAL);
  ExpectSameEvents(b.response, part);

  // Each field that changes the result is part of the key.
  v1::QuantDiffRequest other = Request();
  other.set_filter("model.layers.1.*");
  EXPECT_EQ(Kept(other).status.error_code(), grpc::NOT_FOUND);
  other = Request();
  other.set_top_k(3);
  EXPECT_EQ(Kept(other).status.error_code(), grpc::NOT_FOUND);
  other = Request();
  other.clear_fail_on();
  EXPECT_EQ(Kept(other).status.error_code(), grpc::NOT_FOUND);
  other = Request();
  other.add_tensors(ckpt_.compared[0]);
  EXPECT_EQ(Kept(other).status.error_code(), grpc::NOT_FOUND);
  // Unset top_k is the default 10 the diff applied.
  other = Request();
  other.set_top_k(10);
  other.set_worst_groups(5);
  EXPECT_TRUE(Kept(other).status.ok());
}

// A rewrite of the reference (same bytes, a new size then a new mtime)
// drops the report: it no longer describes those files.
TEST_F(DiffReportTest, AChangedFileOfEitherSideDropsTheReport) {
  Diff(Request());
  ASSERT_TRUE(Kept(Request()).status.ok());
  const std::string config = ckpt_.root + "/source/config.json";
  ::tensormorph::testing::WriteFile(
      config, ::tensormorph::testing::ReadFileBytes(config) + "\n");
  Report stale = Kept(Request());
  EXPECT_THAT(FromGrpcStatus(stale.status),
              AllOf(HasReason(ErrorReason::kNotFound),
                    MessageNames("source/config.json")));
  // Dropped, not merely hidden: no longer named as changed.
  EXPECT_THAT(FromGrpcStatus(Kept(Request()).status),
              AllOf(HasReason(ErrorReason::kNotFound),
                    MessageOmits("source/config.json")));

  Diff(Request());
  ASSERT_TRUE(Kept(Request()).status.ok());
  const std::string shard =
      ckpt_.root + "/quant/model-00002-of-00004.safetensors";
  struct timespec times[2] = {{0, UTIME_OMIT}, {1'000'000'000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, shard.c_str(), times, 0), 0);
  stale = Kept(Request());
  EXPECT_THAT(FromGrpcStatus(stale.status),
              AllOf(HasReason(ErrorReason::kNotFound),
                    MessageNames("model-00002-of-00004.safetensors")));
}

// Big tensors whose bytes are holes: each takes long enough to diff that a
// cancel after the first report always finds work left.
std::string WriteSlowDiff(const std::string& root, int tensors) {
  constexpr int64_t kRows = 4096, kCols = 4096;
  std::string qh = "{", sh = "{";
  int64_t qoff = 0, soff = 0;
  for (int i = 0; i < tensors; ++i) {
    const std::string name =
        absl::StrCat("model.layers.", i, ".mlp.down_proj.weight");
    absl::StrAppend(&qh, i ? "," : "", "\"", name,
                    "\":{\"dtype\":\"I8\",\"shape\":[", kRows, ",", kCols,
                    "],\"data_offsets\":[", qoff, ",", qoff + kRows * kCols,
                    "]}");
    qoff += kRows * kCols;
    absl::StrAppend(
        &qh, ",\"", name, "_scale\":{\"dtype\":\"BF16\",\"shape\":[", kRows,
        ",1],\"data_offsets\":[", qoff, ",", qoff + 2 * kRows, "]}");
    qoff += 2 * kRows;
    absl::StrAppend(&sh, i ? "," : "", "\"", name,
                    "\":{\"dtype\":\"BF16\",\"shape\":[", kRows, ",", kCols,
                    "],\"data_offsets\":[", soff, ",", soff + 2 * kRows * kCols,
                    "]}");
    soff += 2 * kRows * kCols;
  }
  std::filesystem::create_directories(root + "/slowq");
  std::filesystem::create_directories(root + "/slows");
  ::tensormorph::testing::WriteSparseSafetensors(
      root + "/slowq/model.safetensors", qh + "}", qoff);
  ::tensormorph::testing::WriteSparseSafetensors(
      root + "/slows/model.safetensors", sh + "}", soff);
  ::tensormorph::testing::WriteFile(root + "/slowq/config.json", R"({
  "model_type": "llama",
  "quantization_config": {
    "quant_method": "compressed-tensors", "format": "int-quantized",
    "quantization_status": "compressed",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
      "num_bits": 8, "type": "int", "symmetric": true, "strategy": "channel",
      "group_size": null, "block_structure": null, "dynamic": false}}}}}
)");
  return "slowq";
}

TEST_F(DiffReportTest, ACancelledDiffIsKeptMarkedCancelled) {
  constexpr int kTensors = 24;
  v1::QuantDiffRequest req;
  req.set_checkpoint(WriteSlowDiff(ckpt_.root, kTensors));
  req.set_reference("slows");
  int reports = 0;
  absl::Status s =
      server_.client->QuantDiff(req, [&](const v1::QuantDiffEvent& e) {
        return !e.has_tensor() || ++reports < 1;  // cancel at the first
      });
  EXPECT_THAT(s, HasReason(ErrorReason::kCancelled));
  // The server ends the call once its running tensors stop.
  Report r;
  for (int i = 0; i < 200; ++i) {
    r = Kept(req);
    if (r.status.ok()) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.response.state(), v1::DIFF_REPORT_CANCELLED);
  EXPECT_EQ(r.response.code(), grpc::CANCELLED);
  EXPECT_EQ(r.response.tensors_planned(), kTensors);
  ASSERT_GE(r.response.events_size(), 1);
  EXPECT_LT(r.response.events_size(), kTensors);
  for (const v1::QuantDiffEvent& e : r.response.events()) {
    EXPECT_TRUE(e.has_tensor()) << "a cancelled diff has no summary";
  }
}

v1::GetDiffReportResponse ReportOf(int bytes) {
  v1::GetDiffReportResponse r;
  r.set_state(v1::DIFF_REPORT_COMPLETE);
  r.add_events()->mutable_tensor()->set_name(std::string(bytes, 'x'));
  return r;
}

DiffInputs Inputs() { return {{"a", FileIdentity{1, 2, 3, 4, 5}}}; }

TEST(DiffReportStoreTest, EvictsTheLeastRecentlyUsedPastItsEntries) {
  DiffReportStore store(2, 1 << 20);
  store.Keep("a", Inputs(), ReportOf(10));
  store.Keep("b", Inputs(), ReportOf(10));
  ASSERT_TRUE(store.Find("a", Inputs()).ok());  // a is now the most recent
  store.Keep("c", Inputs(), ReportOf(10));
  EXPECT_EQ(store.size(), 2u);
  EXPECT_EQ(store.evictions(), 1);
  EXPECT_TRUE(store.Find("a", Inputs()).ok());
  EXPECT_THAT(store.Find("b", Inputs()).status(),
              HasReason(ErrorReason::kNotFound));
  EXPECT_TRUE(store.Find("c", Inputs()).ok());
}

TEST(DiffReportStoreTest, EvictsPastItsBytesAndKeepsNothingTooBig) {
  const int64_t one = static_cast<int64_t>(ReportOf(1000).ByteSizeLong());
  DiffReportStore store(100, 2 * one + 10);
  store.Keep("a", Inputs(), ReportOf(1000));
  store.Keep("b", Inputs(), ReportOf(1000));
  store.Keep("c", Inputs(), ReportOf(1000));
  EXPECT_EQ(store.size(), 2u);
  EXPECT_LE(store.bytes(), 2 * one + 10);
  EXPECT_FALSE(store.Find("a", Inputs()).ok());
  // Too big for the whole budget: not kept, and b's older report is gone
  // (it is no longer b's last).
  EXPECT_FALSE(store.Fits(3 * one));
  store.Keep("b", Inputs(), ReportOf(3000));
  EXPECT_FALSE(store.Find("b", Inputs()).ok());
  EXPECT_TRUE(store.Find("c", Inputs()).ok());
}

TEST(DiffReportStoreTest, OtherInputsDropTheReport) {
  DiffReportStore store(4, 1 << 20);
  store.Keep("a", Inputs(), ReportOf(10));
  DiffInputs changed = Inputs();
  changed[0].second->mtime_ns += 1;
  EXPECT_THAT(store.Find("a", changed).status(),
              AllOf(HasReason(ErrorReason::kNotFound), MessageNames("'a'")));
  EXPECT_EQ(store.size(), 0u);
}

TEST(DiffReportStoreTest, NoEntriesKeepsNothing) {
  DiffReportStore store(0, 1 << 20);
  EXPECT_FALSE(store.Fits(0));
  store.Keep("a", Inputs(), ReportOf(10));
  EXPECT_EQ(store.size(), 0u);
}

}  // namespace
}  // namespace tensormorph
