// The exception fence: an exception in a handler, reactor or worker task
// ends that one call with INTERNAL naming it, and the server keeps serving
// everyone else.
#include "server/exception_fence.h"

#include <atomic>
#include <filesystem>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/worker_pool.h"
#include "tests/support/cli_error.h"
#include "tests/support/loopback_server.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::ServerProcess;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;
using ::testing::AnyOf;

TEST(FencedTest, ReturnsWhatTheWorkReturns) {
  EXPECT_TRUE(Fenced({"Call"}, [] { return absl::OkStatus(); }).ok());
  EXPECT_EQ(Fenced({"Call"}, [] { return absl::DataLossError("x"); }).code(),
            absl::StatusCode::kDataLoss);
  absl::StatusOr<int> v =
      Fenced({"Call"}, [] { return absl::StatusOr<int>(7); });
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 7);
  int ran = 0;
  EXPECT_TRUE(Fenced({"Call"}, [&] { ++ran; }).ok());
  EXPECT_EQ(ran, 1);
}

TEST(FencedTest, AnExceptionBecomesInternalNamingTheCallCheckpointAndTensor) {
  // A real nlohmann type_error, as a wrong-typed config value throws it.
  absl::StatusOr<int64_t> v = Fenced(
      {"GetCheckpoint", "m/ckpt", "l.weight"}, []() -> absl::StatusOr<int64_t> {
        return nlohmann::json::parse(R"(["a"])")[0].get<int64_t>();
      });
  EXPECT_THAT(v, AllOf(HasReason(ErrorReason::kInternal),
                       MessageNames("GetCheckpoint"), MessageNames("'m/ckpt'"),
                       MessageNames("'l.weight'"), MessageNames("type_error")));
}

TEST(FencedTest, EveryKindOfExceptionIsCaught) {
  auto runtime =
      Fenced({"A"}, []() -> absl::Status { throw std::runtime_error("boom"); });
  EXPECT_THAT(runtime,
              AllOf(HasReason(ErrorReason::kInternal),
                    MessageNames("std::runtime_error"), MessageNames("boom")));
  auto alloc = Fenced({"B"}, [] { throw std::bad_alloc(); });
  EXPECT_THAT(alloc, AllOf(HasReason(ErrorReason::kInternal),
                           MessageNames("std::bad_alloc")));
  auto odd = Fenced({"C"}, [] { throw 42; });  // not a std::exception
  EXPECT_THAT(odd,
              AllOf(HasReason(ErrorReason::kInternal), MessageNames("int")));
}

TEST(WorkerPoolFenceTest, ATaskThatThrowsLeavesTheWorkerServing) {
  WorkerPool pool(1);
  pool.Submit([] { throw std::logic_error("a bug"); });
  absl::Notification ran;
  pool.Submit([&] { ran.Notify(); });
  ran.WaitForNotification();  // the one worker survived the first task
}

TEST(WorkerPoolFenceTest, ForkJoinRethrowsInTheCallerAfterBothHalvesEnd) {
  WorkerPool pool(2);
  for (int round = 0; round < 50; ++round) {
    // The first half waits until a worker has started the second, then
    // throws: the rethrow must come only after the second half is done.
    absl::Notification second_started;
    std::atomic<bool> second_done{false};
    EXPECT_THROW(pool.ForkJoin(
                     [&] {
                       second_started.WaitForNotification();
                       throw std::runtime_error("first");
                     },
                     [&] {
                       second_started.Notify();
                       absl::SleepFor(absl::Microseconds(200));
                       second_done = true;
                     }),
                 std::runtime_error);
    EXPECT_TRUE(second_done.load());
    // An exception from the second half reaches the caller too.
    std::atomic<bool> ran_first{false};
    EXPECT_THROW(pool.ForkJoin([&] { ran_first = true; },
                               [] { throw std::out_of_range("second"); }),
                 std::out_of_range);
    EXPECT_TRUE(ran_first.load());
  }
}

// A compressed-tensors config whose block_structure holds strings: before
// the typed config layer this threw nlohmann's type_error on a worker thread
// and terminated tensormorphd. Now the call ends INTERNAL (the fence) or
// DATA_LOSS (the typed layer), and the server keeps serving.
std::string WriteWrongTypedBlockConfig(const std::string& dir) {
  std::string codes(10 * 12, '\x10');
  WriteFile(dir + "/model.safetensors",
            BuildSafetensors(
                {{"l.weight", "F8_E4M3", {10, 12}, codes},
                 {"l.weight_scale", "F32", {3, 3}, std::string(9 * 4, '\0')}}));
  WriteFile(dir + "/config.json", R"({"quantization_config": {
    "quant_method": "compressed-tensors", "format": "float-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
      "num_bits": 8, "type": "float", "strategy": "block",
      "block_structure": ["a", "b"]}}}}})");
  return dir;
}

