// Every CLI command on a checkpoint by URL (served by Debian's nginx) prints
// what it prints on the local copy: embedded, and through a tensormorphd
// whose root is the URL prefix.
#include <filesystem>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/cli_error.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/sharded_checkpoint.h"
#include "tests/support/status_matchers.h"
#include "tests/support/storage_servers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;
using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::RunCommand;

constexpr char kDown[] = "model.layers.0.mlp.down_proj.weight";
constexpr char kNorm[] = "model.layers.0.input_layernorm.weight";

testing::GgufSpec Split(int no, int count, const std::string& tensor) {
  testing::GgufSpec s;
  s.kv.push_back({"general.architecture", testing::GgufString("llama")});
  s.kv.push_back({"split.no", testing::GgufU16(static_cast<uint16_t>(no))});
  s.kv.push_back(
      {"split.count", testing::GgufU16(static_cast<uint16_t>(count))});
  std::vector<float> v(64 * 32);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * i - no;
  s.tensors.push_back({tensor, {64, 32}, 0, testing::Bytes(v)});
  return s;
}

class RemoteStorageCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (testing::NginxPath().empty()) return;
    data_ = new std::string(testing::MakeTempDir());
    const testing::ShardedCheckpoint c = testing::WriteShardedGptq();
    fs::copy(c.dir, *data_ + "/gptq", fs::copy_options::recursive);
    fs::create_directories(*data_ + "/split");
    for (int i = 0; i < 2; ++i) {
      testing::WriteFile(
          absl::StrCat(*data_, "/split/m-0000", i + 1, "-of-00002.gguf"),
          testing::BuildGguf(Split(i, 2, absl::StrCat("blk.", i, ".w"))));
    }
    nginx_ = new testing::NginxServer(*data_);
  }
  static void TearDownTestSuite() {
    delete nginx_;
    delete data_;
  }
  void SetUp() override {
    if (nginx_ == nullptr) GTEST_SKIP() << "nginx is not installed";
  }

  // `args` with "@/" standing for the checkpoints' place: run once on the
  // local copy and once by URL, the URL written back to the local path in
  // the output, which must then be the same.
  void ExpectSameOutput(const std::vector<std::string>& args,
                        const std::vector<std::string>& server = {}) {
    const std::string url = nginx_->Url("/");
    const std::string local = *data_ + "/";
    auto run = [&](const std::string& place) {
      std::vector<std::string> argv = {CliPath()};
      argv.insert(argv.end(), server.begin(), server.end());
      for (const std::string& a : args) {
        argv.push_back(absl::StrReplaceAll(a, {{"@/", place}}));
      }
      CommandResult r = RunCommand(argv);
      r.out = absl::StrReplaceAll(r.out, {{place, "@/"}});
      // Timings differ from run to run.
      static const std::regex kTimes(
          R"(("wallSeconds":|"elapsedSeconds":|in )[0-9.e+-]+( s, [0-9.]+ GB/s)?)");
      r.out = std::regex_replace(r.out, kTimes, "$1T");
      // Local files have a device and inode (GetCheckpointResponse's
      // identities); an object in remote storage has none.
      static const std::regex kIdentities(
          R"re(,"(identity|directory)":\{"device":"[0-9]+","inode":"[0-9]+"\})re");
      r.out = std::regex_replace(r.out, kIdentities, "");
      return r;
    };
    const CommandResult by_url = run(url);
    const CommandResult by_path = run(local);
    EXPECT_EQ(by_url.exit_code, by_path.exit_code)
        << absl::StrJoin(args, " ") << "\n"
        << by_url.err;
    EXPECT_EQ(by_url.out, by_path.out) << absl::StrJoin(args, " ");
    EXPECT_FALSE(by_url.out.empty()) << absl::StrJoin(args, " ");
  }

  static std::string* data_;
  static testing::NginxServer* nginx_;
};
std::string* RemoteStorageCliTest::data_ = nullptr;
testing::NginxServer* RemoteStorageCliTest::nginx_ = nullptr;

TEST_F(RemoteStorageCliTest, EveryCommandOnAShardedCheckpointByUrl) {
  for (const bool json : {false, true}) {
    std::vector<std::string> j =
        json ? std::vector<std::string>{"--json"} : std::vector<std::string>{};
    auto with = [&](std::vector<std::string> a) {
      a.insert(a.begin(), j.begin(), j.end());
      return a;
    };
    ExpectSameOutput(with({"ls", "@/gptq/"}));
    ExpectSameOutput(with({"info", "@/gptq/"}));
    ExpectSameOutput(with({"info", "@/gptq/", kDown}));
    ExpectSameOutput(with({"read", "@/gptq/", kDown, "--slice", "0:3, 5:9"}));
    ExpectSameOutput(with({"read", "@/gptq/", kNorm}));
    ExpectSameOutput(with({"scalar", "@/gptq/", kDown, "1,7", "2,40"}));
    ExpectSameOutput(with({"stats", "@/gptq/", kDown}));
    ExpectSameOutput(with({"heatmap", "@/gptq/", kDown, "--size", "8x4"}));
    ExpectSameOutput(with({"arch", "@/gptq/"}));
    ExpectSameOutput(with({"check", "@/gptq/"}));
  }
}

TEST_F(RemoteStorageCliTest, EveryCommandOnASplitGgufByUrl) {
  const std::string p = "@/split/m-00001-of-00002.gguf";
  ExpectSameOutput({"ls", p});
  ExpectSameOutput({"info", p});
  ExpectSameOutput({"read", p, "blk.1.w", "--slice", "3, :6"});
  ExpectSameOutput({"scalar", p, "blk.0.w", "4,4"});
  ExpectSameOutput({"stats", p, "blk.1.w"});
  ExpectSameOutput({"check", p});
  ExpectSameOutput({"--json", "diff", p, p});
}

TEST_F(RemoteStorageCliTest, AServerWhoseRootIsAUrlServesAsALocalRoot) {
  testing::ServerProcess by_url({nginx_->Url("/")});
  testing::ServerProcess by_path({*data_});
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"ls", "gptq/"},
           {"read", "gptq/", kDown, "--slice", "1, :4"},
           {"scalar", "split/m-00002-of-00002.gguf", "blk.1.w", "0,3"},
           {"stats", "gptq/", kNorm}}) {
    std::vector<std::string> a = {CliPath(), "--server", by_url.address()};
    a.insert(a.end(), args.begin(), args.end());
    std::vector<std::string> b = {CliPath(), "--server", by_path.address()};
    b.insert(b.end(), args.begin(), args.end());
    const CommandResult ra = RunCommand(a);
    const CommandResult rb = RunCommand(b);
    EXPECT_EQ(ra.exit_code, 0) << ra.err;
    EXPECT_EQ(ra.out, rb.out) << absl::StrJoin(args, " ");
  }
  // The sandbox holds for the URL root as for a directory.
  const CommandResult outside = RunCommand(
      {CliPath(), "--server", by_url.address(), "ls", "gptq/../split/"});
  EXPECT_EQ(outside.exit_code, 2);
  EXPECT_THAT(CliErrorOf(outside.err), HasReason(ErrorReason::kOutsideRoots));
}

}  // namespace
}  // namespace tensormorph
