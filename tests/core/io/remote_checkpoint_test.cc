// Checkpoints opened by URL (core/io/remote_files.h through
// Checkpoint::Open) from Debian's nginx and npm's s3rver, against the same
// files opened locally: every value alike to the bit, only the bytes read
// fetched, a replaced object refused rather than mixed.
#include <filesystem>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/format/checkpoint.h"
#include "core/io/fault_guard.h"
#include "core/io/remote_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/io/storage_test_data.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/many_shards.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/sharded_checkpoint.h"
#include "tests/support/status_matchers.h"
#include "tests/support/storage_servers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::testing::AllOf;

namespace fs = std::filesystem;

std::shared_ptr<const RemoteFiles> Remote(
    EnvLookup env = [](absl::string_view) -> std::optional<std::string> {
      return std::nullopt;
    },
    uint64_t budget = uint64_t{1} << 30) {
  RemoteFilesOptions o;
  o.storage.http = testing::TestHttpOptions();
  o.storage.env = std::move(env);
  o.budget_bytes = budget;
  auto r = RemoteFiles::Create(std::move(o));
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

absl::StatusOr<std::shared_ptr<const Checkpoint>> OpenRemote(
    const std::string& url, std::shared_ptr<const RemoteFiles> remote) {
  OpenOptions o;
  o.remote = std::move(remote);
  return Checkpoint::Open(url, o);
}

// Every element of `t`, decoded under the guard (remote bytes are fetched
// as the decode touches them).
absl::StatusOr<std::vector<float>> DecodeAll(const LogicalTensor& t) {
  std::vector<float> out(static_cast<size_t>(t.num_elements));
  absl::Status s = GuardedRead(
      [&] { return t.encoding->Decode(0, t.num_elements, out.data()); });
  if (!s.ok()) return s;
  return out;
}

// The two opens hold the same tensors with the same values, bit for bit.
void ExpectSameValues(const Checkpoint& remote, const Checkpoint& local) {
  ASSERT_EQ(remote.tensors().size(), local.tensors().size());
  EXPECT_EQ(remote.conventions(), local.conventions());
  EXPECT_EQ(remote.metadata().size(), local.metadata().size());
  for (size_t i = 0; i < local.tensors().size(); ++i) {
    const LogicalTensor& l = local.tensors()[i];
    const LogicalTensor& r = remote.tensors()[i];
    ASSERT_EQ(r.name, l.name);
    EXPECT_EQ(r.shape, l.shape) << l.name;
    auto lv = DecodeAll(l);
    auto rv = DecodeAll(r);
    ASSERT_TRUE(lv.ok()) << lv.status();
    ASSERT_TRUE(rv.ok()) << rv.status();
    ASSERT_EQ(rv->size(), lv->size());
    EXPECT_EQ(std::memcmp(rv->data(), lv->data(), lv->size() * sizeof(float)),
              0)
        << l.name;
  }
}

class RemoteCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::NginxPath().empty()) GTEST_SKIP() << "nginx is not installed";
    data_ = testing::MakeTempDir();
  }
  void Serve() { nginx_ = std::make_unique<testing::NginxServer>(data_); }
  // Requests nginx logged so far on its first port.
  int Requests() const {
    int n = 0;
    for (absl::string_view line :
         absl::StrSplit(nginx_->AccessLog(), '\n', absl::SkipEmpty())) {
      n += absl::StartsWith(line, absl::StrCat(nginx_->port(), " "));
    }
    return n;
  }

  std::string data_;
  std::unique_ptr<testing::NginxServer> nginx_;
};

