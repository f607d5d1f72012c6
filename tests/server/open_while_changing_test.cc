// Files rewritten in place while the server opens them (`cp new.gguf x.gguf`
// truncates, then writes): every byte read at open time, the magic sniffed,
// the header parsed, the metadata rendered, the index and the configs, is
// read under the fault guard or with read(2). Each call answers OK or a
// precise status; the server never dies of SIGBUS (here it is this test's
// own process), and once the writer stops the file opens again.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/support/loopback_server.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::ReadFileBytes;
using ::tensormorph::testing::WriteFile;

// As cp does: truncate, then write (in two halves, to widen the window in
// which the file is shorter than its header says).
void RewriteInPlace(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0);
  const size_t half = bytes.size() / 2;
  ASSERT_EQ(::write(fd, bytes.data(), half), static_cast<ssize_t>(half));
  ASSERT_EQ(::write(fd, bytes.data() + half, bytes.size() - half),
            static_cast<ssize_t>(bytes.size() - half));
  ::close(fd);
}

// Rewrites `path` while `open` is called in a loop, for at most 3 seconds
// and 2,000 rewrites; returns the status codes the calls answered.
std::map<absl::StatusCode, std::string> OpenWhileRewriting(
    const std::string& path, const std::string& bytes,
    const std::function<absl::Status()>& open) {
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    const absl::Time end = absl::Now() + absl::Seconds(3);
    for (int i = 0; i < 2000 && absl::Now() < end; ++i) {
      RewriteInPlace(path, bytes);
    }
    stop = true;
  });
  std::map<absl::StatusCode, std::string> seen;  // code -> a message
  while (!stop) {
    const absl::Status s = open();
    seen.emplace(s.code(), s.message());
  }
  writer.join();
  return seen;
}

const std::set<absl::StatusCode> kExpected = {
    absl::StatusCode::kOk, absl::StatusCode::kDataLoss,
    absl::StatusCode::kFailedPrecondition};

TEST(OpenWhileChangingTest, AGgufRewrittenInPlaceWhileOpenedNeverKillsTheServer) {
  const std::string dir = MakeTempDir();
  const std::string bytes = ReadFileBytes(Fixture("gguf/Q4_K.gguf"));
  WriteFile(dir + "/x.gguf", bytes);
  testing::LoopbackServer lb = testing::StartLoopbackServer({dir});
  const std::map<absl::StatusCode, std::string> seen =
      OpenWhileRewriting(dir + "/x.gguf", bytes, [&] {
        return lb.client->GetCheckpoint("x.gguf").status();
      });
  for (const auto& [code, message] : seen) {
    EXPECT_TRUE(kExpected.contains(code))
        << absl::StatusCodeToString(code) << ": " << message;
  }
  auto info = lb.client->GetCheckpoint("x.gguf");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_GT(info->tensor_count(), 0);
}

TEST(OpenWhileChangingTest, AnIndexTruncatedWhileParsedNeverKillsTheServer) {
  const std::string root = MakeTempDir();
  const std::string dir = root + "/ckpt";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  WriteFile(dir + "/s.safetensors",
            BuildSafetensors({{"w", "F32", {2, 2}, std::string(16, '\1')}}));
  // About 1.4 MB, as in the report: metadata the reader skips, then the map.
  const std::string index = "{\"metadata\": {\"pad\": \"" +
                            std::string(1400000, 'x') +
                            "\"}, \"weight_map\": {\"w\": \"s.safetensors\"}}";
  const std::string path = dir + "/model.safetensors.index.json";
  WriteFile(path, index);
  testing::LoopbackServer lb = testing::StartLoopbackServer({root});
  const std::map<absl::StatusCode, std::string> seen = OpenWhileRewriting(
      path, index, [&] { return lb.client->GetCheckpoint("ckpt").status(); });
  for (const auto& [code, message] : seen) {
    EXPECT_TRUE(kExpected.contains(code))
        << absl::StatusCodeToString(code) << ": " << message;
  }
  auto info = lb.client->GetCheckpoint("ckpt");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->tensor_count(), 1);
}

}  // namespace
}  // namespace tensormorph
