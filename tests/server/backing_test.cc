// tensormorphd --backing ROOT=URL: a server whose disk holds some of a
// checkpoint's files reads the rest from an object store (npm's s3rver, behind
// the tests' fault proxy, which counts requests and enforces If-Match), and
// answers every call as a server holding everything does.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "core/io/root_backing.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "server/path_sandbox.h"
#include "tests/support/cli_error.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/process.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/sharded_diff_checkpoint.h"
#include "tests/support/status_matchers.h"
#include "tests/support/storage_servers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;
using ::google::protobuf::util::MessageDifferencer;
using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ReadFileBytes;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::ServerProcess;
using ::tensormorph::testing::StTensor;
using ::tensormorph::testing::TensormorphdPath;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kBucket[] = "models";
constexpr char kSecret[] = "backing-secret-key-1";
const char* const kShards[] = {"model-00001-of-00003.safetensors",
                               "model-00002-of-00003.safetensors",
                               "model-00003-of-00003.safetensors"};

// An int8 compressed-tensors checkpoint whose module "model.a" has its
// weight in shard 1 and its weight_scale in shard 2, as save_pretrained's
// sharding by size puts them when a boundary falls between the two.
void WriteStraddlingCheckpoint(const std::string& dir) {
  fs::create_directories(dir);
  auto int8 = [](const std::string& name, int rows, int cols, uint64_t seed) {
    std::string q(static_cast<size_t>(rows * cols), '\0');
    for (size_t i = 0; i < q.size(); ++i) {
      q[i] = static_cast<char>(static_cast<int>((i * 37 + seed) % 255) - 127);
    }
    return StTensor{name, "I8", {rows, cols}, q};
  };
  auto scale = [](const std::string& name, int rows, uint64_t seed) {
    std::vector<float> s = testing::Gaussian(rows, seed, 0.01f);
    for (float& v : s) v = std::fabs(v) + 1e-3f;
    return StTensor{name, "BF16", {rows, 1}, testing::ToBF16Bytes(s)};
  };
  const std::vector<std::vector<StTensor>> shards = {
      {int8("model.a.weight", 16, 8, 1),
       {"model.norm.weight",
        "BF16",
        {8},
        testing::ToBF16Bytes(testing::Gaussian(8, 2))}},
      {scale("model.a.weight_scale", 16, 3), int8("model.b.weight", 8, 8, 4),
       scale("model.b.weight_scale", 8, 5)},
      {{"model.c.weight",
        "BF16",
        {4, 8},
        testing::ToBF16Bytes(testing::Gaussian(32, 6))}}};
  std::string map;
  for (size_t i = 0; i < shards.size(); ++i) {
    for (const StTensor& t : shards[i]) {
      absl::StrAppend(&map, map.empty() ? "" : ",", "\"", t.name, "\":\"",
                      kShards[i], "\"");
    }
    WriteFile(dir + "/" + kShards[i], BuildSafetensors(shards[i]));
  }
  WriteFile(dir + "/model.safetensors.index.json",
            absl::StrCat("{\"metadata\":{},\"weight_map\":{", map, "}}"));
  WriteFile(dir + "/config.json", R"({"model_type": "llama",
  "quantization_config": {
    "quant_method": "compressed-tensors", "format": "int-quantized",
    "quantization_status": "compressed",
    "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
      "num_bits": 8, "type": "int", "symmetric": true, "strategy": "channel",
      "group_size": null, "block_structure": null, "dynamic": false}}}}})");
}

class BackingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string js = testing::S3rverPath();
    if (js.empty()) {
      GTEST_SKIP() << "s3rver is not fetched (tests/io/fetch_s3rver.sh "
                      "BUILD_DIR, or TENSORMORPH_S3RVER)";
    }
    s3_ = std::make_unique<testing::S3rverServer>(js, kBucket);
    proxy_ = std::make_unique<testing::FaultProxy>(
        s3_->port(), std::vector<std::string>{"--if-match"});
    // The servers started below inherit these: the standard AWS variables.
    home_ = MakeTempDir();
    ::setenv("HOME", home_.c_str(), 1);
    ::unsetenv("AWS_PROFILE");
    ::setenv("AWS_ENDPOINT_URL", proxy_->Url("").c_str(), 1);
    ::setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    ::setenv("AWS_SECRET_ACCESS_KEY", kSecret, 1);
    ::setenv("AWS_REGION", "us-east-1", 1);
  }

  // Uploads every file beneath `dir` as `prefix` + its relative path.
  void Upload(const std::string& dir, const std::string& prefix) const {
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      if (!e.is_regular_file()) continue;
      s3_->Put(prefix + fs::relative(e.path(), dir).string(),
               ReadFileBytes(e.path().string()));
    }
  }

  // A server of `root` backed by s3://models/`prefix`.
  static std::vector<std::string> Backed(const std::string& root,
                                         const std::string& prefix) {
    return {"--backing", root + "=s3://" + std::string(kBucket) + "/" + prefix};
  }

  std::string home_;
  std::unique_ptr<testing::S3rverServer> s3_;
  std::unique_ptr<testing::FaultProxy> proxy_;
};

std::unique_ptr<Client> Connect(const ServerProcess& server) {
  auto c = Client::Connect(server.address());
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

absl::StatusOr<SliceData> Read(Client& c, const std::string& checkpoint,
                               const std::string& tensor) {
  v1::ReadSliceRequest req;
  req.set_checkpoint(checkpoint);
  req.set_tensor(tensor);
  return c.ReadSliceAll(req);
}

// Every tensor of `checkpoint` reads the same bytes from both servers.
void ExpectSameTensors(Client& backed, Client& whole,
                       const std::string& checkpoint) {
  auto got_list = backed.ListTensors(checkpoint);
  auto want_list = whole.ListTensors(checkpoint);
  ASSERT_TRUE(got_list.ok()) << got_list.status();
  ASSERT_TRUE(want_list.ok()) << want_list.status();
  ASSERT_EQ(got_list->size(), want_list->size());
  for (size_t i = 0; i < want_list->size(); ++i) {
    const std::string& name = (*want_list)[i].name();
    EXPECT_TRUE(MessageDifferencer::Equals((*got_list)[i], (*want_list)[i]))
        << name;
    auto got = Read(backed, checkpoint, name);
    auto expected = Read(whole, checkpoint, name);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status();
    ASSERT_TRUE(expected.ok()) << name << ": " << expected.status();
    EXPECT_EQ(got->shape, expected->shape) << name;
    EXPECT_EQ(got->bytes, expected->bytes) << name;  // bit for bit
  }
}

TEST_F(BackingTest, AModuleStraddlingALocalAndABackedShardReadsAsWhenWhole) {
  const std::string whole = MakeTempDir();
  WriteStraddlingCheckpoint(whole + "/m");
  Upload(whole + "/m", "ckpts/m/");
  // This disk holds shard 1 alone: no index, no config, no shards 2 and 3.
  const std::string local = MakeTempDir();
  fs::create_directories(local + "/m");
  fs::copy_file(whole + "/m/" + kShards[0], local + "/m/" + kShards[0]);

  ServerProcess whole_server({whole});
  ServerProcess backed_server({local}, Backed(local, "ckpts/"));
  auto w = Connect(whole_server);
  auto b = Connect(backed_server);
  ASSERT_TRUE(w && b);
  auto info = b->GetCheckpoint("m");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->files_size(), 3);
  EXPECT_EQ(info->absent_files_size(), 0);
  auto want = w->GetCheckpoint("m");
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(info->tensor_count(), want->tensor_count());
  EXPECT_EQ(info->total_bytes(), want->total_bytes());
  // The weight (shard 1, this disk) with its scale (shard 2, the store).
  auto a = Read(*b, "m", "model.a.weight");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->dtype, "F32");
  ExpectSameTensors(*b, *w, "m");
}

