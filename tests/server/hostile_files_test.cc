// Hostile files through a live server: every attack class, and every
// truncation of a header, is refused with DATA_LOSS naming the file and the
// rule, while another client streams from a good file on the same server
// without a single failure. Run under ASan by `tests/run.sh --sanitize`.
#include <atomic>
#include <string>
#include <thread>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/support/hostile_corpus.h"
#include "tests/support/loopback_server.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::HostileCorpus;
using ::tensormorph::testing::HostileFile;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;
using ::testing::AnyOf;

class HostileFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    // 4 MiB of F32 for the bystander to stream.
    WriteFile(dir_ + "/good.safetensors",
              BuildSafetensors(
                  {{"w", "F32", {1024, 1024}, std::string(4 << 20, '\x3f')}}));
    loopback_ = testing::StartLoopbackServer({dir_});
    client_ = loopback_.client.get();
    target_ = loopback_.address;
    bystander_ = std::thread([this] { StreamUntilStopped(); });
  }
  void TearDown() override {
    stop_ = true;
    if (bystander_.joinable()) bystander_.join();
    EXPECT_GT(streams_ok_.load(), 0) << "the bystander never finished a stream";
    EXPECT_EQ(streams_failed_.load(), 0) << last_failure_;
  }

  // Another user of the same server, on its own connection.
  void StreamUntilStopped() {
    auto client = *Client::Connect(target_);
    v1::ReadSliceRequest r;
    r.set_checkpoint("good.safetensors");
    r.set_tensor("w");
    r.set_max_chunk_bytes(256 << 10);
    while (!stop_) {
      auto data = client->ReadSliceAll(r);
      if (data.ok() && data->bytes.size() == (4u << 20)) {
        ++streams_ok_;
      } else {
        ++streams_failed_;
        last_failure_ = data.ok() ? "short read" : data.status().ToString();
      }
    }
  }

  // Writes `bytes` as `name` and expects the server to refuse it precisely:
  // `rule` matches the status (HasMetadata("rule", ...)), as the client
  // reads it off the wire.
  void ExpectRefused(const std::string& name, const std::string& bytes,
                     const ::testing::Matcher<absl::Status>& rule) {
    SCOPED_TRACE(name);
    WriteFile(dir_ + "/" + name, bytes);
    auto info = client_->GetCheckpoint(name);
    ASSERT_FALSE(info.ok()) << "opened a hostile file";
    EXPECT_THAT(info.status(), AllOf(HasReason(ErrorReason::kHeaderInvalid),
                                     MessageNames(name), rule));
    // Another RPC on the same file gets the same answer.
    EXPECT_THAT(client_->ListTensors(name).status(),
                AllOf(HasReason(ErrorReason::kHeaderInvalid), rule));
  }

  std::string dir_, target_;
  testing::LoopbackServer loopback_;
  Client* client_ = nullptr;
  std::thread bystander_;
  std::atomic<bool> stop_{false};
  std::atomic<int> streams_ok_{0}, streams_failed_{0};
  std::string last_failure_;
};

TEST_F(HostileFilesTest, EveryAttackClassIsRefusedWithItsRule) {
  const std::vector<HostileFile> corpus = HostileCorpus();
  ASSERT_GE(corpus.size(), 36u);
  for (const HostileFile& f : corpus) {
    ExpectRefused(f.name, f.bytes, HasMetadata("rule", f.rule));
    ASSERT_TRUE(client_->GetCheckpoint("good.safetensors").ok())
        << "the server stopped serving after " << f.name;
  }
}

TEST_F(HostileFilesTest, TruncationAtEveryByteOfAHeaderIsRefused) {
  // What a short header is called: a field that does not fit, a count or
  // length the rest cannot hold, or data past the end.
  const ::testing::Matcher<absl::Status> kShortGguf = AnyOf(
      HasMetadata("rule", "truncated"), HasMetadata("rule", "kv-count"),
      HasMetadata("rule", "tensor-count"), HasMetadata("rule", "string-length"),
      HasMetadata("rule", "data-range"));
  const ::testing::Matcher<absl::Status> kShortSafetensors =
      HasMetadata("rule", "header-length");
  uint64_t gguf_end = 0, st_end = 0;
  const std::string gguf = testing::ValidGgufBytes(&gguf_end);
  const std::string st = testing::ValidSafetensorsBytes(&st_end);
  for (uint64_t cut = 0; cut < gguf_end; ++cut) {
    // Named .gguf, it is held to GGUF's rules even below the 4 bytes of
    // its magic (truncated).
    ExpectRefused("cut" + std::to_string(cut) + ".gguf", gguf.substr(0, cut),
                  kShortGguf);
  }
  for (uint64_t cut = 0; cut < st_end; ++cut) {
    ExpectRefused("cut" + std::to_string(cut) + ".safetensors",
                  st.substr(0, cut), kShortSafetensors);
  }
  EXPECT_TRUE(client_->GetServerInfo().ok());
}

}  // namespace
}  // namespace tensormorph