auto EndsInternalOrDataLoss() {
  return AnyOf(absl::StatusCode::kInternal, absl::StatusCode::kDataLoss);
}

TEST(ExceptionFenceServerTest, AWrongTypedConfigEndsItsCallsAndNoOneElses) {
  const std::string root = MakeTempDir();
  WriteFile(root + "/good.safetensors",
            BuildSafetensors(
                {{"w", "F32", {512, 512}, std::string(1 << 20, '\x3f')}}));
  std::filesystem::create_directories(root + "/bad");
  WriteWrongTypedBlockConfig(root + "/bad");
  auto loopback = testing::StartLoopbackServer({root});
  // A bystander streams from a good file on its own connection throughout.
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  std::string last_failure;
  std::thread bystander([&] {
    auto client = *Client::Connect(loopback.address);
    v1::ReadSliceRequest r;
    r.set_checkpoint("good.safetensors");
    r.set_tensor("w");
    r.set_max_chunk_bytes(128 << 10);
    // At least one stream, however late the thread starts: under load it
    // could start after the bad calls were done, and read nothing.
    do {
      auto data = client->ReadSliceAll(r);
      if (data.ok() && data->bytes.size() == (1u << 20)) {
        ++ok;
      } else {
        ++failed;
        last_failure = data.ok() ? "short read" : data.status().ToString();
      }
    } while (!stop);
  });
  Client& client = *loopback.client;
  for (int round = 0; round < 3; ++round) {
    auto info = client.GetCheckpoint("bad");
    EXPECT_THAT(info.status().code(), EndsInternalOrDataLoss())
        << info.status();
    EXPECT_THAT(info, MessageNames("bad"));
    EXPECT_THAT(client.ListTensors("bad").status().code(),
                EndsInternalOrDataLoss());
    EXPECT_THAT(client.GetArchitecture("bad").status().code(),
                EndsInternalOrDataLoss());
    v1::ReadSliceRequest read;
    read.set_checkpoint("bad");
    read.set_tensor("l.weight");
    EXPECT_THAT(client.ReadSliceAll(read).status().code(),
                EndsInternalOrDataLoss());
    v1::ComputeStatsRequest stats;
    stats.set_checkpoint("bad");
    stats.set_tensor("l.weight");
    EXPECT_THAT(client.ComputeStats(stats).status().code(),
                EndsInternalOrDataLoss());
    v1::QuantDiffRequest diff;
    diff.set_checkpoint("bad");
    diff.set_reference("good.safetensors");
    EXPECT_THAT(client.QuantDiff(diff, [](const auto&) { return true; }).code(),
                EndsInternalOrDataLoss());
  }
  // The server still serves, this client included.
  auto good = client.GetCheckpoint("good.safetensors");
  EXPECT_TRUE(good.ok()) << good.status();
  stop = true;
  bystander.join();
  EXPECT_GT(ok.load(), 0) << "the bystander never finished a stream";
  EXPECT_EQ(failed.load(), 0) << last_failure;
}

// The same through the real daemon and CLI: the process lives.
TEST(ExceptionFenceServerTest, TheDaemonOutlivesAWrongTypedConfig) {
  const std::string root = MakeTempDir();
  std::filesystem::create_directories(root + "/bad");
  WriteWrongTypedBlockConfig(root + "/bad");
  WriteFile(root + "/good.safetensors",
            BuildSafetensors({{"w", "F32", {2, 2}, std::string(16, '\0')}}));
  ServerProcess server({root});
  for (int i = 0; i < 3; ++i) {
    CommandResult bad =
        RunCommand({CliPath(), "--server", server.address(), "ls", "bad"});
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_THAT(CliErrorOf(bad.err).code(), EndsInternalOrDataLoss())
        << bad.err;
  }
  CommandResult good = RunCommand(
      {CliPath(), "--server", server.address(), "ls", "good.safetensors"});
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_EQ(server.Stop(), 0);  // it was alive to receive SIGTERM
  // The embedded CLI runs the same service in-process: a failed call, not
  // an abort (exit 134).
  CommandResult embedded = RunCommand({CliPath(), "ls", root + "/bad"});
  EXPECT_EQ(embedded.exit_code, 2) << embedded.err;
  EXPECT_THAT(CliErrorOf(embedded.err).code(), EndsInternalOrDataLoss())
      << embedded.err;
}

}  // namespace
}  // namespace tensormorph
