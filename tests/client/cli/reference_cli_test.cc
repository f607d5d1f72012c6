// The views against a full-precision reference, through the CLI, remote and
// embedded: the README's `--ref` examples run as written (a GGUF against
// its Hugging Face source, in a directory laid out as the README names it),
// their numbers agree with the diff's, and --ref-tensor names a reference.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/cli_error.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/process.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::ServerProcess;
using ::tensormorph::testing::WriteDemoCheckpoints;
using ::testing::AllOf;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

// The README's command lines that take --ref: "tensormorph ..." lines,
// their trailing comment dropped, split into words (they hold no quotes).
std::vector<std::vector<std::string>> ReadmeRefExamples() {
  std::ifstream in(std::string(TENSORMORPH_SOURCE_DIR) + "/README.md");
  EXPECT_TRUE(in.good()) << "README.md not found";
  std::vector<std::vector<std::string>> out;
  static const std::regex kLine(R"(^tensormorph (.*--ref .*?)\s*(#.*)?$)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_match(line, m, kLine)) continue;
    out.push_back(absl::StrSplit(m[1].str(), ' ', absl::SkipEmpty()));
  }
  return out;
}

// A directory laid out as the README's examples name their files: the demo
// model quantized to Q8_0 as model.gguf and to a Q4_K_M mix as q.gguf (both
// with llama.cpp's names and RoPE-permuted Q/K rows), and its BF16 Hugging
// Face source as source/ and src/.
std::string WriteReadmeDir() {
  const std::string demo = MakeTempDir(), dir = MakeTempDir();
  if (!WriteDemoCheckpoints(demo)) std::abort();
  fs::copy_file(demo + "/model-q8_0.gguf", dir + "/model.gguf");
  fs::copy_file(demo + "/model-q4_k_m.gguf", dir + "/q.gguf");
  fs::copy_file(demo + "/model-f32.gguf", dir + "/f32.gguf");
  fs::copy(demo + "/source", dir + "/source", fs::copy_options::recursive);
  fs::copy(demo + "/source", dir + "/src", fs::copy_options::recursive);
  return dir;
}

const std::string* dir = nullptr;
ServerProcess* server = nullptr;

class ReferenceCliTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    dir = new std::string(WriteReadmeDir());
    server = new ServerProcess({*dir});
  }
  static void TearDownTestSuite() {
    delete server;
    server = nullptr;
    delete dir;
    dir = nullptr;
  }
  // `tensormorph [--server ADDRESS] args...` run in the directory, so that
  // relative names resolve alike both ways (embedded: against the working
  // directory; remote: against the server's root).
  CommandResult Run(std::vector<std::string> args) {
    std::vector<std::string> argv = {
        "/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", *dir, CliPath()};
    if (GetParam()) argv.insert(argv.end(), {"--server", server->address()});
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  }
  nlohmann::json Json(std::vector<std::string> args) {
    args.insert(args.begin(), "--json");
    CommandResult r = Run(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
  }
  // The diff's report of one tensor.
  nlohmann::json DiffReport(const std::string& quant, const std::string& ref,
                            const std::string& tensor) {
    CommandResult r = Run({"--json", "diff", quant, ref, "--filter", tensor});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (j.contains("tensor")) return j["tensor"];
    }
    ADD_FAILURE() << "no report of " << tensor;
    return nlohmann::json();
  }
};

int64_t I(const nlohmann::json& j, const char* key) {
  return j.contains(key) ? std::stoll(j[key].get<std::string>()) : 0;
}

