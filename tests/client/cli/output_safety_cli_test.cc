// Every command that writes a file (read -o, heatmap -o, check --manifest,
// diff-merge -o), run as the real binary, embedded and against a
// tensormorphd: an output that is one of the command's inputs is refused
// (exit 1) before any work, however it is spelled, and every input stays
// byte for byte as it was; a command that fails leaves the previous file at
// its output and no temporary beside it; Ctrl-C in the middle of a large
// read -o leaves no file under the final name, or the previous one, and no
// temporary.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/cli_error.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/npy_reader.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/sharded_diff_checkpoint.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

extern char** environ;

namespace tensormorph::output_safety_cli_test {
namespace {

namespace fs = std::filesystem;
using ::tensormorph::testing::Bytes;
using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ReadFileBytes;
using ::tensormorph::testing::ShardedDiffCheckpoint;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

constexpr int kExitUsage = 1;
constexpr int kExitCallFailed = 2;

// Every file and link beneath `dir`: its bytes, or where it points.
std::map<std::string, std::string> Tree(const std::string& dir) {
  std::map<std::string, std::string> tree;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string path = e.path().string();
    if (e.is_symlink()) {
      tree[path] = "-> " + fs::read_symlink(e.path()).string();
    } else if (e.is_regular_file()) {
      tree[path] = ReadFileBytes(path);
    } else {
      tree[path] = "(directory)";
    }
  }
  return tree;
}

// The names in `dir`, sorted.
std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The checkpoints every test reads, under one root the server serves:
//   quant/, source/       a sharded quantized checkpoint and its source
//                         (index, config, shards in each)
//   single/m.safetensors  one file, "w" F32 [8, 8], a config.json beside it
//   parts/p0.jsonl, p1.jsonl, v.json   files commands read whole, and
//   parts/m.dat                        an importance matrix
// and, outside it, links into it: soft -> single/m.safetensors, hard (a hard
// link of a quant/ shard), part-link -> parts/p0.jsonl.
struct Inputs {
  ShardedDiffCheckpoint diff;
  std::string root, links;
  std::string single, quant, source, tensor;
};

Inputs* inputs = nullptr;
CliModes* cli = nullptr;

class OutputSafetyCliTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    inputs = new Inputs;
    Inputs& in = *inputs;
    in.diff = ::tensormorph::testing::WriteShardedDiffCheckpoint();
    in.root = in.diff.root;
    in.quant = in.root + "/" + in.diff.quant;
    in.source = in.root + "/" + in.diff.reference;
    in.tensor = in.diff.compared.front();
    fs::create_directories(in.root + "/single");
    in.single = in.root + "/single/m.safetensors";
    std::vector<float> w(64);
    for (int i = 0; i < 64; ++i) w[i] = static_cast<float>(i) - 32.0f;
    WriteFile(in.single, ::tensormorph::testing::BuildSafetensors(
                             {{"w", "F32", {8, 8}, Bytes(w)}}));
    WriteFile(in.root + "/single/config.json", R"({"model_type": "llama"})");
    fs::create_directories(in.root + "/parts");
    WriteFile(in.root + "/parts/p0.jsonl", "{}\n");
    WriteFile(in.root + "/parts/p1.jsonl", "{}\n");
    WriteFile(in.root + "/parts/v.json", "{}\n");
    ::tensormorph::testing::WriteDemoImatrix(in.root + "/parts/m.dat");
    in.links = MakeTempDir();
    fs::create_symlink(in.single, in.links + "/soft");
    fs::create_hard_link(in.quant + "/model-00002-of-00004.safetensors",
                         in.links + "/hard");
    fs::create_symlink(in.root + "/parts/p0.jsonl", in.links + "/part-link");
    cli = new CliModes({in.root});
  }
  static void TearDownTestSuite() {
    delete cli;
    delete inputs;
    cli = nullptr;
    inputs = nullptr;
  }
  CommandResult Run(std::vector<std::string> args) {
    return cli->Run(GetParam(), std::move(args));
  }
  // Runs `args`, which name an input as the output: exit 1 with nothing on
  // stdout, and every input (and link to one) as it was.
  void ExpectRefused(const std::vector<std::string>& args) {
    SCOPED_TRACE(::testing::PrintToString(args));
    const auto root_before = Tree(inputs->root);
    const auto links_before = Tree(inputs->links);
    CommandResult r = Run(args);
    EXPECT_EQ(r.exit_code, kExitUsage) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_TRUE(Tree(inputs->root) == root_before);
    EXPECT_TRUE(Tree(inputs->links) == links_before);
  }
};

