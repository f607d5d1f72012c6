// Files that change under the server: truncated while a ReadSlice streams
// from its mapping the call fails (FAILED_PRECONDITION for the SIGBUS, or
// ABORTED when the identity check sees it first), the process lives and other
// calls on the connection are untouched; rewritten in place under a paused
// reader, the stream does not end OK; replaced, grown or shrunk (a directory's
// listing, an index, a config file), the next call sees the new checkpoint;
// deleted, the next call reports NOT_FOUND.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "absl/synchronization/notification.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/support/loopback_server.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::WriteFile;
using ::tensormorph::testing::WriteSparseSafetensors;
using ::testing::AllOf;

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

// A stream whose file is truncated under it ends as soon as the server sees
// it: at a read of the mapping (the fault: FAILED_PRECONDITION naming
// SIGBUS) or, when a chunk was read before the truncation, at the identity
// check after it (ABORTED: the size changed). Which comes first is a race;
// either way the call ends, and never OK.
void ExpectTruncationEndedTheCall(const absl::Status& s) {
  if (s.code() == absl::StatusCode::kAborted) {
    EXPECT_THAT(s, HasReason(ErrorReason::kFileChangedDuringRead));
    return;
  }
  EXPECT_THAT(s, HasReason(ErrorReason::kFileChanged));
}

// Float32 chunks are decoded from the mapping and raw chunks of a strided
// slice copied from it, under the fault guard: a shrink fails the call,
// every time (ExpectTruncationEndedTheCall).
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
    ExpectTruncationEndedTheCall(s);
    EXPECT_LT(chunks, 1024);
    // The server lives, and the next call sees the (now corrupt) new file.
    auto again = client_->GetCheckpoint("m.safetensors");
    EXPECT_EQ(again.status().code(), absl::StatusCode::kDataLoss)
        << again.status();
    // Restore the file for the next mode.
    ASSERT_EQ(::truncate(path_.c_str(), header_bytes_ + (off_t{1} << 26)), 0);
  }
}

// Raw chunks of a whole tensor are one run of the mapping, copied under the
// fault guard like every other chunk (never sent as slices of the mapping):
// a shrink fails the call (ExpectTruncationEndedTheCall).
TEST_F(FileChangeTest, TruncatedWhileStreamingRawRunsFailsWithSigbus) {
  v1::ReadSliceRequest r = Request();
  r.set_mode(v1::OUTPUT_MODE_RAW);
  int chunks = 0;
  absl::Status s = client_->ReadSlice(r, [&](const v1::SliceChunk&) {
    if (++chunks == 1) {
      EXPECT_EQ(::truncate(path_.c_str(), header_bytes_), 0);
    }
    return true;
  });
  ExpectTruncationEndedTheCall(s);
  EXPECT_LT(chunks, 1024);
  auto again = client_->GetCheckpoint("m.safetensors");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kDataLoss)
      << again.status();
}

// A truncation must cost only the call reading the file: a stream of another
// file and unary calls on the same channel (the same HTTP/2 connection) all
// succeed. (A chunk sent from the mapping failed the socket send with EFAULT,
// which closed the connection under every call on it.)
TEST_F(FileChangeTest, TruncationFailsOnlyItsOwnCallOnASharedChannel) {
  const std::string other = dir_ + "/other.safetensors";
  WriteSparseSafetensors(
      other,
      R"({"v":{"dtype":"F32","shape":[2048,4096],"data_offsets":[0,33554432]}})",
      int64_t{1} << 25);
  absl::Notification truncated;
  absl::Status bystander;
  int64_t bystander_bytes = 0;
  std::thread reader([&] {
    v1::ReadSliceRequest r;
    r.set_checkpoint("other.safetensors");
    r.set_tensor("v");
    r.set_mode(v1::OUTPUT_MODE_RAW);
    r.set_max_chunk_bytes(1 << 16);
    bystander = client_->ReadSlice(r, [&](const v1::SliceChunk& c) {
      // Paused mid-stream until the other file is truncated.
      if (bystander_bytes == 0) truncated.WaitForNotification();
      bystander_bytes += static_cast<int64_t>(c.data().size());
      return true;
    });
  });
  v1::ReadSliceRequest r = Request();
  r.set_mode(v1::OUTPUT_MODE_RAW);
  int chunks = 0;
  absl::Status s = client_->ReadSlice(r, [&](const v1::SliceChunk&) {
    if (++chunks == 2) {
      EXPECT_EQ(::truncate(path_.c_str(), header_bytes_), 0);
      truncated.Notify();
      for (int i = 0; i < 20; ++i) {
        EXPECT_TRUE(client_->GetServerInfo().ok());
      }
    }
    return true;
  });
  if (!truncated.HasBeenNotified()) truncated.Notify();
  reader.join();
  ExpectTruncationEndedTheCall(s);
  EXPECT_TRUE(bystander.ok()) << bystander;
  EXPECT_EQ(bystander_bytes, int64_t{1} << 25);
  for (int i = 0; i < 20; ++i) EXPECT_TRUE(client_->GetServerInfo().ok());
  EXPECT_TRUE(client_->GetCheckpoint("other.safetensors").ok());
}

