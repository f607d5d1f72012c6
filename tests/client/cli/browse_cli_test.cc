// Browsing and scripted batches through the built CLI, against a live
// tensormorphd and embedded: `ls` with no path or a directory that is not a
// checkpoint lists checkpoints; `scalar --indices-file` reads indices from a
// file or stdin; --mode and the environment are parsed by CLI11.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/prometheus.h"
#include "server/server.h"
#include "tests/support/checkpoint_tree.h"
#include "tests/support/cli_error.h"
#include "tests/support/loopback_server.h"
#include "tests/support/process.h"
#include "tests/support/prometheus_text.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph::browse_cli_test {
namespace {

using ::tensormorph::testing::CheckpointTree;
using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::FixturesDir;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeCheckpointTree;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::ServerProcess;
using ::testing::AllOf;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;

// `script` run by /bin/sh in `dir`, with $TM the CLI.
CommandResult Shell(const std::string& dir, const std::string& script,
                    const std::vector<std::string>& env = {}) {
  std::vector<std::string> e = env;
  e.push_back("TM=" + CliPath());
  return RunCommand({"/bin/sh", "-c", "cd '" + dir + "' && " + script}, e);
}

std::vector<std::string> Paths(const std::string& json_lines) {
  std::vector<std::string> out;
  std::istringstream in(json_lines);
  for (std::string line; std::getline(in, line);) {
    out.push_back(nlohmann::json::parse(line)["path"]);
  }
  return out;
}

CheckpointTree* tree = nullptr;
CliModes* cli = nullptr;

class BrowseCliTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    tree = new CheckpointTree(MakeCheckpointTree());
    cli = new CliModes({tree->root});
  }
  static void TearDownTestSuite() {
    delete cli;
    delete tree;
  }
  bool remote() const { return GetParam(); }
  // Paths as this mode takes them: root-relative remotely, absolute
  // embedded (the test's working directory is elsewhere).
  std::string P(const std::string& rel) const {
    return remote() ? rel : tree->root + "/" + rel;
  }
  CommandResult Run(std::vector<std::string> args) const {
    return cli->Run(remote(), std::move(args));
  }
};

TEST_P(BrowseCliTest, LsWithNoPathListsTheRootsOrTheWorkingDirectory) {
  CommandResult r = remote() ? Run({"ls", "--json"})
                             : Shell(tree->root, "exec \"$TM\" ls --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  if (remote()) {
    EXPECT_THAT(Paths(r.out), ElementsAreArray(tree->expected));
  } else {
    // Embedded serves any local path: the escaping link is followed too.
    EXPECT_THAT(Paths(r.out), IsSupersetOf(tree->expected));
  }
  r = remote() ? Run({"ls"}) : Shell(tree->root, "exec \"$TM\" ls");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(
      r.out,
      AllOf(HasSubstr("PATH"), HasSubstr("FORMAT"), HasSubstr("FILES"),
            HasSubstr("SIZE"), HasSubstr("TENSORS"), HasSubstr("MODIFIED"),
            HasSubstr("models/sharded"), HasSubstr("checkpoints, ")));
}

