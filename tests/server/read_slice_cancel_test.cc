// A client that cancels a 1 GiB ReadSlice after the first chunk frees the
// server's work at once: the server's own counters show the stream ended
// cancelled after producing only the chunks already in flight.
#include <memory>

#include "client/client.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/support/loopback_server.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::StartLoopbackServer;
using ::tensormorph::testing::WriteSparseSafetensors;

// A real 1 GiB F32 tensor in a sparse file: its data pages are holes.
void WriteSparseGiB(const std::string& dir) {
  WriteSparseSafetensors(
      dir + "/big.safetensors",
      R"({"big":{"dtype":"F32","shape":[16384,16384],"data_offsets":[0,1073741824]}})",
      int64_t{1} << 30);
}

TEST(ReadSliceCancelTest, CancellingAfterTheFirstChunkStopsTheServersWork) {
  const std::string dir = MakeTempDir();
  WriteSparseGiB(dir);
  testing::LoopbackServer lb = StartLoopbackServer({dir}, /*workers=*/2);

  v1::ReadSliceRequest req;
  req.set_checkpoint("big.safetensors");
  req.set_tensor("big");
  int chunks = 0;
  absl::Status s = lb.client->ReadSlice(req, [&](const v1::SliceChunk& c) {
    EXPECT_EQ(c.header().total_bytes(), int64_t{1} << 30);
    ++chunks;
    return false;  // cancel after the first of 1024 chunks
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(chunks, 1);

  Metrics& m = lb.server->state().metrics;
  ASSERT_TRUE(m.WaitForIdle(absl::Seconds(30)));
  EXPECT_EQ(m.active_streams(), 0);
  EXPECT_EQ(m.streams_cancelled.load(), 1);
  // Nothing ran on after the cancellation: of 1024 chunks, only those the
  // transport took before it arrived were sent. HTTP/2 flow control lets the
  // sender run ahead of the reader by its window, which gRPC's BDP probing
  // grows to a few MiB on loopback, so a handful of chunks is allowed (3 was
  // seen to fail 1 run in 20 under load); the whole tensor is not.
  EXPECT_LE(m.chunks_sent.load(), 16);
  EXPECT_LE(m.bytes_sent.load(), int64_t{16} << 20);
}

TEST(ReadSliceCancelTest, ADeadlineEndsTheStreamLikeACancellation) {
  const std::string dir = MakeTempDir();
  WriteSparseGiB(dir);
  ClientOptions copts;
  copts.timeout = absl::Milliseconds(300);
  testing::LoopbackServer lb = StartLoopbackServer({dir}, 0, copts);
  v1::ReadSliceRequest req;
  req.set_checkpoint("big.safetensors");
  req.set_tensor("big");
  // A slow reader: the deadline passes long before 1 GiB arrives.
  absl::Status s = lb.client->ReadSlice(req, [&](const v1::SliceChunk&) {
    absl::SleepFor(absl::Milliseconds(50));
    return true;
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  Metrics& m = lb.server->state().metrics;
  ASSERT_TRUE(m.WaitForIdle(absl::Seconds(30)));
  EXPECT_LT(m.chunks_sent.load(), 1024);
}

}  // namespace
}  // namespace tensormorph
