// The built tensormorph binary, run as a user would: against a real
// tensormorphd and embedded, with the same commands.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/format/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/cli_error.h"
#include "tests/support/npy_reader.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/same_bits.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliJsonErrorOf;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::SameBits;
using ::testing::AllOf;
using ::testing::HasSubstr;

using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::FixturesDir;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::ReadF32File;
using ::tensormorph::testing::ReadNpy;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::ServerProcess;

class CliTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() { cli = new CliModes({FixturesDir()}); }
  static void TearDownTestSuite() {
    delete cli;
    cli = nullptr;
  }
  bool remote() const { return GetParam(); }

  // Runs the CLI in this test's mode; paths are absolute inside the root.
  CommandResult Run(std::vector<std::string> args) {
    return cli->Run(remote(), std::move(args));
  }

  static CliModes* cli;
};
CliModes* CliTest::cli = nullptr;

std::string Gguf(const std::string& type) {
  return Fixture("gguf/" + type + ".gguf");
}

TEST_P(CliTest, ReadWritesAnNpyWithExactlyTheExpectedValues) {
  const std::string out = MakeTempDir() + "/x.npy";
  CommandResult r =
      Run({"read", Gguf("Q4_K"), "blk.0.ffn_down.weight", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto npy = ReadNpy(out);
  EXPECT_EQ(npy.descr, "<f4");
  EXPECT_EQ(npy.shape, (std::vector<int64_t>{4, 256}));
  EXPECT_TRUE(SameBits(
      npy.floats(),
      ReadF32File(Fixture("gguf/Q4_K.blk.0.ffn_down.weight.deq.f32"))));
}

TEST_P(CliTest, ReadOfASteppedSliceEqualsTheSameSliceOfTheExpectedArray) {
  const std::string out = MakeTempDir() + "/s.npy";
  CommandResult r = Run({"read", Gguf("Q4_K"), "blk.0.ffn_down.weight",
                         "--slice", "1::2, 255:0:-17", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto want =
      ReadF32File(Fixture("gguf/Q4_K.blk.0.ffn_down.weight.deq.f32"));
  std::vector<float> expected;
  for (int row = 1; row < 4; row += 2) {
    for (int col = 255; col > 0; col -= 17)
      expected.push_back(want[row * 256 + col]);
  }
  auto npy = ReadNpy(out);
  EXPECT_EQ(npy.shape, (std::vector<int64_t>{2, 15}));
  EXPECT_TRUE(SameBits(npy.floats(), expected));
}

TEST_P(CliTest, ReadPreviewLooksLikeNumpy) {
  CommandResult r =
      Run({"read", Fixture("safetensors/plain/model.safetensors"), "bf16_3d"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("[[[ -2.09375,  0.382812,"));
  EXPECT_THAT(r.out, HasSubstr("shape [2, 3, 4], float32"));
}

TEST_P(CliTest, ScalarJsonShowsCodeScaleZeroBlocksStepAndValueAsCoreDoes) {
  for (const std::string type : {"Q4_K", "Q8_0", "BF16"}) {
    SCOPED_TRACE(type);
    CommandResult r =
        Run({"scalar", Gguf(type), "blk.0.ffn_down.weight", "3,17", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["scalars"].size(), 1u);
    const auto& s = j["scalars"][0];
    auto ckpt = Checkpoint::Open(Gguf(type));
    ScalarInfo want;
    ASSERT_TRUE(ckpt.value()
                    ->FindTensor("blk.0.ffn_down.weight")
                    ->encoding->Inspect(3 * 256 + 17, &want)
                    .ok());
    // protobuf's JSON mapping writes 64-bit integers as strings.
    EXPECT_EQ(std::stoll(s["rawCode"].get<std::string>()), want.code);
    EXPECT_EQ(std::stoull(s["rawBits"].get<std::string>()),
              want.code_bits_value);
    EXPECT_EQ(std::stoll(s["block"].get<std::string>()), want.block);
    EXPECT_EQ(s["scale"].get<double>(), want.scale);
    EXPECT_EQ(s["zeroPoint"].get<double>(), want.zero_point);
    EXPECT_EQ(s["offset"].get<double>(), want.offset);
    EXPECT_EQ(s["step"].get<double>(), want.step);
    EXPECT_EQ(s["value"].get<float>(), want.value);
    EXPECT_EQ(j["encoding"]["scheme"], type);
    if (type == "Q4_K") {
      std::vector<std::string> names;
      for (const auto& p : s["params"]) names.push_back(p["name"]);
      EXPECT_THAT(names, ::testing::ElementsAre("d", "dmin", "sc", "m"));
      EXPECT_EQ(s["subBlock"].get<int>(), want.sub_block);
    }
  }
}

TEST_P(CliTest, ScalarHumanOutputNamesEverything) {
  CommandResult r =
      Run({"scalar", Gguf("Q4_K"), "blk.0.ffn_down.weight", "3,17"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* word :
       {"raw code", "block", "sub-block", "params", "d=", "dmin=", "scale",
        "zero-point", "step", "range", "value"}) {
    EXPECT_THAT(r.out, HasSubstr(word));
  }
}

TEST_P(CliTest, LsJsonIsOneObjectPerLineAndGlobalFlagsGoAnywhere) {
  CommandResult r = Run({"--json", "ls", Gguf("Q6_K")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int lines = 0;
  for (size_t pos = 0; (pos = r.out.find('\n', pos)) != std::string::npos;
       ++pos)
    ++lines;
  EXPECT_EQ(lines, 3);
  CommandResult after = Run({"ls", Gguf("Q6_K"), "--json"});
  EXPECT_EQ(after.out, r.out);
  EXPECT_EQ(nlohmann::json::parse(r.out.substr(0, r.out.find('\n')))["name"],
            "blk.0.attn_norm.weight");
}

TEST_P(CliTest, InfoDescribesCheckpointAndTensor) {
  CommandResult c = Run({"info", Gguf("Q4_K")});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_THAT(c.out, HasSubstr("format      gguf"));
  EXPECT_THAT(c.out, HasSubstr("general.architecture"));
  CommandResult t = Run({"info", Gguf("Q4_K"), "blk.0.attn_q.weight"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_THAT(t.out, HasSubstr("per-block 256 (8 sub-blocks of 32)"));
  EXPECT_THAT(t.out, HasSubstr("strides      [256, 1]"));
}

// A failed call exits 2; a request the service refuses as wrong (past the
// shape: OUT_OF_RANGE) is the caller's mistake, exit 1 as a usage error.
TEST_P(CliTest, FailedCallsExitWithTheStatusOnStderr) {
  CommandResult nf = Run({"read", Gguf("Q4_K"), "no.such"});
  EXPECT_EQ(nf.exit_code, 2);
  EXPECT_THAT(CliErrorOf(nf.err), AllOf(HasReason(ErrorReason::kTensorNotFound),
                                        MessageNames("no.such")));
  EXPECT_TRUE(nf.out.empty());
  CommandResult oor =
      Run({"scalar", Gguf("Q4_K"), "blk.0.attn_q.weight", "9,0"});
  EXPECT_EQ(oor.exit_code, 1);
  EXPECT_THAT(CliErrorOf(oor.err), HasReason(ErrorReason::kIndexOutOfRange));
  // And the same server keeps answering.
  EXPECT_EQ(Run({"ls", Gguf("Q4_K")}).exit_code, 0);
}

// The reason is in the error line, and with --json also on stdout as one
// {"error": {code, reason, message, metadata}} line; the exit code is the
// same.
TEST_P(CliTest, FailedCallsSayTheirReasonAndJsonCarriesIt) {
  CommandResult nf = Run({"read", Gguf("Q4_K"), "no.such"});
  EXPECT_EQ(nf.exit_code, 2);
  EXPECT_THAT(CliErrorOf(nf.err), HasReason(ErrorReason::kTensorNotFound));
  CommandResult js = Run({"--json", "read", Gguf("Q4_K"), "no.such"});
  EXPECT_EQ(js.exit_code, 2);
  const nlohmann::json line = nlohmann::json::parse(js.out, nullptr, false);
  ASSERT_TRUE(line.is_object()) << js.out;
  const nlohmann::json& error = line["error"];
  EXPECT_EQ(error["code"], "NOT_FOUND");
  EXPECT_EQ(error["reason"], "TENSOR_NOT_FOUND");
  EXPECT_EQ(error["metadata"]["tensor"], "no.such");
  EXPECT_THAT(CliJsonErrorOf(js.out),
              AllOf(HasReason(ErrorReason::kTensorNotFound),
                    HasMetadata("tensor", "no.such"), MessageNames("no.such")));
  if (!remote()) return;  // embedded, every path is the user's own
  CommandResult outside = Run({"--json", "info", "/etc/passwd"});
  EXPECT_EQ(outside.exit_code, 2);
  EXPECT_EQ(
      nlohmann::json::parse(outside.out, nullptr, false)["error"]["reason"],
      "OUTSIDE_ROOTS")
      << outside.out << outside.err;
}

// A usage error's line reads as a failed call's: INVALID_ARGUMENT with its
// reason, the exit code telling the two apart.
TEST_P(CliTest, UsageErrorsExitOne) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"read"}, {"frobnicate"}}) {
    CommandResult r = Run(args);
    EXPECT_EQ(r.exit_code, 1) << args[0];
    EXPECT_THAT(CliErrorOf(r.err), HasReason(ErrorReason::kRequestInvalid))
        << args[0];
  }
  CommandResult bad =
      Run({"scalar", Gguf("Q4_K"), "blk.0.attn_q.weight", "1,x"});
  EXPECT_EQ(bad.exit_code, 1);
  // A usage error names the word it could not read.
  EXPECT_THAT(
      CliErrorOf(bad.err),
      AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames("'x'")));
}

TEST_P(CliTest, EveryCommandHasHelpWithAnExample) {
  for (const char* cmd : {"ls", "info", "read", "scalar"}) {
    CommandResult r = Run({cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd;
    EXPECT_THAT(r.out, HasSubstr("Example")) << cmd;
  }
  EXPECT_THAT(Run({"--help"}).out, HasSubstr("Exit codes"));
}

INSTANTIATE_TEST_SUITE_P(BothModes, CliTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Remote" : "Embedded";
                         });

TEST(CliRemoteTest, ServerFromTheEnvironmentAndSandboxErrors) {
  ServerProcess server({FixturesDir()});
  CommandResult r = RunCommand({CliPath(), "info", "gguf/Q8_0.gguf"},
                               {"TENSORMORPH_SERVER=" + server.address()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  CommandResult denied = RunCommand(
      {CliPath(), "--server", server.address(), "info", "../../../etc/passwd"});
  EXPECT_EQ(denied.exit_code, 2);
  EXPECT_THAT(CliErrorOf(denied.err), HasReason(ErrorReason::kOutsideRoots));
  CommandResult down =
      RunCommand({CliPath(), "--server", "127.0.0.1:1", "ls", "x"});
  EXPECT_EQ(down.exit_code, 2);
  EXPECT_THAT(CliErrorOf(down.err), HasReason(ErrorReason::kUnavailable));
  EXPECT_EQ(server.Stop(), 0);  // SIGTERM: a clean exit
}

// `read` without --slice or -o previews a tensor by its corners: every
// long dimension's first and last three items, read as slices of their
// own, so a 1 GiB tensor's preview costs kilobytes. The preview equals the
// one printed from the whole array (`--slice :` reads it whole), for 1, 2
// and 3 long dimensions and short ones between them.
TEST(CliPreviewTest, APreviewOfCornersEqualsThePreviewOfTheWholeArray) {
  const std::string dir = MakeTempDir();
  std::vector<testing::StTensor> tensors;
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{100}, {9, 8}, {5, 12}, {9, 4, 10}}) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.5f - 7;
    tensors.push_back({absl::StrCat("t", shape.size(), "_", shape[0]), "F32",
                       shape, testing::Bytes(v)});
  }
  testing::WriteFile(dir + "/m.safetensors",
                     testing::BuildSafetensors(tensors));
  CliModes modes({dir});
  for (bool remote : {false, true}) {
    for (const testing::StTensor& t : tensors) {
      SCOPED_TRACE(t.name);
      CommandResult corners =
          modes.Run(remote, {"read", dir + "/m.safetensors", t.name});
      CommandResult whole = modes.Run(
          remote, {"read", dir + "/m.safetensors", t.name, "--slice", ":"});
      ASSERT_EQ(corners.exit_code, 0) << corners.err;
      EXPECT_EQ(corners.out, whole.out);
      EXPECT_THAT(corners.out, HasSubstr("..."));
    }
  }
}

TEST(CliPreviewTest, APreviewReadsNoMoreThanItPrints) {
  // A server whose one ReadSlice may return 1 KiB: the whole 4 KiB tensor
  // is refused, its preview is not.
  ServerProcess server({FixturesDir()}, {"--max-slice-bytes", "1024"});
  const std::string q4k = Fixture("gguf/Q4_K.gguf");
  CommandResult whole =
      RunCommand({CliPath(), "--server", server.address(), "read", q4k,
                  "blk.0.ffn_down.weight", "--slice", ":"});
  EXPECT_EQ(whole.exit_code, 2);
  EXPECT_THAT(CliErrorOf(whole.err), HasReason(ErrorReason::kLimitExceeded));
  CommandResult preview = RunCommand({CliPath(), "--server", server.address(),
                                      "read", q4k, "blk.0.ffn_down.weight"});
  ASSERT_EQ(preview.exit_code, 0) << preview.err;
  CommandResult embedded =
      RunCommand({CliPath(), "read", q4k, "blk.0.ffn_down.weight"});
  EXPECT_EQ(preview.out, embedded.out);
  EXPECT_THAT(preview.out, HasSubstr("shape [4, 256], float32"));
}

// `tensormorphd --root /models` where /models is a symlink (/models ->
// /nvme/models on GPU boxes): paths spelled the way the root was given work,
// and a symlink leading out of the root is still refused.
TEST(CliRemoteTest, ARootThatIsASymlinkServesPathsSpelledThroughIt) {
  namespace fs = std::filesystem;
  const std::string base = MakeTempDir();
  fs::create_directories(base + "/nvme/models");
  fs::copy_file(Fixture("gguf/Q8_0.gguf"), base + "/nvme/models/x.gguf");
  fs::create_directory_symlink(base + "/nvme/models", base + "/models");
  fs::create_symlink(Fixture("gguf/Q4_K.gguf"), base + "/nvme/models/out.gguf");
  ServerProcess server({base + "/models"});
  const std::string at = server.address();
  CommandResult ls =
      RunCommand({CliPath(), "--server", at, "ls", base + "/models/x.gguf"});
  EXPECT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_THAT(ls.out, HasSubstr("blk.0.ffn_down.weight"));
  CommandResult rel = RunCommand({CliPath(), "--server", at, "ls", "x.gguf"});
  EXPECT_EQ(rel.exit_code, 0) << rel.err;
  EXPECT_EQ(rel.out, ls.out);
  CommandResult escape =
      RunCommand({CliPath(), "--server", at, "ls", base + "/models/out.gguf"});
  EXPECT_EQ(escape.exit_code, 2);
  // The refusal shows the root as given and as resolved.
  EXPECT_THAT(CliErrorOf(escape.err),
              AllOf(HasReason(ErrorReason::kOutsideRoots),
                    MessageNames(base + "/models (resolved: ")));
  EXPECT_EQ(server.Stop(), 0);
}

}  // namespace
}  // namespace tensormorph