TEST_P(BrowseCliTest, LsOfADirectoryThatIsNotACheckpointListsItsCheckpoints) {
  CommandResult r = Run({"ls", P("deep"), "--json", "--depth", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(Paths(r.out), ElementsAreArray({P("deep/d1/d2/d3/x.gguf")}));
  r = Run({"ls", P("deep"), "--json", "--depth", "4"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(Paths(r.out), ElementsAreArray({P("deep/d1/d2/d3/d4/y.gguf"),
                                              P("deep/d1/d2/d3/x.gguf")}));
}

// A file the header read finds broken is listed as such, with what was
// found, not as a checkpoint whose tensors are only too many to count.
TEST_P(BrowseCliTest, LsMarksACheckpointWhoseHeaderIsBroken) {
  const std::string dir = tree->root + "/broken-ls";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(::tensormorph::testing::Fixture("gguf/Q4_0.gguf"),
                             dir + "/good.gguf");
  ::tensormorph::testing::WriteFile(dir + "/empty.gguf", "");
  // Cut within its tensor infos: its count of three still fits 200 bytes.
  ::tensormorph::testing::WriteFile(
      dir + "/cut.gguf",
      ::tensormorph::testing::ReadFileBytes(Fixture("gguf/Q4_K.gguf"))
          .substr(0, 200));
  CommandResult text = Run({"ls", P("broken-ls")});
  CommandResult json = Run({"--json", "ls", P("broken-ls")});
  std::filesystem::remove_all(dir);  // the tree is the other tests' too
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(
      text.out,
      AllOf(HasSubstr("broken (2; tensormorph check PATH says "
                      "everything):\n"),
            HasSubstr("  " + P("broken-ls/empty.gguf") +
                      ": a file of 0 bytes: shorter than a GGUF "
                      "header (24)\n"),
            HasSubstr("  " + P("broken-ls/cut.gguf") + ": truncated: ")));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  int broken = 0;
  std::istringstream in(json.out);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json e = nlohmann::json::parse(line);
    const bool said = e.value("broken", "") != "";
    broken += said ? 1 : 0;
    const std::string path = e["path"];
    EXPECT_EQ(said, path == P("broken-ls/empty.gguf") ||
                        path == P("broken-ls/cut.gguf"))
        << path;
  }
  EXPECT_EQ(broken, 2);
}

// --filter and --compat select a checkpoint's tensors: given with a
// directory of checkpoints they are a usage error, not ignored.
TEST_P(BrowseCliTest, TensorOptionsOnAListingOfCheckpointsAreAUsageError) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"ls", P("deep"), "--filter", "x*"},
        {"ls", P("deep"), "--compat"},
        {"ls", P("models/sharded"), "--checkpoints", "--filter", "x*"}}) {
    SCOPED_TRACE(::testing::PrintToString(args));
    const CommandResult r = Run(args);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_THAT(CliErrorOf(r.err),
                AllOf(HasReason(ErrorReason::kRequestInvalid),
                      MessageNames(args.back() == "--compat" ? "--compat"
                                                             : "--filter")));
    EXPECT_EQ(r.out, "");
  }
}

// A models/ folder of one Hugging Face model: the directory itself opens as
// nothing, so ls lists the model and info names it rather than saying the
// folder holds no checkpoint.
TEST_P(BrowseCliTest, ADirectoryHoldingOneCheckpointDirectoryNamesIt) {
  const std::string dir = tree->root + "/one-model";
  std::filesystem::create_directories(dir);
  std::filesystem::copy(Fixture("safetensors/plain"), dir + "/b");
  CommandResult ls = Run({"--json", "ls", P("one-model")});
  CommandResult info = Run({"info", P("one-model")});
  std::filesystem::remove_all(dir);  // the tree is the other tests' too
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_THAT(Paths(ls.out), ElementsAreArray({P("one-model/b")}));
  EXPECT_EQ(info.exit_code, 2);
  EXPECT_THAT(CliErrorOf(info.err),
              AllOf(HasReason(ErrorReason::kCheckpointNotFound),
                    MessageNames(P("one-model/b"))));
}

TEST_P(BrowseCliTest, LsOfACheckpointDirectoryListsItsTensorsAsBefore) {
  CommandResult r = Run({"ls", P("models/sharded")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("NAME"), HasSubstr("tensors, ")));
}