// A checkpoint, a tensor of it, and an output that is one of its inputs.
struct Misuse {
  std::string checkpoint, tensor, output;
};

std::vector<Misuse> Misuses() {
  const Inputs& in = *inputs;
  const std::string shard1 = in.quant + "/model-00001-of-00004.safetensors";
  return {
      // The checkpoint file itself, spelled three ways.
      {in.single, "w", in.single},
      {in.single, "w", in.root + "/single/../single/./m.safetensors"},
      {in.single, "w", in.links + "/soft"},
      // Its config, and a quantization config that does not exist yet.
      {in.single, "w", in.root + "/single/config.json"},
      {in.single, "w", in.root + "/single/quantize_config.json"},
      // The index beside a shard, and another shard beside it.
      {shard1, in.tensor, in.quant + "/model.safetensors.index.json"},
      {shard1, in.tensor, in.quant + "/model-00003-of-00004.safetensors"},
      // Files inside a directory checkpoint, existing, new or hard-linked.
      {in.quant, in.tensor, in.quant + "/model.safetensors.index.json"},
      {in.quant, in.tensor, in.quant + "/config.json"},
      {in.quant, in.tensor, in.quant + "/model-00002-of-00004.safetensors"},
      {in.quant, in.tensor, in.quant + "/new-output"},
      {in.quant, in.tensor, in.links + "/hard"},
  };
}

TEST_P(OutputSafetyCliTest, ReadRefusesEveryInputAsItsOutput) {
  for (const Misuse& m : Misuses()) {
    ExpectRefused({"read", m.checkpoint, m.tensor, "-o", m.output});
  }
}

TEST_P(OutputSafetyCliTest, HeatmapRefusesEveryInputAndItsReferenceAsItsPng) {
  for (const Misuse& m : Misuses()) {
    ExpectRefused({"heatmap", m.checkpoint, m.tensor, "-o", m.output});
  }
  const Inputs& in = *inputs;
  for (const std::string& out :
       {in.source + "/config.json", in.source + "/model.safetensors.index.json",
        in.source + "/model-00001-of-00002.safetensors"}) {
    ExpectRefused({"heatmap", in.quant, in.tensor, "--mode", "error", "--ref",
                   in.source, "-o", out});
  }
}

TEST_P(OutputSafetyCliTest,
       CheckRefusesEveryInputItsSourceAndItsVerifyManifest) {
  for (const Misuse& m : Misuses()) {
    ExpectRefused({"check", m.checkpoint, "--manifest", m.output});
  }
  const Inputs& in = *inputs;
  ExpectRefused({"check", in.quant, "--source", in.source, "--manifest",
                 in.source + "/model-00001-of-00002.safetensors"});
  ExpectRefused({"check", in.quant, "--source", in.source, "--manifest",
                 in.source + "/config.json"});
  const std::string verify = in.root + "/parts/v.json";
  ExpectRefused({"check", in.single, "--verify", verify, "--manifest", verify});
  ExpectRefused({"check", in.single, "--verify", verify, "--manifest",
                 in.root + "/parts/../parts/v.json"});
}

TEST_P(OutputSafetyCliTest,
       CompareRefusesItsSourceAndEveryQuantizationAsItsReport) {
  const Inputs& in = *inputs;
  for (const Misuse& m : Misuses()) {
    // The input as the source, and as the last of the quantizations.
    ExpectRefused(
        {"compare", m.checkpoint, in.single, in.quant, "--html", m.output});
    ExpectRefused(
        {"compare", in.source, in.single, m.checkpoint, "--html", m.output});
  }
  // The importance matrix is an input too (the trial's report overwrote
  // it); refused before it is read, so any file stands for one here.
  const std::string imatrix = in.root + "/parts/v.json";
  for (const std::string& out : {imatrix, in.root + "/parts/./v.json",
                                 in.root + "/parts/../parts/v.json"}) {
    ExpectRefused({"compare", in.source, in.single, in.quant, "--imatrix",
                   imatrix, "--html", out});
  }
}