TEST_F(RemoteCheckpointTest, AShardedCheckpointByUrlDecodesAsItsLocalCopy) {
  const testing::ShardedCheckpoint c = testing::WriteShardedGptq();
  fs::copy(c.dir, data_ + "/gptq", fs::copy_options::recursive);
  Serve();
  auto local = Checkpoint::Open(c.dir);
  ASSERT_TRUE(local.ok()) << local.status();
  for (const std::string& url :
       {nginx_->Url("/gptq/"),
        nginx_->Url("/gptq/model.safetensors.index.json")}) {
    auto remote = OpenRemote(url, Remote());
    ASSERT_TRUE(remote.ok()) << remote.status();
    EXPECT_EQ((*remote)->files().size(), c.shards.size());
    EXPECT_EQ((*remote)->quant_config(), (*local)->quant_config());
    ExpectSameValues(**remote, **local);
  }
}

testing::GgufSpec Split(int no, int count, const std::string& tensor) {
  testing::GgufSpec s;
  s.kv.push_back({"general.architecture", testing::GgufString("llama")});
  s.kv.push_back({"split.no", testing::GgufU16(static_cast<uint16_t>(no))});
  s.kv.push_back(
      {"split.count", testing::GgufU16(static_cast<uint16_t>(count))});
  std::vector<float> v(256);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * i - no;
  s.tensors.push_back({tensor, {16, 16}, 0, testing::Bytes(v)});
  return s;
}

TEST_F(RemoteCheckpointTest, ASplitGgufByUrlOpensEverySplit) {
  for (int i = 0; i < 3; ++i) {
    testing::WriteFile(absl::StrCat(data_, "/m-0000", i + 1, "-of-00003.gguf"),
                       testing::BuildGguf(Split(i, 3, absl::StrCat("t", i))));
  }
  Serve();
  auto remote = OpenRemote(nginx_->Url("/m-00002-of-00003.gguf"), Remote());
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_EQ((*remote)->files().size(), 3u);
  auto local = Checkpoint::Open(data_ + "/m-00002-of-00003.gguf");
  ASSERT_TRUE(local.ok()) << local.status();
  ExpectSameValues(**remote, **local);
}

TEST_F(RemoteCheckpointTest, Opening280ShardsCostsAtMostTwoRequestsEach) {
  constexpr int kShards = 280;
  fs::create_directories(data_ + "/big");
  testing::WriteManyShards(data_ + "/big", kShards);
  Serve();
  auto remote = OpenRemote(nginx_->Url("/big/"), Remote());
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_EQ((*remote)->stored_tensors().size(), 3u * kShards);
  // The index, the probes of a directory that cannot be listed and the
  // configs included.
  EXPECT_LE(Requests(), 2 * kShards);
  // Headers only: nothing of the tensors' bytes was fetched.
  uint64_t fetched = 0;
  for (const Checkpoint::File& f : (*remote)->files()) {
    fetched += f.mapping->mirror()->reader().stats().bytes_fetched;
  }
  EXPECT_LE(fetched, uint64_t{kShards} * (64 << 10));
}

TEST_F(RemoteCheckpointTest, AScalarReadFetchesOnlyItsBlock) {
  std::vector<float> v(4 << 20);  // 16 MiB
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  testing::WriteFile(data_ + "/one.safetensors",
                     testing::BuildSafetensors(
                         {{"w", "F32", {4096, 1024}, testing::Bytes(v)}}));
  Serve();
  auto remote = OpenRemote(nginx_->Url("/one.safetensors"), Remote());
  ASSERT_TRUE(remote.ok()) << remote.status();
  const RemoteMirror& mirror = *(*remote)->files()[0].mapping->mirror();
  const uint64_t fills_at_open = mirror.stats().fills;
  const uint64_t requests_at_open = mirror.reader().stats().requests;
  float x = 0;
  const LogicalTensor& t = *(*remote)->FindTensor("w");
  ASSERT_TRUE(
      GuardedRead([&] { return t.encoding->Decode(3000000, 1, &x); }).ok());
  EXPECT_EQ(x, 3000000.0f);
  EXPECT_EQ(mirror.stats().fills - fills_at_open, 1u);
  EXPECT_EQ(mirror.reader().stats().requests - requests_at_open, 1u);
}

