// A user who can write inside a served root attacks a live tensormorphd:
// swaps a directory for a symlink out of the root while calls resolve it,
// links configs and indexes out of the root, sends paths with NUL bytes,
// rewrites a file in place during reads and restores its mtime. No byte
// from outside the roots is ever served or quoted, no read that mixes old
// and new bytes ends OK, and a bystander's calls keep succeeding.
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/support/loopback_server.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::MessageOmits;
using ::tensormorph::testing::ServerProcess;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;

namespace fs = std::filesystem;

constexpr char kSecret[] = "PRIVATE-API-KEY-xyz";

std::string Floats(int n, float v) {
  std::string s(static_cast<size_t>(n) * 4, '\0');
  for (int i = 0; i < n; ++i) std::memcpy(&s[i * 4], &v, 4);
  return s;
}

// The little-endian u64 of a text's first 8 bytes, as a safetensors header
// length would quote it.
std::string FirstEightAsLength(const std::string& text) {
  uint64_t v = 0;
  std::memcpy(&v, text.data(), 8);
  return std::to_string(v);
}

class SandboxAttackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::canonical(MakeTempDir()).string();
    root_ = base_ + "/root";
    out_ = base_ + "/outside";
    fs::create_directories(root_ + "/m");
    fs::create_directories(out_ + "/m");
    WriteFile(root_ + "/m/model.safetensors",
              BuildSafetensors({{"w", "F32", {256}, Floats(256, 1.0f)}}));
    WriteFile(out_ + "/m/model.safetensors",
              BuildSafetensors({{"w", "F32", {256}, Floats(256, 777.0f)}}));
    WriteFile(out_ + "/secret.txt", std::string(kSecret) + " and more text");
    WriteFile(out_ + "/config.json",
              std::string(R"({"quantization_config": ")") + kSecret + "\"}");
    WriteFile(root_ + "/good.safetensors",
              BuildSafetensors({{"g", "F32", {1024}, Floats(1024, 3.0f)}}));
    server_.emplace(std::vector<std::string>{root_});
    client_ = *Client::Connect(server_->address());
    bystander_ = std::thread([this] { Bystander(); });
  }
  void TearDown() override {
    // A test may end before one read could: the bystander must have been
    // served beside it all the same.
    first_read_.WaitForNotificationWithTimeout(absl::Seconds(60));
    stop_ = true;
    bystander_.join();
    EXPECT_GT(bystander_ok_.load(), 0) << "the bystander never finished";
    EXPECT_EQ(bystander_failed_.load(), 0) << bystander_error_;
  }

  void Bystander() {
    auto client = *Client::Connect(server_->address());
    v1::ReadSliceRequest r;
    r.set_checkpoint("good.safetensors");
    r.set_tensor("g");
    while (!stop_) {
      auto got = client->ReadSliceAll(r);
      if (got.ok() && got->floats().size() == 1024 &&
          got->floats()[0] == 3.0f && got->floats()[1023] == 3.0f) {
        ++bystander_ok_;
      } else {
        ++bystander_failed_;
        bystander_error_ = got.status().ToString();
      }
      if (!first_read_.HasBeenNotified()) first_read_.Notify();
    }
  }

  // Fails the test when `s` quotes anything of the files outside the root.
  void ExpectNothingOutsideIn(const absl::Status& s) {
    EXPECT_THAT(s, AllOf(MessageOmits("PRIVATE"),
                         MessageOmits(FirstEightAsLength(kSecret)),
                         MessageOmits(out_)));
  }

  std::string base_, root_, out_;
  std::optional<ServerProcess> server_;
  std::unique_ptr<Client> client_;
  std::thread bystander_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> bystander_ok_{0}, bystander_failed_{0};
  std::string bystander_error_;
  absl::Notification first_read_;
};