// With --server, checkpoint paths are the server's: relative to its root
// they name nothing here, so the refusal rests on the files' and their
// directory's identities that GetCheckpoint reports (a trial's `read
// victim.gguf T -o /srv/root/victim.gguf` overwrote the served file).
class OutputSafetyServerPathsTest : public OutputSafetyCliTest {};

TEST_P(OutputSafetyServerPathsTest, EveryServedInputIsStillRefused) {
  const Inputs& in = *inputs;
  const std::string shard1 = "quant/model-00001-of-00004.safetensors";
  ASSERT_FALSE(fs::exists("single/m.safetensors"));  // not resolvable here
  const std::vector<Misuse> misuses = {
      {"single/m.safetensors", "w", in.single},
      {"single/m.safetensors", "w", in.links + "/soft"},
      {"single/m.safetensors", "w", in.root + "/single/config.json"},
      {"single/m.safetensors", "w", in.root + "/single/quantize_config.json"},
      {shard1, in.tensor, in.quant + "/model.safetensors.index.json"},
      {shard1, in.tensor, in.quant + "/model-00003-of-00004.safetensors"},
      {"quant", in.tensor, in.quant + "/model-00002-of-00004.safetensors"},
      {"quant", in.tensor, in.links + "/hard"},
  };
  for (const Misuse& m : misuses) {
    ExpectRefused({"read", m.checkpoint, m.tensor, "-o", m.output});
    ExpectRefused({"heatmap", m.checkpoint, m.tensor, "-o", m.output});
    ExpectRefused({"check", m.checkpoint, "--manifest", m.output});
  }
  ExpectRefused({"heatmap", "quant", in.tensor, "--mode", "error", "--ref",
                 "source", "-o", in.source + "/config.json"});
  // The importance matrix is the server's file as well: GetImportanceMatrix
  // tells its identity (a trial's heatmap -o wrote a PNG over it).
  const std::string matrix = in.root + "/parts/m.dat";
  ExpectRefused({"heatmap", "quant", in.tensor, "--mode", "sq-error", "--ref",
                 "source", "--imatrix", "parts/m.dat", "-o", matrix});
  ExpectRefused({"compare", "source", "single/m.safetensors", "quant",
                 "--imatrix", "parts/m.dat", "--html", matrix});
  // Beside the served files, a name no reader opens is an output like any.
  const std::string beside = in.root + "/single/w.npy";
  CommandResult r = Run({"read", "single/m.safetensors", "w", "-o", beside});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(beside));
  fs::remove(beside);
}

TEST_P(OutputSafetyCliTest, DiffMergeRefusesItsPartFilesAsItsOutput) {
  const Inputs& in = *inputs;
  const std::string p0 = in.root + "/parts/p0.jsonl";
  const std::string p1 = in.root + "/parts/p1.jsonl";
  for (const std::string& out :
       {p1, in.root + "/parts/./p1.jsonl", in.links + "/part-link"}) {
    ExpectRefused({"diff-merge", p0, p1, "-o", out});
  }
}

TEST_P(OutputSafetyCliTest, WithJsonTheRefusalIsAnErrorObjectOnStdout) {
  const Inputs& in = *inputs;
  CommandResult r = Run({"--json", "read", in.single, "w", "-o", in.single});
  EXPECT_EQ(r.exit_code, kExitUsage);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["error"]["code"], "INVALID_ARGUMENT");
  EXPECT_TRUE(j["error"]["message"].is_string());
}

TEST_P(OutputSafetyCliTest, AFailedCommandLeavesThePreviousFileAndNoTemporary) {
  const Inputs& in = *inputs;
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/garbage.jsonl", "not a diff\n");
  const std::vector<std::pair<std::vector<std::string>, int>> runs = {
      // A mistyped tensor name.
      {{"read", in.single, "no.such.tensor", "-o", dir + "/old.npy"},
       kExitCallFailed},
      {{"read", in.single, "w", "--slice", "8", "-o", dir + "/old.npy"},
       kExitUsage},
      {{"heatmap", in.single, "no.such.tensor", "-o", dir + "/old.png"},
       kExitCallFailed},
      // A checkpoint that is not there.
      {{"check", in.root + "/missing", "--manifest", dir + "/old.json"},
       kExitCallFailed},
      // Part files that are no diff.
      {{"diff-merge", dir + "/garbage.jsonl", "-o", dir + "/old.txt"},
       kExitUsage},
      // A source that is not there: no report, the old one kept.
      {{"compare", in.root + "/missing", in.single, in.quant, "--html",
        dir + "/old.html"},
       kExitCallFailed},
  };
  for (const auto& [args, code] : runs) {
    SCOPED_TRACE(::testing::PrintToString(args));
    for (const char* name :
         {"old.npy", "old.png", "old.json", "old.txt", "old.html"}) {
      WriteFile(dir + "/" + name, std::string("previous ") + name);
    }
    const auto before = Tree(dir);
    CommandResult r = Run(args);
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_TRUE(Tree(dir) == before);
  }
}

