// Files that change under the server: truncated while a ReadSlice streams
// from its mapping (SIGBUS) the call fails with FAILED_PRECONDITION (or, for
// a zero-copy chunk already being written, UNAVAILABLE) and the process
// lives; replaced, the next call sees the new file; deleted, the
// next call reports NOT_FOUND.
#include <unistd.h>

#include <filesystem>

#include "client/client.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/support/loopback_server.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::WriteFile;
using ::tensormorph::testing::WriteSparseSafetensors;

class FileChangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    path_ = dir_ + "/m.safetensors";
    // 64 MiB of F32 in a sparse file.
    header_bytes_ = static_cast<off_t>(WriteSparseSafetensors(
        path_,
        R"({"w":{"dtype":"F32","shape":[4096,4096],"data_offsets":[0,67108864]}})",
        int64_t{1} << 26));
    loopback_ = testing::StartLoopbackServer({dir_});
    client_ = loopback_.client.get();
  }
  v1::ReadSliceRequest Request() const {
    v1::ReadSliceRequest r;
    r.set_checkpoint("m.safetensors");
    r.set_tensor("w");
    r.set_max_chunk_bytes(1 << 16);
    return r;
  }
  std::string dir_, path_;
  off_t header_bytes_ = 0;
  testing::LoopbackServer loopback_;
  Client* client_ = nullptr;
};

// Float32 chunks are decoded from the mapping and raw chunks of a strided
// slice copied from it, under the fault guard: a shrink fails the call with
// FAILED_PRECONDITION naming SIGBUS, every time.
TEST_F(FileChangeTest, TruncatedWhileStreamingFailsTheCallNotTheServer) {
  for (v1::OutputMode mode : {v1::OUTPUT_MODE_FLOAT32, v1::OUTPUT_MODE_RAW}) {
    SCOPED_TRACE(v1::OutputMode_Name(mode));
    v1::ReadSliceRequest r = Request();
    r.set_mode(mode);
    r.set_slice(":, ::2");  // never one run of the mapping: copied
    int chunks = 0;
    absl::Status s = client_->ReadSlice(r, [&](const v1::SliceChunk& c) {
      if (++chunks == 1) {
        EXPECT_EQ(c.data().size(), 1u << 16);
        EXPECT_EQ(::truncate(path_.c_str(), header_bytes_), 0);
      }
      return true;
    });
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(std::string(s.message()).find("SIGBUS"), std::string::npos) << s;
    EXPECT_LT(chunks, 1024);
    // The server lives, and the next call sees the (now corrupt) new file.
    auto again = client_->GetCheckpoint("m.safetensors");
    EXPECT_EQ(again.status().code(), absl::StatusCode::kDataLoss)
        << again.status();
    // Restore the file for the next mode.
    ASSERT_EQ(::truncate(path_.c_str(), header_bytes_ + (off_t{1} << 26)), 0);
  }
}

// Raw chunks of a whole tensor go out as slices of the mapping, without a
// copy, each prefaulted under the guard just before its write. A shrink
// before that fails the call as above; one during a write from the mapping
// makes the kernel fail the socket send (EFAULT), which gRPC reports as
// UNAVAILABLE. Either way the call ends and the server lives.
TEST_F(FileChangeTest,
       TruncatedWhileStreamingZeroCopyFailsTheCallNotTheServer) {
  v1::ReadSliceRequest r = Request();
  r.set_mode(v1::OUTPUT_MODE_RAW);
  int chunks = 0;
  absl::Status s = client_->ReadSlice(r, [&](const v1::SliceChunk& c) {
    if (++chunks == 1) {
      EXPECT_EQ(::truncate(path_.c_str(), header_bytes_), 0);
    }
    return true;
  });
  EXPECT_TRUE(s.code() == absl::StatusCode::kFailedPrecondition ||
              s.code() == absl::StatusCode::kUnavailable)
      << s;
  if (s.code() == absl::StatusCode::kFailedPrecondition) {
    EXPECT_NE(std::string(s.message()).find("SIGBUS"), std::string::npos) << s;
  }
  EXPECT_LT(chunks, 1024);
  auto again = client_->GetCheckpoint("m.safetensors");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kDataLoss)
      << again.status();
}

TEST_F(FileChangeTest, ReplacedFileIsSeenByTheNextCall) {
  ASSERT_TRUE(client_->GetCheckpoint("m.safetensors").ok());
  WriteFile(dir_ + "/new.tmp", BuildSafetensors({{"w", "I8", {3}, "abc"}}));
  std::filesystem::rename(dir_ + "/new.tmp", path_);
  auto data = client_->ReadSliceAll(Request());
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->shape, std::vector<int64_t>{3});
}

TEST_F(FileChangeTest, DeletedFileIsNotFoundNext) {
  ASSERT_TRUE(client_->GetCheckpoint("m.safetensors").ok());
  std::filesystem::remove(path_);
  EXPECT_EQ(client_->GetCheckpoint("m.safetensors").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tensormorph