// renameat2(RENAME_EXCHANGE) swaps a real directory and a symlink out of the
// root atomically, as fast as it can, while 10,000 calls resolve and open
// the checkpoint beneath it: each call sees one or the other, never a file
// from outside.
TEST_F(SandboxAttackTest, DirectorySwappedForASymlinkNeverLeadsOutside) {
  for (const std::string& target : {std::string("../outside/m"), out_ + "/m"}) {
    SCOPED_TRACE(target);
    const std::string link = root_ + "/m.swap";
    fs::remove(link);
    fs::create_directory_symlink(target, link);
    // A single-file checkpoint swapped for a symlink to a text file.
    WriteFile(root_ + "/f.safetensors",
              BuildSafetensors({{"w", "F32", {256}, Floats(256, 1.0f)}}));
    fs::remove(root_ + "/f.swap");
    fs::create_symlink(out_ + "/secret.txt", root_ + "/f.swap");
    std::atomic<bool> done{false};
    std::atomic<int64_t> swaps{0};
    std::thread swapper([&] {
      while (!done) {
        ASSERT_EQ(::renameat2(AT_FDCWD, (root_ + "/m").c_str(), AT_FDCWD,
                              link.c_str(), RENAME_EXCHANGE),
                  0);
        ASSERT_EQ(
            ::renameat2(AT_FDCWD, (root_ + "/f.safetensors").c_str(), AT_FDCWD,
                        (root_ + "/f.swap").c_str(), RENAME_EXCHANGE),
            0);
        ++swaps;
      }
    });
    int64_t served = 0, refused = 0;
    for (int i = 0; i < 10'000; ++i) {
      v1::ReadSliceRequest r;
      r.set_checkpoint(i % 3 == 0   ? "m"
                       : i % 3 == 1 ? "m/model.safetensors"
                                    : "f.safetensors");
      r.set_tensor("w");
      auto got = client_->ReadSliceAll(r);
      if (!got.ok()) {
        ++refused;
        ExpectNothingOutsideIn(got.status());
        continue;
      }
      ++served;
      ASSERT_EQ(got->floats().size(), 256u);
      for (float v : got->floats()) ASSERT_EQ(v, 1.0f) << "served from outside";
    }
    done = true;
    swapper.join();
    EXPECT_GT(swaps.load(), 100);
    EXPECT_GT(served, 0);
    EXPECT_GT(refused, 0) << "the race was never hit";
    // Put the real ones back where they were.
    if (fs::is_symlink(root_ + "/m")) {
      ASSERT_EQ(::renameat2(AT_FDCWD, (root_ + "/m").c_str(), AT_FDCWD,
                            link.c_str(), RENAME_EXCHANGE),
                0);
    }
    if (fs::is_symlink(root_ + "/f.safetensors")) {
      ASSERT_EQ(
          ::renameat2(AT_FDCWD, (root_ + "/f.safetensors").c_str(), AT_FDCWD,
                      (root_ + "/f.swap").c_str(), RENAME_EXCHANGE),
          0);
    }
  }
}

// Configs and the index beside a checkpoint are opened beneath the root as
// its tensors are: one linked out of the root is refused, never read, so
// none of its values can come back in an error.
TEST_F(SandboxAttackTest, ConfigsAndIndexLinkedOutOfTheRootAreRefused) {
  for (const char* name :
       {"config.json", "quantize_config.json", "quant_config.json",
        "model.safetensors.index.json"}) {
    SCOPED_TRACE(name);
    const std::string dir = root_ + "/c_" + name;
    fs::create_directories(dir);
    WriteFile(dir + "/model.safetensors",
              BuildSafetensors({{"w", "F32", {4}, Floats(4, 1.0f)}}));
    fs::create_symlink(out_ + "/config.json", dir + "/" + name);
    const std::string rel = dir.substr(root_.size() + 1);
    // A config beside a file is read with it; an index only when the
    // directory is opened (one file opens alone).
    std::vector<std::string> paths = {rel};
    if (absl::string_view(name) != "model.safetensors.index.json") {
      paths.push_back(rel + "/model.safetensors");
    } else {
      EXPECT_TRUE(client_->GetCheckpoint(rel + "/model.safetensors").ok());
    }
    for (const std::string& path : paths) {
      auto got = client_->GetCheckpoint(path);
      EXPECT_EQ(got.status().code(), absl::StatusCode::kPermissionDenied)
          << got.status();
      ExpectNothingOutsideIn(got.status());
    }
  }
  // The same link inside the root is followed.
  WriteFile(root_ + "/real_config.json", R"({"architectures": ["X"]})");
  fs::create_symlink("../real_config.json", root_ + "/m/config.json");
  EXPECT_TRUE(client_->GetCheckpoint("m").ok());
}

// The kernel reads a path up to its first NUL: "m/..\0/x" must not pass the
// sandbox as one path and open as another.
TEST_F(SandboxAttackTest, PathsWithNulBytesAreInvalid) {
  for (const std::string& path :
       {std::string("m/..\0/../outside/secret.txt", 27),
        std::string("good.safetensors\0", 17)}) {
    auto got = client_->GetCheckpoint(path);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument)
        << got.status();
  }
}

