// Client::ReadSlicePieces, remote (pieces of the received messages, a long
// slice received on a second thread) and embedded (chunks straight from the
// in-process service): the bytes of the stored tensor, one call per chunk,
// and a caller that stops mid-way, or cancels from another thread, ends the
// read at once.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/embedded/embedded_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/process.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::ServerProcess;

constexpr int64_t kRows = 1100, kCols = 2048;  // 8.6 MiB of F32

class ReadSlicePiecesTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeTempDir());
    values_ = new std::string(
        testing::ToF32Bytes(testing::Gaussian(kRows * kCols, 11)));
    testing::WriteFile(
        *dir_ + "/m.safetensors",
        testing::BuildSafetensors({{"w", "F32", {kRows, kCols}, *values_}}));
    server_ = new ServerProcess({*dir_});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  void SetUp() override {
    auto c =
        GetParam() ? Client::Connect(server_->address()) : EmbeddedClient();
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }

  static v1::ReadSliceRequest Whole(v1::OutputMode mode) {
    v1::ReadSliceRequest r;
    r.set_checkpoint(*dir_ + "/m.safetensors");
    r.set_tensor("w");
    r.set_mode(mode);
    return r;
  }

  static std::string* dir_;
  static std::string* values_;
  static ServerProcess* server_;
  std::unique_ptr<Client> client_;
};
std::string* ReadSlicePiecesTest::dir_ = nullptr;
std::string* ReadSlicePiecesTest::values_ = nullptr;
ServerProcess* ReadSlicePiecesTest::server_ = nullptr;

TEST_P(ReadSlicePiecesTest, ALongSliceIsTheStoredBytesOneCallPerChunk) {
  for (const v1::OutputMode mode :
       {v1::OUTPUT_MODE_RAW, v1::OUTPUT_MODE_FLOAT32}) {
    SCOPED_TRACE(v1::OutputMode_Name(mode));
    std::string got;
    int calls = 0;
    v1::SliceHeader header;
    absl::Status s = client_->ReadSlicePieces(
        Whole(mode),
        [&](const v1::SliceHeader& h) {
          header = h;
          return true;
        },
        [&](absl::Span<const absl::string_view> pieces) {
          size_t bytes = 0;
          for (absl::string_view p : pieces) {
            got.append(p.data(), p.size());
            bytes += p.size();
          }
          EXPECT_LE(bytes, size_t{1} << 20);  // at most a chunk a call
          ++calls;
          return true;
        });
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(header.dtype(), "F32");
    EXPECT_EQ(header.total_bytes(), kRows * kCols * 4);
    EXPECT_TRUE(got == *values_) << "the bytes differ";
    EXPECT_EQ(calls, (kRows * kCols * 4 + (1 << 20) - 1) >> 20);
  }
}

TEST_P(ReadSlicePiecesTest, ByPieceTheBytesAreTheSame) {
  std::string got;
  absl::Status s = client_->ReadSliceStreaming(
      Whole(v1::OUTPUT_MODE_RAW), [](const v1::SliceHeader&) { return true; },
      [&](absl::string_view data) {
        got.append(data.data(), data.size());
        return true;
      });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(got == *values_) << "the bytes differ";
}

TEST_P(ReadSlicePiecesTest, StoppingMidWayCancelsAndTheClientReadsOn) {
  for (const int stop_at : {0, 1, 3}) {
    SCOPED_TRACE(stop_at);
    int calls = 0;
    absl::Status s = client_->ReadSlicePieces(
        Whole(v1::OUTPUT_MODE_FLOAT32),
        [](const v1::SliceHeader&) { return true; },
        [&](absl::Span<const absl::string_view>) { return calls++ < stop_at; });
    EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
    EXPECT_EQ(calls, stop_at + 1);
  }
  absl::Status header_stop = client_->ReadSlicePieces(
      Whole(v1::OUTPUT_MODE_RAW), [](const v1::SliceHeader&) { return false; },
      [](absl::Span<const absl::string_view>) { return true; });
  EXPECT_EQ(header_stop.code(), absl::StatusCode::kCancelled);
  auto all = client_->ReadSliceAll(Whole(v1::OUTPUT_MODE_RAW));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->bytes == *values_);
}

// True once every thread of `pid` is stopped (SIGSTOP is delivered
// asynchronously: a call made meanwhile could still be answered).
bool EveryThreadStopped(pid_t pid) {
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  for (int i = 0; i < 10000; ++i) {
    bool all = true;
    for (const auto& t : std::filesystem::directory_iterator(tasks)) {
      std::ifstream f(t.path() / "stat");
      std::string stat((std::istreambuf_iterator<char>(f)), {});
      const size_t paren = stat.rfind(')');
      if (paren != std::string::npos && paren + 2 < stat.size() &&
          stat[paren + 2] != 'T' && stat[paren + 2] != 't') {
        all = false;
      }
    }
    if (all) return true;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return false;
}

// The canceller stops a remote call; an embedded read has no call to cancel
// and ignores it (client.h), so this runs against a server only.
class RemoteReadSlicePiecesTest : public ReadSlicePiecesTest {};

TEST_P(RemoteReadSlicePiecesTest,
       ACancellerEndsAReadThatWaitsFromAnotherThread) {
  // The server stopped (SIGSTOP: its port accepts, nothing answers): no
  // callback runs to return false, and no deadline is set.
  ASSERT_TRUE(client_->GetServerInfo().ok());  // connected
  ASSERT_EQ(kill(server_->pid(), SIGSTOP), 0);
  struct Resume {
    pid_t pid;
    ~Resume() { kill(pid, SIGCONT); }  // however the test ends
  } resume{server_->pid()};
  ASSERT_TRUE(EveryThreadStopped(server_->pid()));
  CallCanceller cancel;
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(200));
    cancel.Cancel();
  });
  const absl::Time start = absl::Now();
  absl::Status s = client_->ReadSlicePieces(
      Whole(v1::OUTPUT_MODE_RAW), [](const v1::SliceHeader&) { return true; },
      [](absl::Span<const absl::string_view>) { return true; }, &cancel);
  canceller.join();
  ASSERT_EQ(kill(server_->pid(), SIGCONT), 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  // One cancelled before the read starts ends at once.
  CallCanceller before;
  before.Cancel();
  absl::Status early = client_->ReadSlicePieces(
      Whole(v1::OUTPUT_MODE_RAW), [](const v1::SliceHeader&) { return true; },
      [](absl::Span<const absl::string_view>) { return true; }, &before);
  EXPECT_EQ(early.code(), absl::StatusCode::kCancelled) << early;
  // The server, resumed, serves the client as before.
  auto all = client_->ReadSliceAll(Whole(v1::OUTPUT_MODE_RAW));
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(all->bytes == *values_);
}

INSTANTIATE_TEST_SUITE_P(BothModes, ReadSlicePiecesTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Remote" : "Embedded";
                         });
INSTANTIATE_TEST_SUITE_P(Remote, RemoteReadSlicePiecesTest,
                         ::testing::Values(true),
                         [](const auto&) { return "Remote"; });

}  // namespace
}  // namespace tensormorph