TEST_P(OutputSafetyCliTest, EveryWritingCommandReplacesThePreviousFileWhole) {
  const Inputs& in = *inputs;
  const std::string dir = MakeTempDir();
  for (const char* name : {"a.npy", "h.png", "m.json", "merged.jsonl"}) {
    WriteFile(dir + "/" + name, "previous");
  }
  CommandResult read = Run({"read", in.single, "w", "-o", dir + "/a.npy"});
  ASSERT_EQ(read.exit_code, 0) << read.err;
  EXPECT_EQ(::tensormorph::testing::ReadNpy(dir + "/a.npy").shape,
            (std::vector<int64_t>{8, 8}));

  CommandResult heat = Run({"heatmap", in.single, "w", "-o", dir + "/h.png"});
  ASSERT_EQ(heat.exit_code, 0) << heat.err;
  EXPECT_TRUE(absl::StartsWith(ReadFileBytes(dir + "/h.png"), "\x89PNG"));

  CommandResult check =
      Run({"check", in.single, "--manifest", dir + "/m.json"});
  ASSERT_EQ(check.exit_code, 0) << check.err;
  EXPECT_EQ(
      nlohmann::json::parse(ReadFileBytes(dir + "/m.json"))["tensors"].size(),
      1u);

  CommandResult part =
      Run({"--json", "diff", in.quant, in.source, "--part", "0/1"});
  ASSERT_EQ(part.exit_code, 0) << part.err;
  WriteFile(dir + "/p.jsonl", part.out);
  CommandResult to_stdout = Run({"--json", "diff-merge", dir + "/p.jsonl"});
  ASSERT_EQ(to_stdout.exit_code, 0) << to_stdout.err;
  CommandResult merged = Run(
      {"--json", "diff-merge", dir + "/p.jsonl", "-o", dir + "/merged.jsonl"});
  ASSERT_EQ(merged.exit_code, 0) << merged.err;
  EXPECT_EQ(merged.out, "");
  EXPECT_EQ(ReadFileBytes(dir + "/merged.jsonl"), to_stdout.out);

  EXPECT_THAT(Names(dir), ElementsAre("a.npy", "h.png", "m.json",
                                      "merged.jsonl", "p.jsonl"));
}

// A path that cannot be written is one failure whatever the command: the
// errno's code and reason (a missing directory: NOT_FOUND, exit 2), naming
// the option and the path, before any work.
TEST_P(OutputSafetyCliTest, EveryWritingCommandReportsAnUnwritablePathAlike) {
  const Inputs& in = *inputs;
  const std::string out = MakeTempDir() + "/no/such/dir/out";
  const std::string part = in.root + "/parts/p0.jsonl";
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"read", in.single, "w", "-o", out},
           {"heatmap", in.single, "w", "-o", out},
           {"check", in.single, "--manifest", out},
           {"compare", in.source, in.single, in.quant, "--html", out},
           {"diff-merge", part, "-o", out}}) {
    SCOPED_TRACE(::testing::PrintToString(args));
    CommandResult r = Run(args);
    EXPECT_EQ(r.exit_code, kExitCallFailed) << r.err;
    EXPECT_THAT(CliErrorOf(r.err),
                AllOf(HasReason(ErrorReason::kNotFound),
                      MessageNames(args[args.size() - 2]), MessageNames(out)));
  }
}

INSTANTIATE_TEST_SUITE_P(EmbeddedAndRemote, OutputSafetyCliTest,
                         ::testing::Bool(), [](const auto& info) {
                           return info.param ? "Remote" : "Embedded";
                         });
