// Streams cannot be held forever: a client that stops reading is cut at
// --max-call-seconds (whether or not it reads) or at
// --max-idle-write-seconds, its slot freed for the next caller; and a burst
// of callers is admitted up to exactly --max-concurrent-streams. Through a
// live server on a loopback port, alive afterwards.
#include <thread>
#include <vector>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/stalled_reader.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::StalledReader;
using ::tensormorph::testing::WriteFile;
using ::tensormorph::testing::WriteSparseSafetensors;
using ::testing::AllOf;

class StreamLimitsTest : public ::testing::Test {
 protected:
  void Start(ServiceLimits limits) {
    dir_ = MakeTempDir();
    // 64 MiB: far more than flow control lets through to a client that has
    // stopped reading.
    WriteSparseSafetensors(
        dir_ + "/big.safetensors",
        R"({"w":{"dtype":"F32","shape":[4096,4096],"data_offsets":[0,67108864]}})",
        int64_t{1} << 26);
    WriteFile(dir_ + "/small.safetensors",
              BuildSafetensors({{"s", "I8", {3}, "abc"}}));
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.roots = {dir_};
    o.workers = 2;
    o.limits = limits;
    auto s = TensormorphServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    address_ = "127.0.0.1:" + std::to_string(server_->port());
    client_ = *Client::Connect(address_);
  }

  // A reader on its own connection, so that only the server's limits can
  // end its call.
  std::unique_ptr<StalledReader> Stall() {
    v1::ReadSliceRequest req;
    req.set_checkpoint("big.safetensors");
    req.set_tensor("w");
    req.set_mode(v1::OUTPUT_MODE_RAW);
    return StalledReader::Start(*Client::Connect(address_), req);
  }

  absl::Status ReadSmall(Client& c) {
    v1::ReadSliceRequest req;
    req.set_checkpoint("small.safetensors");
    req.set_tensor("s");
    return c.ReadSliceAll(req).status();
  }

  std::string dir_, address_;
  std::unique_ptr<TensormorphServer> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(StreamLimitsTest, StalledReadersAreCutAtTheCallLimitAndFreeTheirSlots) {
  ServiceLimits limits;
  limits.max_concurrent_streams = 2;
  limits.max_call_seconds = 1;
  limits.max_idle_write_seconds = 0;  // only the call limit acts
  Start(limits);
  auto a = Stall(), b = Stall();
  a->WaitForFirstChunk();
  b->WaitForFirstChunk();
  ASSERT_FALSE(a->ended() || b->ended());
  // Both slots are held while the readers stall...
  const absl::Status refused = ReadSmall(*client_);
  EXPECT_THAT(refused, AllOf(HasReason(ErrorReason::kLimitExceeded),
                             HasMetadata("limit", "max_concurrent_streams")));
  // ...until the watchdog ends them: the call limit, then the grace for the
  // pending write (about 2 s; 20 s is the test's own bound).
  EXPECT_TRUE(server_->state().metrics.WaitForIdle(absl::Seconds(20)));
  EXPECT_EQ(server_->state().admitted_streams.load(), 0);
  EXPECT_TRUE(ReadSmall(*client_).ok()) << "a new stream is admitted";
  a->Release();
  b->Release();
  EXPECT_FALSE(a->status().ok());
  EXPECT_FALSE(b->status().ok());
  EXPECT_TRUE(client_->GetServerInfo().ok());
}

TEST_F(StreamLimitsTest, AStalledReaderIsCutAtTheIdleWriteLimit) {
  ServiceLimits limits;
  limits.max_concurrent_streams = 1;
  limits.max_call_seconds = 3600;
  limits.max_idle_write_seconds = 1;
  Start(limits);
  auto a = Stall();
  a->WaitForFirstChunk();
  EXPECT_EQ(ReadSmall(*client_).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(server_->state().metrics.WaitForIdle(absl::Seconds(20)));
  EXPECT_TRUE(ReadSmall(*client_).ok());
  a->Release();
  EXPECT_EQ(a->status().code(), absl::StatusCode::kCancelled) << a->status();
  EXPECT_EQ(server_->state().metrics.streams_cancelled.load(), 1);
}

// A reader that keeps reading past the call limit gets the limit's status.
TEST_F(StreamLimitsTest, AReaderPastTheCallLimitGetsResourceExhausted) {
  ServiceLimits limits;
  limits.max_call_seconds = 1;
  Start(limits);
  v1::ReadSliceRequest req;
  req.set_checkpoint("big.safetensors");
  req.set_tensor("w");
  req.set_max_chunk_bytes(1 << 12);
  // Slow but steady: 16,384 chunks at 1 ms each outlast the limit.
  const absl::Status s = client_->ReadSlice(req, [](const v1::SliceChunk&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return true;
  });
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kLimitExceeded),
                       HasMetadata("limit", "max_call_seconds")));
  EXPECT_TRUE(ReadSmall(*client_).ok());
}

TEST_F(StreamLimitsTest, ABurstAdmitsExactlyTheLimit) {
  ServiceLimits limits;
  limits.max_concurrent_streams = 3;
  Start(limits);
  constexpr int kCallers = 10;
  std::vector<std::unique_ptr<StalledReader>> readers;
  for (int i = 0; i < kCallers; ++i) readers.push_back(Stall());
  for (auto& r : readers) r->WaitForFirstChunk();
  int admitted = 0, refused = 0;
  for (auto& r : readers) {
    // Admitted readers are stalled in their first chunk, still running;
    // refused ones have returned.
    if (!r->ended()) {
      ++admitted;
    } else if (r->status().code() == absl::StatusCode::kResourceExhausted) {
      ++refused;
    }
  }
  EXPECT_EQ(admitted, 3);
  EXPECT_EQ(refused, kCallers - 3);
  for (auto& r : readers) r->Release();
  int completed = 0;
  for (auto& r : readers) completed += r->status().ok() ? 1 : 0;
  EXPECT_EQ(completed, 3) << "the admitted readers, released, read it all";
  EXPECT_TRUE(ReadSmall(*client_).ok());
}

// A listing is a stream like the others: counted while it runs, over once
// its client has it (the counters a dashboard reads, WaitForIdle).
TEST_F(StreamLimitsTest, AListingCountsAsAStreamUntilItEnds) {
  Start(ServiceLimits());
  const int64_t before = client_->GetServerInfo()->counters().streams_started();
  for (int i = 0; i < 3; ++i) {
    auto listed = client_->ListTensors("small.safetensors");
    ASSERT_TRUE(listed.ok()) << listed.status();
    EXPECT_EQ(listed->size(), 1u);
  }
  EXPECT_TRUE(server_->state().metrics.WaitForIdle(absl::Seconds(10)));
  auto info = client_->GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->counters().streams_started(), before + 3);
  EXPECT_EQ(info->counters().active_streams(), 0);
}

}  // namespace
}  // namespace tensormorph