TEST_F(BackingTest, ADiffAgainstASourceOnlyInTheBackingEqualsTheWholeDiff) {
  const testing::ShardedDiffCheckpoint c =
      testing::WriteShardedDiffCheckpoint();
  Upload(c.root + "/" + c.reference, "ckpts/" + c.reference + "/");
  const std::string local = MakeTempDir();
  fs::copy(c.root + "/" + c.quant, local + "/" + c.quant,
           fs::copy_options::recursive);

  ServerProcess whole_server({c.root});
  ServerProcess backed_server({local}, Backed(local, "ckpts"));
  auto w = Connect(whole_server);
  auto b = Connect(backed_server);
  ASSERT_TRUE(w && b);
  v1::QuantDiffRequest req;
  req.set_checkpoint(c.quant);
  req.set_reference(c.reference);
  auto events = [&](Client& client) {
    std::vector<v1::QuantDiffEvent> out;
    absl::Status s = client.QuantDiff(req, [&](const v1::QuantDiffEvent& e) {
      if (e.has_progress()) return true;
      out.push_back(e);
      // The one field a second run changes.
      if (out.back().has_summary()) {
        out.back().mutable_summary()->clear_wall_seconds();
      }
      return true;
    });
    EXPECT_TRUE(s.ok()) << s;
    return out;
  };
  const std::vector<v1::QuantDiffEvent> got = events(*b);
  const std::vector<v1::QuantDiffEvent> want = events(*w);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(want.size(), c.compared.size() + 1);  // a report each, a summary
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(MessageDifferencer::Equals(got[i], want[i]))
        << "event " << i << ":\n"
        << got[i].DebugString() << "\nwant:\n"
        << want[i].DebugString();
  }
}

TEST_F(BackingTest, TheLocalCopyIsReadAndTheStoreIsNotAskedForIt) {
  const std::string whole = MakeTempDir();
  WriteStraddlingCheckpoint(whole + "/m");
  Upload(whole + "/m", "ckpts/m/");
  // The store's shard 1 is garbage: a value read from it would differ.
  s3_->Put(std::string("ckpts/m/") + kShards[0],
           std::string(ReadFileBytes(whole + "/m/" + kShards[0]).size(), 'x'));
  const std::string local = MakeTempDir();
  fs::create_directories(local + "/m");
  fs::copy_file(whole + "/m/" + kShards[0], local + "/m/" + kShards[0]);

  ServerProcess whole_server({whole});
  ServerProcess backed_server({local}, Backed(local, "ckpts/"));
  auto w = Connect(whole_server);
  auto b = Connect(backed_server);
  ASSERT_TRUE(w && b);
  // The open asks the store for what the disk lacks (the index, the config,
  // shards 2 and 3: each small enough to come whole with its open).
  const int before_open = proxy_->Requests();
  ASSERT_TRUE(b->GetCheckpoint("m").ok());
  const int opened = proxy_->Requests();
  EXPECT_GT(opened, before_open);
  // A tensor of shard 1 costs the store no request, and reads the disk's
  // bytes, not the store's garbage.
  auto norm = Read(*b, "m", "model.norm.weight");
  ASSERT_TRUE(norm.ok()) << norm.status();
  EXPECT_EQ(proxy_->Requests(), opened);
  auto want = Read(*w, "m", "model.norm.weight");
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(norm->bytes, want->bytes);
  ExpectSameTensors(*b, *w, "m");
}