class FileRewriteTest : public SandboxAttackTest {
 protected:
  static constexpr int kElems = 1 << 20;  // 4 MiB of F32
  void SetUp() override {
    SandboxAttackTest::SetUp();
    path_ = root_ + "/big.safetensors";
    WriteTensor(kElems);
  }
  // big.safetensors as one F32 tensor "w" of `elems` ones.
  void WriteTensor(int elems) {
    elems_ = elems;
    const std::string file =
        BuildSafetensors({{"w", "F32", {elems}, Floats(elems, 1.0f)}});
    data_offset_ = static_cast<off_t>(file.size()) - int64_t{elems} * 4;
    WriteFile(path_, file);
  }
  // Rewrites every value in place with `v` in one write (so the file holds
  // one value throughout, but while the write copies), then sets the mtime
  // back to what it was: only ctime tells.
  void RewriteRestoringMtime(float v) {
    struct stat before;
    ASSERT_EQ(::stat(path_.c_str(), &before), 0);
    const int fd = ::open(path_.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    const std::string all = Floats(elems_, v);
    ASSERT_EQ(::pwrite(fd, all.data(), all.size(), data_offset_),
              static_cast<ssize_t>(all.size()));
    const struct timespec times[2] = {before.st_atim, before.st_mtim};
    ASSERT_EQ(::futimens(fd, times), 0);
    ::close(fd);
  }
  std::string path_;
  int elems_ = 0;
  off_t data_offset_ = 0;
};

TEST_F(FileRewriteTest, ARewriteThatRestoresTheMtimeEndsTheStreamAborted) {
  // More than gRPC's flow-control window lets the server send ahead of a
  // client that has read two chunks: with 4 MiB a loaded machine saw the
  // whole stream sent, and OK, before the rewrite.
  WriteTensor(1 << 23);
  v1::ReadSliceRequest r;
  r.set_checkpoint("big.safetensors");
  r.set_tensor("w");
  r.set_max_chunk_bytes(64 << 10);
  int chunks = 0;
  absl::Status s = client_->ReadSlice(r, [&](const v1::SliceChunk&) {
    if (++chunks == 2) RewriteRestoringMtime(2.0f);
    return true;
  });
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kFileChangedDuringRead),
                       MessageNames("big.safetensors")));
  // The next read sees the new file whole.
  auto again = client_->ReadSliceAll(r);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->floats()[0], 2.0f);
  EXPECT_EQ(again->floats()[elems_ - 1], 2.0f);
}

// A writer flips the tensor between all-1 and all-2 in place, restoring the
// mtime after each pass, while reads of every kind run: a read that ends OK
// holds one value throughout.
TEST_F(FileRewriteTest, AContinuousInPlaceWriterNeverLetsAMixedReadEndOk) {
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int pass = 0; !done; ++pass) RewriteRestoringMtime(pass % 2 ? 1 : 2);
  });
  int64_t ok = 0, aborted = 0, mixed = 0;
  for (int i = 0; i < 1000; ++i) {
    v1::ReadSliceRequest r;
    r.set_checkpoint("big.safetensors");
    r.set_tensor("w");
    r.set_max_chunk_bytes(256 << 10);
    auto slice = client_->ReadSliceAll(r);
    v1::InspectScalarsRequest q;
    q.set_checkpoint("big.safetensors");
    q.set_tensor("w");
    for (int64_t k = 0; k < kElems; k += kElems / 64) q.add_flat_indices(k);
    q.add_flat_indices(kElems - 1);
    auto scalars = client_->InspectScalars(q);
    v1::ComputeStatsRequest st;
    st.set_checkpoint("big.safetensors");
    st.set_tensor("w");
    auto stats = client_->ComputeStats(st);
    for (const absl::Status& s :
         {slice.status(), scalars.status(), stats.status()}) {
      if (s.ok()) {
        ++ok;
      } else if (s.code() == absl::StatusCode::kAborted) {
        ++aborted;
      } else {
        // A read that saw the file mid-change some other way; never OK.
        EXPECT_THAT(s.code(),
                    ::testing::AnyOf(absl::StatusCode::kFailedPrecondition,
                                     absl::StatusCode::kAborted))
            << s;
      }
    }
    if (slice.ok()) {
      const float first = slice->floats()[0];
      bool differs = false;
      for (float v : slice->floats()) differs |= v != first;
      mixed += differs;
    }
    if (scalars.ok()) {
      bool differs = false;
      for (const auto& sc : scalars->scalars()) {
        differs |= sc.value() != scalars->scalars(0).value();
      }
      mixed += differs;
    }
    if (stats.ok()) mixed += stats->min() != stats->max();
  }
  done = true;
  writer.join();
  EXPECT_EQ(mixed, 0) << ok << " reads ended OK";
  EXPECT_GT(aborted, 0) << "no read ever overlapped a write";
}

// A safetensors file whose header claims 100 MB that are not JSON (an
// unterminated string), slow to refuse: what the attack opened. Under ASan's
// Debug build one scan of 100 MB takes over a minute, and 10 MB shows the
// same.
std::string CorruptHeaderFile() {
#if defined(__SANITIZE_ADDRESS__)
  const uint64_t n = 10'000'000;
#else
  const uint64_t n = 100'000'000;
#endif
  std::string bad(8 + n, ' ');
  std::memcpy(bad.data(), &n, 8);
  bad[8] = '{';
  bad[9] = '"';
  return bad;
}