// A GGUF directly in a directory does not make the directory one
// checkpoint when there are others below it, or a broken file beside it:
// the directory is listed, every checkpoint in it shown.
TEST_P(BrowseCliTest, LsOfADirectoryWithALoneGgufAndMoreBelowListsThemAll) {
  const std::string dir = remote() ? "mixed_remote" : "mixed_embedded";
  const std::string abs = tree->root + "/" + dir;
  std::filesystem::create_directories(abs + "/nested");
  std::filesystem::copy_file(::tensormorph::testing::Fixture("gguf/Q8_0.gguf"),
                             abs + "/top.gguf");
  std::filesystem::copy_file(::tensormorph::testing::Fixture("gguf/Q4_K.gguf"),
                             abs + "/nested/below.gguf");
  std::ofstream(abs + "/nested/bad.gguf") << "garbage";
  CommandResult r = Run({"ls", P(dir), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(Paths(r.out), IsSupersetOf({P(dir + "/top.gguf"),
                                          P(dir + "/nested/below.gguf")}));
  // A directory holding one GGUF and nothing else is still that checkpoint.
  const std::string lone = dir + "_lone";
  std::filesystem::create_directories(tree->root + "/" + lone);
  std::filesystem::copy_file(::tensormorph::testing::Fixture("gguf/Q8_0.gguf"),
                             tree->root + "/" + lone + "/only.gguf");
  r = Run({"ls", P(lone)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("NAME"), HasSubstr("tensors, ")));
}

// A safetensors directory with a GGUF and a subdirectory beside its shard:
// `ls` of it lists its tensors as before and says there is more;
// `ls --checkpoints` lists the directory first, then what is beside it
// (text and --json), as listing the parent does; `info` describes the
// safetensors checkpoint and says there is more beside it.
TEST_P(BrowseCliTest, ASafetensorsDirectoryWithMoreBesideItListsThemAll) {
  const std::string dir = remote() ? "st_mixed_remote" : "st_mixed_embedded";
  const std::string abs = tree->root + "/" + dir;
  std::filesystem::create_directories(abs + "/sub");
  ::tensormorph::testing::WriteFile(
      abs + "/a.safetensors",
      ::tensormorph::testing::BuildSafetensors(
          {{"w", "F32", {2}, ::tensormorph::testing::Bytes<float>({1, 2})}}));
  std::filesystem::copy_file(::tensormorph::testing::Fixture("gguf/Q8_0.gguf"),
                             abs + "/b.gguf");
  std::filesystem::copy_file(::tensormorph::testing::Fixture("gguf/Q4_K.gguf"),
                             abs + "/sub/c.gguf");
  const std::vector<std::string> all = {P(dir), P(dir + "/b.gguf"),
                                        P(dir + "/sub/c.gguf")};
  CommandResult r = Run({"ls", P(dir), "--checkpoints", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(Paths(r.out), ElementsAreArray(all));
  r = Run({"ls", P(dir), "--checkpoints"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("safetensors"), HasSubstr("gguf"),
                           HasSubstr(P(dir + "/sub/c.gguf")),
                           HasSubstr("3 checkpoints"),
                           HasSubstr("its tensors: tensormorph ls")));
  // Listing the parent shows them too, in order.
  r = remote() ? Run({"ls", "--json"}) : Run({"ls", tree->root, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> under_parent;
  for (const std::string& p : Paths(r.out)) {
    if (absl::StartsWith(p, P(dir))) under_parent.push_back(p);
  }
  EXPECT_THAT(under_parent, ElementsAreArray(all));
  // The directory alone is the safetensors checkpoint.
  r = Run({"ls", P(dir), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["name"], "w");
  r = Run({"ls", P(dir)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("1 tensor"),
                           HasSubstr("more checkpoints in this directory"),
                           HasSubstr("--checkpoints")));
  r = Run({"info", P(dir)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("safetensors"), HasSubstr("a.safetensors"),
                           ::testing::Not(HasSubstr("b.gguf")),
                           HasSubstr("beside it")));
  // ...and a directory of shards alone says nothing of the kind.
  r = Run({"info", P("models/sharded")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("beside it")));
  r = Run({"ls", P("models/sharded")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("more checkpoints")));
}

TEST_P(BrowseCliTest, LsOfAMissingPathFailsNamingIt) {
  CommandResult r = Run({"ls", P("no/such")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(CliErrorOf(r.err),
              AllOf(HasReason(ErrorReason::kCheckpointNotFound),
                    MessageNames("no/such")));
}

TEST_P(BrowseCliTest, IndicesFileAddsItsLinesAfterTheArguments) {
  const std::string file = MakeTempDir() + "/indices.txt";
  std::ofstream(file) << "# rows then columns\n1,2\n\n  -1,0   # last row\n";
  CommandResult r = Run({"--json", "scalar", P("Q4_K.gguf"),
                         "blk.0.attn_q.weight", "0,0", "--indices-file", file});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["scalars"].size(), 3u);
  EXPECT_EQ(j["scalars"][0]["flatIndex"], "0");
  EXPECT_EQ(j["scalars"][1]["flatIndex"], "258");
  EXPECT_EQ(j["scalars"][2]["flatIndex"], "768");
}

// More indices than one call takes (10,000 a call, the next in flight
// while one prints) come out as one reply, in the order given; an index out
// of range anywhere fails the command before anything is printed.
TEST_P(BrowseCliTest, IndicesInSeveralCallsPrintAsOneReplyInOrder) {
  // Calls of 1,000, 10,000, 10,000 and the last of one index.
  constexpr int kIndices = 21'001;
  const std::string file = MakeTempDir() + "/indices.txt";
  {
    std::ofstream out(file);
    for (int i = 0; i < kIndices; ++i) {
      out << i % 4 << "," << (i * 7) % 256 << "\n";
    }
  }
  CommandResult r = Run({"--json", "scalar", P("Q4_K.gguf"),
                         "blk.0.attn_q.weight", "--indices-file", file});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["scalars"].size(), static_cast<size_t>(kIndices));
  for (int i = 0; i < kIndices; i += 997) {
    EXPECT_EQ(j["scalars"][i]["flatIndex"],
              std::to_string((i % 4) * 256 + (i * 7) % 256))
        << "scalar " << i;
  }
  EXPECT_EQ(
      j["scalars"][kIndices - 1]["flatIndex"],
      std::to_string(((kIndices - 1) % 4) * 256 + ((kIndices - 1) * 7) % 256));
  // Index 15,000 (the third call's) out of range: found before any call
  // prints, named by its line (a trial's message counted within its call,
  // "index 4000", after 11,000 scalars of an unclosed document), exit 1 as
  // the server's refusal of it, and with --json only the error's line.
  {
    std::ofstream out(file);
    for (int i = 0; i < kIndices; ++i) {
      out << (i == 15'000 ? 9 : i % 4) << "," << (i * 7) % 256 << "\n";
    }
  }
  r = Run({"--json", "scalar", P("Q4_K.gguf"), "blk.0.attn_q.weight",
           "--indices-file", file});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(CliErrorOf(r.err),
              AllOf(HasReason(ErrorReason::kIndexOutOfRange),
                    MessageNames("line 15001"), MessageNames("9,")));
  ASSERT_TRUE(nlohmann::json::accept(r.out)) << r.out.substr(0, 200);
  EXPECT_EQ(nlohmann::json::parse(r.out)["error"]["reason"],
            "INDEX_OUT_OF_RANGE");
}

// A usage error found once the tensor's shape is known (after a call) is
// reported with --json on stdout too, as every other usage error is.
TEST_P(BrowseCliTest, WithJsonAUsageErrorFoundAfterACallIsAnErrorLine) {
  const std::vector<std::vector<std::string>> misuses = {
      {"scalar", P("Q4_K.gguf"), "blk.0.attn_q.weight", "1"},  // rank 2
      {"read", P("Q4_K.gguf"), "blk.0.attn_q.weight", "--slice", "0,0,0"},
      {"heatmap", P("Q4_K.gguf"), "blk.0.attn_q.weight", "--index", "0"},
  };
  for (std::vector<std::string> args : misuses) {
    SCOPED_TRACE(::testing::PrintToString(args));
    args.insert(args.begin(), "--json");
    const CommandResult r = Run(args);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    ASSERT_TRUE(nlohmann::json::accept(r.out)) << "stdout: " << r.out;
    EXPECT_EQ(nlohmann::json::parse(r.out)["error"]["code"],
              "INVALID_ARGUMENT");
  }
}

// The first calls go out while the file is still parsed; a bad line after
// them is still a usage error with no scalar printed.
TEST_P(BrowseCliTest, ABadLineAfterTheFirstCallsPrintsNothing) {
  const std::string file = MakeTempDir() + "/indices.txt";
  {
    std::ofstream out(file);
    for (int i = 0; i < 25'000; ++i) out << i % 4 << "," << i % 256 << "\n";
    out << "1,,2\n";
  }
  CommandResult r = Run({"--json", "scalar", P("Q4_K.gguf"),
                         "blk.0.attn_q.weight", "--indices-file", file});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(CliErrorOf(r.err), AllOf(HasReason(ErrorReason::kRequestInvalid),
                                       MessageNames("line 25001")));
  // No scalar: stdout is the error's line alone.
  ASSERT_TRUE(nlohmann::json::accept(r.out)) << r.out.substr(0, 200);
  EXPECT_EQ(nlohmann::json::parse(r.out)["error"]["reason"], "REQUEST_INVALID");
}

// What is not a file of indices is a usage error, before any read of it.
TEST_P(BrowseCliTest, AnIndicesFileThatIsADirectoryOrTooBigIsAUsageError) {
  const std::string dir = MakeTempDir();
  CommandResult r = Run(
      {"scalar", P("Q4_K.gguf"), "blk.0.attn_q.weight", "--indices-file", dir});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(CliErrorOf(r.err), AllOf(HasReason(ErrorReason::kRequestInvalid),
                                       MessageNames("directory")));
  // A sparse file: its size is the rule, not its bytes.
  const std::string big = dir + "/indices.txt";
  std::ofstream(big).close();
  std::filesystem::resize_file(big, (std::uintmax_t{256} << 20) + 1);
  r = Run(
      {"scalar", P("Q4_K.gguf"), "blk.0.attn_q.weight", "--indices-file", big});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(CliErrorOf(r.err), AllOf(HasReason(ErrorReason::kRequestInvalid),
                                       MessageNames("256 MiB")));
}

TEST_P(BrowseCliTest, IndicesFileDashReadsStandardInput) {
  const std::string server =
      remote() ? "--server " + cli->server().address() + " " : "";
  CommandResult r =
      Shell(tree->root, "printf '0,1\\n3,255\\n' | \"$TM\" " + server +
                            "--json scalar Q4_K.gguf blk.0.attn_q.weight "
                            "--indices-file -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["scalars"].size(), 2u);
  EXPECT_EQ(j["scalars"][1]["flatIndex"], "1023");
}

TEST_P(BrowseCliTest, AMalformedIndicesLineIsAUsageErrorNamingTheLine) {
  const std::string file = MakeTempDir() + "/indices.txt";
  std::ofstream(file) << "0,0\n# fine\n1,,2\n";
  CommandResult r = Run({"scalar", P("Q4_K.gguf"), "blk.0.attn_q.weight",
                         "--indices-file", file});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(CliErrorOf(r.err),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("line 3"), MessageNames("'1,,2'")));
  std::ofstream(file) << "0,0\n7\n";  // a rank the tensor does not have
  r = Run({"scalar", P("Q4_K.gguf"), "blk.0.attn_q.weight", "--indices-file",
           file});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(CliErrorOf(r.err),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("line 2"), MessageNames("rank 2")));
  r = Run({"scalar", P("Q4_K.gguf"), "blk.0.attn_q.weight", "--indices-file",
           file + ".missing"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(CliErrorOf(r.err), AllOf(HasReason(ErrorReason::kRequestInvalid),
                                       MessageNames(file + ".missing")));
  r = Run({"scalar", P("Q4_K.gguf"), "blk.0.attn_q.weight"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(CliErrorOf(r.err), AllOf(HasReason(ErrorReason::kRequestInvalid),
                                       MessageNames("--indices-file")));
}

TEST_P(BrowseCliTest, AnUnknownHeatmapModeIsAUsageErrorListingTheChoices) {
  CommandResult r = Run(
      {"heatmap", P("Q4_K.gguf"), "blk.0.attn_q.weight", "--mode", "sparse"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(CliErrorOf(r.err), HasReason(ErrorReason::kRequestInvalid));
  for (const char* named :
       {"--mode", "value", "absmax", "error", "group", "zeros"}) {
    EXPECT_THAT(CliErrorOf(r.err), MessageNames(named));
  }
}

INSTANTIATE_TEST_SUITE_P(RemoteAndEmbedded, BrowseCliTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Remote" : "Embedded";
                         });

TEST(BrowseCliRootsTest, OutsideTheRootsIsPermissionDeniedNamingTheDirectory) {
  const CheckpointTree t = MakeCheckpointTree();
  ServerProcess server({t.root});
  CommandResult r =
      RunCommand({CliPath(), "--server", server.address(), "ls", t.outside});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(CliErrorOf(r.err), AllOf(HasReason(ErrorReason::kOutsideRoots),
                                       MessageNames("'" + t.outside + "'")));
}

TEST(BrowseCliEnvTest, ServerAndTokenFileComeFromTheEnvironment) {
  const CheckpointTree t = MakeCheckpointTree();
  const std::string dir = MakeTempDir();
  std::ofstream(dir + "/tokens") << "s3cret\n";
  std::ofstream(dir + "/token") << "s3cret\n";
  ServerProcess server({t.root}, {"--token-file", dir + "/tokens"});
  const std::string env_server = "TENSORMORPH_SERVER=" + server.address();
  CommandResult r =
      RunCommand({CliPath(), "ls", "--json"},
                 {env_server, "TENSORMORPH_TOKEN_FILE=" + dir + "/token"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(Paths(r.out), ElementsAreArray(t.expected));
  r = RunCommand({CliPath(), "ls"}, {env_server});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(CliErrorOf(r.err), HasReason(ErrorReason::kUnauthenticated));
  // A flag beats the environment.
  r = RunCommand({CliPath(), "--token-file", dir + "/token", "ls"},
                 {env_server, "TENSORMORPH_TOKEN_FILE=" + dir + "/none"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // A directory is no token (it was read as an empty one), nor a CA.
  for (const char* option : {"--token-file", "--tls-ca"}) {
    r = RunCommand({CliPath(), option, dir, "ls"}, {env_server});
    EXPECT_EQ(r.exit_code, 1) << option;
    EXPECT_THAT(CliErrorOf(r.err),
                AllOf(HasReason(ErrorReason::kRequestInvalid),
                      MessageNames(option), MessageNames("directory")));
  }
}

// `ls FILE` and `info FILE` ask the service nothing it refuses: a listing
// of a file would be refused as not a directory, a warning in the server's
// log and an INVALID_ARGUMENT in its metrics for every routine call.
TEST(BrowseCliServerTest, LsAndInfoOfAFileMakeNoRefusedCall) {
  testing::LoopbackServer lb = testing::StartLoopbackServer({FixturesDir()});
  for (const std::string& file :
       {Fixture("gguf/Q4_0.gguf"),
        Fixture("safetensors/plain/model.safetensors")}) {
    for (const char* command : {"ls", "info"}) {
      SCOPED_TRACE(absl::StrCat(command, " ", file));
      const CommandResult r =
          RunCommand({CliPath(), "--server", lb.address, command, file});
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
  }
  // Calls are counted when the server sees them closed, a moment after
  // their client: the four commands' calls, then none refused.
  ASSERT_TRUE(lb.server->state().metrics.WaitForIdle(absl::Seconds(20)));
  absl::StatusOr<testing::PrometheusScrape> s =
      testing::ParsePrometheusText(PrometheusText(lb.server->state()));
  ASSERT_TRUE(s.ok()) << s.status();
  const double all = s->Sum("tensormorph_calls_total");
  const double ok = s->Sum("tensormorph_calls_total", {{"code", "OK"}});
  EXPECT_GT(all, 0);
  EXPECT_EQ(ok, all);
  EXPECT_EQ(s->Sum("tensormorph_calls_total", {{"method", "ListCheckpoints"}}),
            0);
}

}  // namespace
}  // namespace tensormorph::browse_cli_test