// A split GGUF whose first split is on the disk and the others in the store.
TEST_F(BackingTest, ASplitGgufPartlyOnTheDiskOpensEverySplit) {
  const std::string whole = MakeTempDir();
  fs::create_directories(whole + "/g");
  for (int i = 0; i < 3; ++i) {
    testing::GgufSpec spec;
    spec.kv.push_back({"general.architecture", testing::GgufString("llama")});
    spec.kv.push_back({"split.no", testing::GgufU16(static_cast<uint16_t>(i))});
    spec.kv.push_back({"split.count", testing::GgufU16(3)});
    std::vector<float> v(256);
    for (size_t k = 0; k < v.size(); ++k) v[k] = 0.25f * k - i;
    spec.tensors.push_back(
        {absl::StrCat("t", i), {16, 16}, 0, testing::Bytes(v)});
    WriteFile(absl::StrCat(whole, "/g/m-0000", i + 1, "-of-00003.gguf"),
              testing::BuildGguf(spec));
  }
  Upload(whole + "/g", "ckpts/g/");
  const std::string local = MakeTempDir();
  fs::create_directories(local + "/g");
  fs::copy_file(whole + "/g/m-00001-of-00003.gguf",
                local + "/g/m-00001-of-00003.gguf");

  ServerProcess whole_server({whole});
  ServerProcess backed_server({local}, Backed(local, "ckpts/"));
  auto w = Connect(whole_server);
  auto b = Connect(backed_server);
  ASSERT_TRUE(w && b);
  auto info = b->GetCheckpoint("g/m-00001-of-00003.gguf");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->files_size(), 3);
  ExpectSameTensors(*b, *w, "g/m-00001-of-00003.gguf");
}

TEST_F(BackingTest, AShardInNeitherIsNotFoundNamingItsUrlNeverTheSecret) {
  const std::string whole = MakeTempDir();
  WriteStraddlingCheckpoint(whole + "/m");
  fs::remove(whole + "/m/" + kShards[2]);
  Upload(whole + "/m", "ckpts/m/");
  const std::string local = MakeTempDir();
  fs::create_directories(local + "/m");
  fs::copy_file(whole + "/m/" + kShards[0], local + "/m/" + kShards[0]);

  ServerProcess server({local}, Backed(local, "ckpts/"));
  auto b = Connect(server);
  ASSERT_TRUE(b);
  const absl::Status s = b->GetCheckpoint("m").status();
  EXPECT_THAT(
      s, AllOf(HasReason(ErrorReason::kNotFound),
               MessageNames(std::string("s3://models/ckpts/m/") + kShards[2])));
  EXPECT_THAT(std::string(s.message()), Not(HasSubstr(kSecret)));
}

