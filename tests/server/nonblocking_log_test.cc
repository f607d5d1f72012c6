// tensormorphd's log never holds a call: a server whose stderr nobody reads
// (a full pipe) keeps answering, and what it could not write is counted.
#include "server/nonblocking_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::Bytes;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::ServerProcess;
using ::tensormorph::testing::WriteFile;

TEST(NonBlockingLogTest, AServerWhoseLogReaderStallsKeepsAnswering) {
  const std::string root = MakeTempDir();
  std::vector<float> v(64 * 64, 0.5f);
  WriteFile(root + "/m.safetensors",
            BuildSafetensors({{"w", "F32", {64, 64}, Bytes(v)}}));
  // The read end is held and never read: once the pipe holds 64 KiB, a
  // write to it blocks.
  int log_pipe[2];
  ASSERT_EQ(::pipe2(log_pipe, O_CLOEXEC), 0);
  ServerProcess server({root}, {"--log-level", "info"}, log_pipe[1]);
  ::close(log_pipe[1]);
  auto client =
      Client::Connect(server.address(), {.timeout = absl::Seconds(20)});
  ASSERT_TRUE(client.ok()) << client.status();
  // Each call logs a line of about 130 bytes: 2,000 of them are four times
  // what the pipe holds.
  v1::InspectScalarsRequest r;
  r.set_checkpoint("m.safetensors");
  r.set_tensor("w");
  r.add_flat_indices(5);
  for (int i = 0; i < 2000; ++i) {
    auto reply = (*client)->InspectScalars(r);
    ASSERT_TRUE(reply.ok()) << "call " << i << ": " << reply.status();
    ASSERT_EQ(reply->scalars(0).value(), 0.5);
  }
  // What was written is the log: its first lines are there.
  std::string head(4096, '\0');
  const ssize_t n = ::read(log_pipe[0], head.data(), head.size());
  ASSERT_GT(n, 0);
  head.resize(static_cast<size_t>(n));
  EXPECT_NE(head.find("InspectScalars"), std::string::npos) << head;
  // Stopping does not wait on the reader either.
  EXPECT_EQ(server.Stop(), 0);
  ::close(log_pipe[0]);
}

TEST(NonBlockingLogTest, WithoutAnInstallNothingIsDroppedOrDrained) {
  EXPECT_EQ(LogLinesDropped(), 0);
  EXPECT_FALSE(DrainLog(absl::Milliseconds(1)));
}

}  // namespace
}  // namespace tensormorph