// Six calls at once, then six more, on a checkpoint with a corrupt 100 MB
// header parse it once: concurrent calls wait for the one open, and its
// failure is remembered with the file's identity, reused while that holds
// and forgotten when the file changes. (The in-process server, to read its
// registry's counters.)
TEST(CorruptHeaderTest, IsParsedOnceNotPerCall) {
  const std::string root = fs::canonical(MakeTempDir()).string();
  WriteFile(root + "/bad.safetensors", CorruptHeaderFile());
  WriteFile(root + "/good.safetensors",
            BuildSafetensors({{"g", "F32", {4}, Floats(4, 3.0f)}}));
  testing::LoopbackServer lb = testing::StartLoopbackServer({root});
  const CheckpointRegistry& registry = lb.server->state().registry;
  ASSERT_TRUE(lb.client->GetCheckpoint("good.safetensors").ok());
  const int64_t opens_before = registry.opens();
  std::vector<std::thread> callers;
  std::atomic<int> data_loss{0};
  for (int i = 0; i < 6; ++i) {
    callers.emplace_back([&] {
      auto c = *Client::Connect(lb.address);
      data_loss += c->GetCheckpoint("bad.safetensors").status().code() ==
                   absl::StatusCode::kDataLoss;
    });
  }
  for (std::thread& t : callers) t.join();
  for (int i = 0; i < 6; ++i) {
    auto again = lb.client->GetCheckpoint("bad.safetensors");
    EXPECT_EQ(again.status().code(), absl::StatusCode::kDataLoss);
    data_loss += again.status().code() == absl::StatusCode::kDataLoss;
  }
  EXPECT_EQ(data_loss.load(), 12);
  EXPECT_EQ(registry.opens() - opens_before, 1) << "parsed more than once";
  EXPECT_GE(registry.failed_opens_reused(), 6);
  // Repaired: opened again, and served.
  WriteFile(root + "/bad.safetensors",
            BuildSafetensors({{"w", "F32", {4}, Floats(4, 1.0f)}}));
  EXPECT_TRUE(lb.client->GetCheckpoint("bad.safetensors").ok());
  EXPECT_EQ(registry.opens() - opens_before, 2);
}

// The calls that wait for that one parse hold no worker meanwhile: on
// --workers 2, with one worker parsing and five unary calls and a
// ReadSlice waiting, a bystander's calls on another checkpoint complete
// during the parse, and every waiter then gets the parse's DATA_LOSS.
TEST(CorruptHeaderTest, WaitersHoldNoWorker) {
  const std::string root = fs::canonical(MakeTempDir()).string();
  WriteFile(root + "/bad.safetensors", CorruptHeaderFile());
  WriteFile(root + "/good.safetensors",
            BuildSafetensors({{"g", "F32", {4}, Floats(4, 3.0f)}}));
  testing::LoopbackServer lb =
      testing::StartLoopbackServer({root}, /*workers=*/2);
  const CheckpointRegistry& registry = lb.server->state().registry;
  ASSERT_TRUE(lb.client->GetTensor("good.safetensors", "g").ok());
  const int64_t opens_before = registry.opens();
  const int64_t parked_before = registry.parked_calls();
  std::vector<std::thread> callers;
  std::atomic<int> data_loss{0};
  for (int i = 0; i < 6; ++i) {
    callers.emplace_back([&, i] {
      auto c = *Client::Connect(lb.address);
      absl::Status s;
      if (i == 5) {
        v1::ReadSliceRequest req;
        req.set_checkpoint("bad.safetensors");
        req.set_tensor("w");
        s = c->ReadSlice(req, [](const v1::SliceChunk&) { return true; });
      } else {
        s = c->GetCheckpoint("bad.safetensors").status();
      }
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
      data_loss += s.code() == absl::StatusCode::kDataLoss;
    });
  }
  // Five of the six park behind the one that parses.
  while (registry.parked_calls() - parked_before < 5 &&
         registry.opens() == opens_before) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(registry.parked_calls() - parked_before, 5)
      << "the parse ended before the waiters arrived";
  int during_parse = 0;
  while (registry.opens() == opens_before) {
    ASSERT_TRUE(lb.client->GetTensor("good.safetensors", "g").ok());
    during_parse += registry.opens() == opens_before;
  }
  for (std::thread& t : callers) t.join();
  EXPECT_GT(during_parse, 0) << "the bystander waited for the parse";
  EXPECT_EQ(data_loss.load(), 6);
  EXPECT_EQ(registry.opens() - opens_before, 1);
}

}  // namespace
}  // namespace tensormorph