// A wrong secret, through a proxy that checks every SigV4 signature: the
// CLI's call ends PERMISSION_DENIED naming the object, and neither the
// reply, the CLI's output nor the server's log (at info, every call's
// line) holds the secret or a signature.
TEST_F(BackingTest, AWrongSecretIsPermissionDeniedAndNeverInAMessageOrLog) {
  const std::string whole = MakeTempDir();
  WriteStraddlingCheckpoint(whole + "/m");
  Upload(whole + "/m", "ckpts/m/");
  testing::FaultProxy checking(
      s3_->port(), {"--sigv4-key", "S3RVER", "--sigv4-secret", kSecret});
  constexpr char kWrong[] = "WRONG-secret-value-42";
  ::setenv("AWS_ENDPOINT_URL", checking.Url("").c_str(), 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", kWrong, 1);
  const std::string log = MakeTempDir() + "/server.log";
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  const std::string local = MakeTempDir();
  {
    ServerProcess server(
        {local},
        {"--backing", local + "=s3://models/ckpts/", "--log-level", "info"},
        fd);
    CommandResult r = RunCommand(
        {testing::CliPath(), "--server", server.address(), "info", "m"});
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_THAT(CliErrorOf(r.err),
                AllOf(HasReason(ErrorReason::kPermissionDenied),
                      MessageNames("'s3://models/ckpts/m'")));
    // The hint after the error line names the variable to check.
    const size_t hint = r.err.find("\nhint: ");
    ASSERT_NE(hint, std::string::npos) << r.err;
    EXPECT_THAT(r.err.substr(hint), HasSubstr("AWS_SECRET_ACCESS_KEY"));
    for (const std::string& text : {r.out, r.err}) {
      EXPECT_THAT(text, Not(HasSubstr(kWrong)));
      EXPECT_THAT(text, Not(HasSubstr("Signature=")));
    }
    EXPECT_EQ(server.Stop(), 0);
  }
  ::close(fd);
  const std::string logged = ReadFileBytes(log);
  EXPECT_THAT(logged, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(logged, Not(HasSubstr(kWrong)));
  EXPECT_THAT(logged, Not(HasSubstr("Signature=")));
}

TEST_F(BackingTest, ACheckReadsEveryShard) {
  const std::string whole = MakeTempDir();
  WriteStraddlingCheckpoint(whole + "/m");
  Upload(whole + "/m", "ckpts/m/");
  const std::string local = MakeTempDir();
  fs::create_directories(local + "/m");
  fs::copy_file(whole + "/m/" + kShards[0], local + "/m/" + kShards[0]);

  ServerProcess server({local}, Backed(local, "ckpts/"));
  auto b = Connect(server);
  ASSERT_TRUE(b);
  v1::CheckCheckpointRequest req;
  req.set_checkpoint("m");
  std::vector<std::string> rules;
  bool summary = false;
  absl::Status s = b->CheckCheckpoint(req, [&](const v1::CheckEvent& e) {
    if (e.has_finding()) rules.push_back(e.finding().rule());
    summary = summary || e.has_summary();
    return true;
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(summary);
  EXPECT_THAT(rules, Not(::testing::Contains("shard-missing")));
}

TEST_F(BackingTest, ACheckpointOnlyInTheBackingOpens) {
  const std::string whole = MakeTempDir();
  WriteStraddlingCheckpoint(whole + "/m");
  Upload(whole + "/m", "ckpts/m/");
  const std::string local = MakeTempDir();

  ServerProcess whole_server({whole});
  ServerProcess backed_server({local}, Backed(local, "ckpts/"));
  auto w = Connect(whole_server);
  auto b = Connect(backed_server);
  ASSERT_TRUE(w && b);
  ExpectSameTensors(*b, *w, "m");
  // The sandbox holds: no way out of the prefix.
  EXPECT_THAT(b->GetCheckpoint("m/../../other"),
              HasReason(ErrorReason::kOutsideRoots));
}

// A listing of the root: what the disk or the backing holds, a checkpoint
// partly on each once, counted as a server holding everything counts it.
TEST_F(BackingTest, ListingShowsCheckpointsInEitherOnce) {
  const std::string whole = MakeTempDir();
  WriteStraddlingCheckpoint(whole + "/m");
  WriteStraddlingCheckpoint(whole + "/deep/n");
  Upload(whole, "ckpts/");
  const std::string local = MakeTempDir();
  fs::create_directories(local + "/m");
  fs::copy_file(whole + "/m/" + kShards[0], local + "/m/" + kShards[0]);

  ServerProcess whole_server({whole});
  ServerProcess backed_server({local}, Backed(local, "ckpts/"));
  auto w = Connect(whole_server);
  auto b = Connect(backed_server);
  ASSERT_TRUE(w && b);
  auto list = [](Client& c) {
    std::vector<v1::CheckpointEntry> out;
    absl::Status s = c.ListAllCheckpoints(
        v1::ListCheckpointsRequest(),
        [&](const v1::CheckpointEntry& e) { out.push_back(e); });
    EXPECT_TRUE(s.ok()) << s;
    return out;
  };
  const std::vector<v1::CheckpointEntry> got = list(*b);
  const std::vector<v1::CheckpointEntry> want = list(*w);
  ASSERT_EQ(want.size(), 2u);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].path(), want[i].path());
    EXPECT_EQ(got[i].format(), want[i].format());
    EXPECT_EQ(got[i].file_count(), want[i].file_count()) << want[i].path();
    EXPECT_EQ(got[i].total_bytes(), want[i].total_bytes()) << want[i].path();
    EXPECT_EQ(got[i].stored_tensor_count(), want[i].stored_tensor_count())
        << want[i].path();
  }
}

// What the flag refuses, each naming its rule.
class BackingFlagTest : public ::testing::Test {
 protected:
  absl::StatusOr<PathSandbox> Sandbox(
      const std::vector<std::string>& roots,
      const std::vector<std::string>& backings) {
    RemoteFilesOptions o;
    o.roots = {"s3://models/ckpts/"};
    auto remote = RemoteFiles::Create(o);
    EXPECT_TRUE(remote.ok()) << remote.status();
    return PathSandbox::Create(roots, *remote, backings);
  }
  const std::string root_ = MakeTempDir();
};

TEST_F(BackingFlagTest, BacksAGivenRoot) {
  auto s = Sandbox({root_}, {root_ + "=s3://models/ckpts"});
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string real = fs::canonical(root_).string();
  EXPECT_TRUE(s->Backed(real + "/m/x.safetensors"));
  EXPECT_EQ(s->backings()->UrlOf(real + "/m/x.safetensors"),
            "s3://models/ckpts/m/x.safetensors");
}

TEST_F(BackingFlagTest, RefusesARootNotGiven) {
  const std::string other = MakeTempDir();
  EXPECT_THAT(Sandbox({root_}, {other + "=s3://models/ckpts/"}).status(),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("'" + other + "'"), MessageNames("--root")));
}