TEST_P(ReferenceCliTest, TheReadmesRefExamplesRunAsWritten) {
  const auto examples = ReadmeRefExamples();
  ASSERT_EQ(examples.size(), 3u) << "the README's --ref examples changed";
  for (const auto& args : examples) {
    SCOPED_TRACE(absl::StrJoin(args, " "));
    CommandResult r = Run(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (args[0] == "stats") {
      EXPECT_THAT(r.out, AllOf(HasSubstr("pruned (x = 0)"),
                               HasSubstr("induced (x != 0)"),
                               HasSubstr("levels used")));
    } else if (args[0] == "scalar") {
      // The source element through the Q/K row map: HF row 32 of row 1.
      EXPECT_THAT(r.out, HasSubstr("q_proj.weight[32, 7]"));
    } else {
      EXPECT_EQ(args[0], "heatmap");
      EXPECT_THAT(r.out, HasSubstr("\x1b[38;2;"));  // drawn in the terminal
    }
  }
}

// stats --ref splits the zeros as the diff counts them, for the permuted Q
// and K as for the rest.
TEST_P(ReferenceCliTest, StatsWithAReferenceAgreesWithTheDiff) {
  for (const std::string tensor : {"blk.0.attn_q.weight", "blk.1.attn_k.weight",
                                   "blk.0.ffn_down.weight"}) {
    SCOPED_TRACE(tensor);
    const nlohmann::json st =
        Json({"stats", "model.gguf", tensor, "--ref", "source/"});
    const nlohmann::json d = DiffReport("model.gguf", "source/", tensor);
    EXPECT_TRUE(st["hasReference"].get<bool>());
    EXPECT_EQ(I(st, "zeros"), I(d, "decodedZeros"));
    EXPECT_EQ(I(st, "inducedZeros"), I(d, "inducedZeros"));
    EXPECT_EQ(I(st, "prunedZeros"),
              I(d, "decodedZeros") - I(d, "inducedZeros"));
    // Q8_0 keeps every pruned zero (every 13th source value): the split is
    // only right when the rows line up.
    EXPECT_EQ(I(st, "prunedZeros"), I(d, "sourceZeros"));
    EXPECT_GT(I(st, "prunedZeros"), 5000);
  }
}

// heatmap --mode error: a cell per element shows the diff's error in steps;
// a clean quantization (Q8_0) stays near half a step, the RoPE-permuted Q
// and K included; an F32 copy has no error at all.
TEST_P(ReferenceCliTest, TheErrorHeatmapMeasuresTheRowsTheDiffMeasures) {
  for (const std::string tensor :
       {"blk.0.attn_q.weight", "blk.1.attn_k.weight", "blk.0.attn_v.weight"}) {
    SCOPED_TRACE(tensor);
    for (const std::string quant : {"model.gguf", "q.gguf"}) {
      const nlohmann::json h =
          Json({"heatmap", quant, tensor, "--mode", "error", "--ref", "src/",
                "--size", "256x256"});
      ASSERT_EQ(h["width"], 256);
      const nlohmann::json d = DiffReport(quant, "src/", tensor);
      EXPECT_DOUBLE_EQ(h["max"].get<double>(), d["maxErrSteps"].get<double>())
          << quant;
      if (quant == "model.gguf") {
        EXPECT_LT(h["max"].get<double>(), 0.6);
      }
    }
    const nlohmann::json f =
        Json({"heatmap", "f32.gguf", tensor, "--mode", "error", "--ref", "src/",
              "--size", "64x64"});
    EXPECT_EQ(f["max"].get<double>(), 0);
  }
}

TEST_P(ReferenceCliTest, RefTensorNamesTheReference) {
  const nlohmann::json by_rule =
      Json({"stats", "model.gguf", "blk.0.attn_q.weight", "--ref", "source/"});
  const nlohmann::json named =
      Json({"stats", "model.gguf", "blk.0.attn_q.weight", "--ref", "source/",
            "--ref-tensor", "model.layers.0.self_attn.q_proj.weight"});
  EXPECT_EQ(named, by_rule);
  const nlohmann::json heat =
      Json({"heatmap", "model.gguf", "blk.0.attn_q.weight", "--mode", "error",
            "--ref", "source/", "--ref-tensor",
            "model.layers.0.self_attn.q_proj.weight", "--size", "256x256"});
  EXPECT_LT(heat["max"].get<double>(), 0.6);

  CommandResult missing =
      Run({"stats", "model.gguf", "blk.0.attn_q.weight", "--ref", "source/",
           "--ref-tensor", "nope.weight"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(CliErrorOf(missing.err),
              AllOf(HasReason(ErrorReason::kTensorNotFound),
                    MessageNames("'nope.weight'")));
  // A shape mismatch names both tensors and both shapes.
  CommandResult shapes =
      Run({"heatmap", "model.gguf", "blk.0.ffn_down.weight", "--mode", "error",
           "--ref", "source/", "--ref-tensor",
           "model.layers.0.mlp.up_proj.weight"});
  EXPECT_EQ(shapes.exit_code, 1);
  EXPECT_THAT(
      CliErrorOf(shapes.err),
      AllOf(HasReason(ErrorReason::kRequestInvalid),
            MessageNames("'model.layers.0.mlp.up_proj.weight'"),
            MessageNames("[512, 256]"), MessageNames("'blk.0.ffn_down.weight'"),
            MessageNames("[256, 512]")));
  // --ref-tensor without --ref is a usage error.
  CommandResult usage = Run({"stats", "model.gguf", "blk.0.attn_q.weight",
                             "--ref-tensor", "x.weight"});
  EXPECT_EQ(usage.exit_code, 1) << usage.err;
}

// `scalar --ref`: each element beside the source element the diff compares
// it with. GGUF row 1 of attn_q is Hugging Face row 32 (head_dim 64: the
// converter writes HF row half * 32 + i as GGUF row 2i + half); the F32
// GGUF holds the source's values in GGUF order, so its value at [1, 7] is
// the source element's.
TEST_P(ReferenceCliTest, ScalarWithARefShowsTheSourceElementTheDiffPairs) {
  const nlohmann::json j = Json({"scalar", "model.gguf", "blk.0.attn_q.weight",
                                 "1,7", "0,3", "--ref", "source/"});
  EXPECT_EQ(j["referenceTensor"], "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(j["referenceRowsMapped"], true);
  const nlohmann::json& s = j["scalars"][0];
  EXPECT_EQ(s["source"]["index"], nlohmann::json({"32", "7"}));
  const nlohmann::json f32 =
      Json({"scalar", "f32.gguf", "blk.0.attn_q.weight", "1,7"});
  // Floats print as their shortest text, doubles as theirs: compared as
  // the float32s both are.
  const double source = s["source"]["value"].get<double>();
  EXPECT_EQ(static_cast<float>(source),
            static_cast<float>(f32["scalars"][0]["value"].get<double>()));
  EXPECT_EQ(static_cast<double>(static_cast<float>(source)), source);
  const double value = static_cast<float>(s["value"].get<double>());
  EXPECT_EQ(s["source"]["error"].get<double>(), value - source);
  const double steps = s["source"]["errorSteps"].get<double>();
  const double step = source > value ? s["stepAbove"].get<double>()
                                     : s["stepBelow"].get<double>();
  EXPECT_DOUBLE_EQ(steps, std::fabs(value - source) / step);
  EXPECT_EQ(j["scalars"][1]["source"]["index"], nlohmann::json({"0", "3"}));

  // The text shows the same beside today's fields.
  CommandResult text = Run({"scalar", "model.gguf", "blk.0.attn_q.weight",
                            "1,7", "--ref", "source/"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out,
              AllOf(HasSubstr("  value       "), HasSubstr("  source      "),
                    HasSubstr("model.layers.0.self_attn.q_proj.weight[32, 7]"),
                    HasSubstr("rows mapped"), HasSubstr("(value - source)"),
                    HasSubstr(" steps\n")));
  // A named reference tensor; a missing one; --ref-tensor alone.
  const nlohmann::json named = Json(
      {"scalar", "model.gguf", "blk.0.attn_q.weight", "1,7", "0,3", "--ref",
       "source/", "--ref-tensor", "model.layers.0.self_attn.q_proj.weight"});
  EXPECT_EQ(named, j);
  CommandResult missing =
      Run({"scalar", "model.gguf", "blk.0.attn_q.weight", "1,7", "--ref",
           "source/", "--ref-tensor", "nope.weight"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(CliErrorOf(missing.err),
              AllOf(HasReason(ErrorReason::kTensorNotFound),
                    MessageNames("'nope.weight'")));
  CommandResult usage = Run({"scalar", "model.gguf", "blk.0.attn_q.weight",
                             "1,7", "--ref-tensor", "x.weight"});
  EXPECT_EQ(usage.exit_code, 1) << usage.err;
}

TEST(ReferenceCliHelp, ScalarHelpSaysWhatTheSourceFieldsMean) {
  CommandResult help = RunCommand({CliPath(), "scalar", "--help"});
  ASSERT_EQ(help.exit_code, 0) << help.err;
  EXPECT_THAT(help.out, AllOf(HasSubstr("--ref"), HasSubstr("--ref-tensor"),
                              HasSubstr("signed error (value - source)"),
                              HasSubstr("step on the source's side")));
}

INSTANTIATE_TEST_SUITE_P(BothModes, ReferenceCliTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Remote" : "Embedded";
                         });

}  // namespace
}  // namespace tensormorph