// A reader paused across an in-place rewrite with the same layout (same
// size, same header) would see old bytes, then new ones: the stream must
// not end OK.
TEST_F(FileChangeTest, PausedReaderAcrossAnInPlaceRewriteDoesNotEndOk) {
  for (v1::OutputMode mode : {v1::OUTPUT_MODE_RAW, v1::OUTPUT_MODE_FLOAT32}) {
    SCOPED_TRACE(v1::OutputMode_Name(mode));
    // An old modification time, so that the rewrite's is surely another.
    const struct timespec old[2] = {{1'000'000'000, 0}, {1'000'000'000, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path_.c_str(), old, 0), 0);
    v1::ReadSliceRequest r = Request();
    r.set_mode(mode);
    int chunks = 0;
    absl::Status s = client_->ReadSlice(r, [&](const v1::SliceChunk&) {
      if (++chunks == 2) {
        // Rewrites the last MiB of data in place: no truncation, no SIGBUS.
        const int fd = ::open(path_.c_str(), O_WRONLY);
        EXPECT_GE(fd, 0);
        const std::string ones(1 << 20, '\x01');
        EXPECT_EQ(::pwrite(fd, ones.data(), ones.size(),
                           header_bytes_ + (off_t{1} << 26) - (1 << 20)),
                  static_cast<ssize_t>(ones.size()));
        ::close(fd);
      }
      return true;
    });
    EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kFileChangedDuringRead),
                         MessageNames("m.safetensors")));
    // The server lives, and the next read sees the new file whole.
    auto info = client_->GetCheckpoint("m.safetensors");
    EXPECT_TRUE(info.ok()) << info.status();
    r.set_slice("-1, -1");
    auto last = client_->ReadSliceAll(r);
    ASSERT_TRUE(last.ok()) << last.status();
  }
}

TEST_F(FileChangeTest, ReplacedFileIsSeenByTheNextCall) {
  ASSERT_TRUE(client_->GetCheckpoint("m.safetensors").ok());
  WriteFile(dir_ + "/new.tmp", BuildSafetensors({{"w", "I8", {3}, "abc"}}));
  std::filesystem::rename(dir_ + "/new.tmp", path_);
  auto data = client_->ReadSliceAll(Request());
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->shape, std::vector<int64_t>{3});
}

// A directory checkpoint is as fresh as its listing and its config files: a
// shard added, or config.json deleted, is seen by the next call.
TEST_F(FileChangeTest, DirectoryGainingAFileAndLosingConfigIsSeenNext) {
  const std::string d = dir_ + "/ckpt";
  ASSERT_TRUE(std::filesystem::create_directory(d));
  WriteFile(d + "/a.safetensors", BuildSafetensors({{"a", "I8", {3}, "abc"}}));
  WriteFile(d + "/config.json", R"({"model_type": "llama"})");
  auto opens = [&] {
    return client_->GetServerInfo()->counters().checkpoint_opens();
  };
  auto first = client_->GetCheckpoint("ckpt");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->files_size(), 1);
  const int64_t opened = opens();
  ASSERT_TRUE(client_->GetCheckpoint("ckpt").ok());
  EXPECT_EQ(opens(), opened) << "unchanged: served from the cache";

  WriteFile(d + "/b.safetensors", BuildSafetensors({{"b", "I8", {2}, "xy"}}));
  auto second = client_->GetCheckpoint("ckpt");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->files_size(), 2);
  EXPECT_EQ(opens(), opened + 1);

  std::filesystem::remove(d + "/config.json");
  ASSERT_TRUE(client_->GetCheckpoint("ckpt").ok());
  EXPECT_EQ(opens(), opened + 2) << "config.json deleted: reopened";
  WriteFile(d + "/quantize_config.json", R"({"bits": 4})");
  (void)client_->GetCheckpoint("ckpt");
  EXPECT_EQ(opens(), opened + 3) << "a config file appeared: reopened";
}

// The index of a sharded checkpoint is part of it: a shard added to the
// index is seen by the next call.
TEST_F(FileChangeTest, IndexGainingAShardIsSeenNext) {
  const std::string d = dir_ + "/sharded";
  ASSERT_TRUE(std::filesystem::create_directory(d));
  WriteFile(d + "/s1.safetensors", BuildSafetensors({{"a", "I8", {3}, "abc"}}));
  WriteFile(d + "/s2.safetensors", BuildSafetensors({{"b", "I8", {2}, "xy"}}));
  const std::string index = d + "/model.safetensors.index.json";
  WriteFile(index, R"({"weight_map": {"a": "s1.safetensors"}})");
  auto first = client_->GetCheckpoint("sharded/model.safetensors.index.json");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->files_size(), 1);
  WriteFile(
      index,
      R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  // Same size or not, the identity differs (a new mtime or size).
  const struct timespec later[2] = {{2'000'000'000, 0}, {2'000'000'000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, index.c_str(), later, 0), 0);
  auto second = client_->GetCheckpoint("sharded/model.safetensors.index.json");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->files_size(), 2);
}

// A cached file whose permissions change is opened again (chmod moves its
// ctime), so access is checked again: a reader without the permission is
// refused. (Root reads any file, so there the reopen is all one can see.)
TEST_F(FileChangeTest, ChmodReopensSoAccessIsCheckedAgain) {
  ASSERT_TRUE(client_->GetCheckpoint("m.safetensors").ok());
  const int64_t opened =
      client_->GetServerInfo()->counters().checkpoint_opens();
  ASSERT_EQ(::chmod(path_.c_str(), 0), 0);
  auto after = client_->GetCheckpoint("m.safetensors");
  if (::geteuid() == 0) {
    EXPECT_TRUE(after.ok()) << after.status();
  } else {
    EXPECT_EQ(after.status().code(), absl::StatusCode::kPermissionDenied)
        << after.status();
  }
  EXPECT_EQ(client_->GetServerInfo()->counters().checkpoint_opens(),
            opened + (::geteuid() == 0 ? 1 : 0));
  ASSERT_EQ(::chmod(path_.c_str(), 0644), 0);
}

TEST_F(FileChangeTest, DeletedFileIsNotFoundNext) {
  ASSERT_TRUE(client_->GetCheckpoint("m.safetensors").ok());
  std::filesystem::remove(path_);
  EXPECT_EQ(client_->GetCheckpoint("m.safetensors").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tensormorph