TEST_F(BackingFlagTest, RefusesABackingThatIsNoUrl) {
  EXPECT_THAT(Sandbox({root_}, {root_ + "=/mnt/elsewhere"}).status(),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("'/mnt/elsewhere'")));
  EXPECT_THAT(Sandbox({root_}, {root_}).status(),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("'" + root_ + "'"), MessageNames("ROOT=URL")));
  EXPECT_THAT(
      PathSandbox::BackingPrefixes({root_ + "=file:///mnt/x/"}).status(),
      AllOf(HasReason(ErrorReason::kRequestInvalid),
            MessageNames("'file:///mnt/x/'")));
}

TEST_F(BackingFlagTest, RefusesASecondBackingOfARoot) {
  EXPECT_THAT(
      Sandbox({root_},
              {root_ + "=s3://models/ckpts/", root_ + "/=s3://models/ckpts/"})
          .status(),
      AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames(root_)));
}

TEST_F(BackingFlagTest, RefusesABackingOfARemoteRoot) {
  EXPECT_THAT(Sandbox({root_, "s3://models/ckpts/"},
                      {"s3://models/ckpts/=s3://models/ckpts/"})
                  .status(),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("'s3://models/ckpts/'")));
}

TEST(RootBackingsTest, MapsPathsBeneathTheInnermostBackedRoot) {
  auto b = RootBackings::Create(
      {{"/data", "s3://bkt/all"}, {"/data/fast", "https://h/fast/"}});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->UrlOf("/data/m/x.gguf"), "s3://bkt/all/m/x.gguf");
  EXPECT_EQ((*b)->UrlOf("/data/fast/m/x.gguf"), "https://h/fast/m/x.gguf");
  EXPECT_EQ((*b)->UrlOf("/data"), "s3://bkt/all/");
  EXPECT_EQ((*b)->UrlOf("/data2/m"), std::nullopt);  // beside, not beneath
  EXPECT_EQ((*b)->UrlOf("/elsewhere/m"), std::nullopt);
}

TEST(RootBackingsTest, NeverMapsADotSegment) {
  auto b = RootBackings::Create({{"/data", "s3://bkt/p/"}});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->UrlOf("/data/../etc/passwd"), std::nullopt);
  EXPECT_EQ((*b)->UrlOf("/data/m/./x"), std::nullopt);
  EXPECT_EQ((*b)->UrlOf("/data/m//x"), std::nullopt);
  EXPECT_THAT(RootBackings::Create({{"/data", "s3://bkt/p/../q/"}}).status(),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("'/data'"), MessageNames("'..'")));
  EXPECT_THAT(
      RootBackings::Create({{"/data", "https://h/p/?sig=1"}}).status(),
      AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames("'/data'")));
}

TEST(PartialShardsFlagTest, IsRefusedNamingTheBacking) {
  const CommandResult r = RunCommand(
      {TensormorphdPath(), "--root", MakeTempDir(), "--partial-shards"});
  EXPECT_NE(r.exit_code, 0);
  // A start-up line for a person: the flag, and the one to use instead.
  EXPECT_THAT(r.err, HasSubstr("--partial-shards"));
  EXPECT_THAT(r.err, HasSubstr("--backing ROOT=URL"));
}

}  // namespace
}  // namespace tensormorph