// Paths relative to the server's root mean nothing embedded: remote only.
INSTANTIATE_TEST_SUITE_P(Remote, OutputSafetyServerPathsTest,
                         ::testing::Values(true));

// ---- Ctrl-C in the middle of a write ----

// `tensormorph read CKPT big -o OUT` started in the background, with SIGINT
// and SIGTERM at their default actions whatever the test inherited (a
// background shell ignores SIGINT).
pid_t StartRead(const std::string& checkpoint, const std::string& out) {
  std::vector<std::string> argv = {CliPath(), "read", checkpoint,
                                   "big",     "-o",   out};
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&files, 2, "/dev/null", O_WRONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  const int error =
      posix_spawn(&pid, args[0], &files, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  return error == 0 ? pid : -1;
}

// The size of the temporary beside `dir/name` (".name.tmp-XXXXXX"), if one
// is there.
std::optional<int64_t> TemporarySize(const std::string& dir,
                                     const std::string& name) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (absl::StartsWith(e.path().filename().string(), "." + name + ".tmp-")) {
      std::error_code ec;
      const auto size = fs::file_size(e.path(), ec);
      return ec ? 0 : static_cast<int64_t>(size);
    }
  }
  return std::nullopt;
}

// How a background read ended.
enum class Ended { kInterruptedMidWrite, kFinishedFirst, kOther };

// Starts a read of `checkpoint`'s "big" into `dir/name`; once its
// temporary holds at least 1 MiB, stops it (SIGSTOP) and, if the temporary
// is still there (the write is provably unfinished), sends SIGINT and lets
// it go on. kFinishedFirst when the read completed before it could be
// caught mid-write (the caller tries again).
Ended InterruptMidWrite(const std::string& checkpoint, const std::string& dir,
                        const std::string& name) {
  const pid_t pid = StartRead(checkpoint, dir + "/" + name);
  if (pid < 0) return Ended::kOther;
  int status = 0;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::minutes(2);
  // Polls the directory until the temporary has grown.
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return Ended::kFinishedFirst;
    const std::optional<int64_t> size = TemporarySize(dir, name);
    if (size && *size >= (1 << 20)) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return Ended::kOther;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(pid, SIGSTOP);
  if (::waitpid(pid, &status, WUNTRACED) != pid || !WIFSTOPPED(status)) {
    return Ended::kFinishedFirst;  // exited before the stop arrived
  }
  const bool unfinished = TemporarySize(dir, name).has_value();
  if (unfinished) ::kill(pid, SIGINT);  // pending until it runs again
  ::kill(pid, SIGCONT);
  ::waitpid(pid, &status, 0);
  if (!unfinished) return Ended::kFinishedFirst;
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGINT
             ? Ended::kInterruptedMidWrite
             : Ended::kOther;
}

TEST(OutputSignalCliTest,
     CtrlCMidReadLeavesNoFileOrThePreviousOneAndNoTemporary) {
  // 256 MiB of float32 (a sparse file: no disk until read), embedded.
  const std::string ckpt_dir = MakeTempDir();
  const std::string ckpt = ckpt_dir + "/big.safetensors";
  ::tensormorph::testing::WriteSparseSafetensors(
      ckpt,
      R"({"big":{"dtype":"F32","shape":[16384,4096],)"
      R"("data_offsets":[0,268435456]}})",
      int64_t{256} << 20);
  for (const bool previous : {false, true}) {
    SCOPED_TRACE(previous ? "over a previous file" : "a new file");
    const std::string dir = MakeTempDir();
    Ended ended = Ended::kFinishedFirst;
    for (int attempt = 0; attempt < 5 && ended == Ended::kFinishedFirst;
         ++attempt) {
      fs::remove(dir + "/big.npy");
      if (previous) WriteFile(dir + "/big.npy", "the previous array");
      ended = InterruptMidWrite(ckpt, dir, "big.npy");
    }
    ASSERT_EQ(ended, Ended::kInterruptedMidWrite);
    if (previous) {
      EXPECT_THAT(Names(dir), ElementsAre("big.npy"));
      EXPECT_EQ(ReadFileBytes(dir + "/big.npy"), "the previous array");
    } else {
      EXPECT_THAT(Names(dir), ElementsAreArray(std::vector<std::string>{}));
    }
  }
}

}  // namespace
}  // namespace tensormorph::output_safety_cli_test