TEST_F(RemoteCheckpointTest, AnObjectReplacedAfterOpenEndsTheReadAborted) {
  std::vector<float> v(1 << 20, 1.0f);
  const std::string path = data_ + "/one.safetensors";
  testing::WriteObject(path,
                       testing::BuildSafetensors(
                           {{"w", "F32", {1024, 1024}, testing::Bytes(v)}}));
  Serve();
  auto remote = OpenRemote(nginx_->Url("/one.safetensors"), Remote());
  ASSERT_TRUE(remote.ok()) << remote.status();
  std::vector<float> w(1 << 20, 2.0f);
  testing::WriteObject(path,
                       testing::BuildSafetensors(
                           {{"w", "F32", {1024, 1024}, testing::Bytes(w)}}),
                       10);
  const LogicalTensor& t = *(*remote)->FindTensor("w");
  EXPECT_THAT(DecodeAll(t),
              AllOf(HasReason(ErrorReason::kFileChangedDuringRead),
                    MessageNames("one.safetensors")));
}

TEST_F(RemoteCheckpointTest, ATensorLargerThanTheBudgetDecodesExactly) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> v(24 << 20);  // 96 MiB, over a 64 MiB budget
  for (float& x : v) x = d(rng);
  testing::WriteFile(data_ + "/big.safetensors",
                     testing::BuildSafetensors(
                         {{"w", "F32", {24 << 10, 1024}, testing::Bytes(v)}}));
  Serve();
  std::shared_ptr<const RemoteFiles> files = Remote(
      [](absl::string_view) -> std::optional<std::string> {
        return std::nullopt;
      },
      uint64_t{64} << 20);
  auto remote = OpenRemote(nginx_->Url("/big.safetensors"), files);
  ASSERT_TRUE(remote.ok()) << remote.status();
  auto got = DecodeAll(*(*remote)->FindTensor("w"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(std::memcmp(got->data(), v.data(), v.size() * sizeof(float)), 0);
  EXPECT_GT(files->budget().evicted_blocks(), 0u);
  EXPECT_LE(files->budget().resident_bytes(), uint64_t{64} << 20);
}

TEST_F(RemoteCheckpointTest, AHubRepositoryOpensByItsIndex) {
  const testing::ShardedCheckpoint c = testing::WriteShardedGptq();
  fs::create_directories(data_ + "/org");
  fs::copy(c.dir, data_ + "/org/repo", fs::copy_options::recursive);
  Serve();
  const std::string endpoint = nginx_->Url("");
  auto remote = OpenRemote(
      "hf://org/repo",
      Remote([endpoint](absl::string_view n) -> std::optional<std::string> {
        if (n == "HF_ENDPOINT") return endpoint;
        return std::nullopt;
      }));
  ASSERT_TRUE(remote.ok()) << remote.status();
  auto local = Checkpoint::Open(c.dir);
  ASSERT_TRUE(local.ok()) << local.status();
  ExpectSameValues(**remote, **local);
}

TEST_F(RemoteCheckpointTest, UrlsAreRefusedWithoutRemoteStorage) {
  EXPECT_THAT(Checkpoint::Open("https://example.invalid/x.safetensors"),
              HasReason(ErrorReason::kRequestInvalid));
}

TEST_F(RemoteCheckpointTest, UrlsOutsideTheRemoteRootsAreRefused) {
  testing::WriteObject(
      data_ + "/a/x.safetensors",
      testing::BuildSafetensors({{"w", "F32", {1}, std::string(4, '\0')}}));
  Serve();
  RemoteFilesOptions o;
  o.storage.http = testing::TestHttpOptions();
  o.roots = {nginx_->Url("/b/")};
  auto files = RemoteFiles::Create(std::move(o));
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(OpenRemote(nginx_->Url("/a/x.safetensors"), *files),
              HasReason(ErrorReason::kOutsideRoots));
  EXPECT_THAT(OpenRemote(nginx_->Url("/b/../a/x.safetensors"), *files),
              HasReason(ErrorReason::kOutsideRoots));
  EXPECT_EQ(Requests(), 0);
}

}  // namespace
}  // namespace tensormorph
