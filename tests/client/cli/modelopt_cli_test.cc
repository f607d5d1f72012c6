// The CLI on ModelOpt checkpoints written by tests/python/writers/modelopt.py,
// through a live server and embedded: ls lists one logical tensor per
// quantized layer with its scheme and granularity (the excluded lm_head as
// stored), read gives the writer's reference bits, scalar shows the code,
// block scale and global scale beside the value, info the serving backends.
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/npy_reader.h"
#include "tests/support/process.h"
#include "tests/support/python_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph::modelopt_cli_test {
namespace {

using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::ReadNpy;
using ::testing::HasSubstr;

std::string* root = nullptr;
CliModes* cli = nullptr;

class ModelOptCliTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    root = new std::string(testing::WriterOutput("modelopt.py"));
    cli = new CliModes({*root});
  }
  static void TearDownTestSuite() {
    delete cli;
    cli = nullptr;
  }
  CommandResult Run(std::vector<std::string> args) {
    return cli->Run(GetParam(), std::move(args));
  }
};

TEST_P(ModelOptCliTest, LsReadScalarAndInfoOfAMixedPrecisionModel) {
  const std::string dir = *root + "/mixed_precision";
  CommandResult ls = Run({"ls", dir, "--json"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  std::map<std::string, nlohmann::json> listed;
  std::istringstream lines(ls.out);
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);
    listed[j["name"]] = j;
  }
  const std::string fp4 = "model.layers.0.mlp.down_proj.weight";
  const std::string fp8 = "model.layers.0.self_attn.q_proj.weight";
  ASSERT_TRUE(listed.count(fp4) && listed.count(fp8)) << ls.out;
  EXPECT_EQ(listed[fp4]["encoding"]["convention"], "modelopt");
  EXPECT_EQ(listed[fp4]["encoding"]["granularity"], "group 16 along in");
  EXPECT_EQ(listed[fp4]["parts"].size(), 3u);
  EXPECT_EQ(listed[fp8]["encoding"]["granularity"], "tensor");
  EXPECT_FALSE(listed["lm_head.weight"]["encoding"]["quantized"].get<bool>());

  const std::vector<float> want =
      ReadNpy(dir + "/ref/" + fp4 + ".npy").floats();
  const std::string out = MakeTempDir() + "/t.npy";
  CommandResult read = Run({"read", dir, fp4, "-o", out});
  ASSERT_EQ(read.exit_code, 0) << read.err;
  EXPECT_EQ(ReadNpy(out).floats(), want);

  CommandResult sc = Run({"scalar", dir, fp4, "0,1", "--json"});
  ASSERT_EQ(sc.exit_code, 0) << sc.err;
  const auto s = nlohmann::json::parse(sc.out)["scalars"][0];
  EXPECT_EQ(s["value"].get<float>(), want[1]);
  EXPECT_THAT(s.dump(), HasSubstr("block_scale"));
  EXPECT_THAT(s.dump(), HasSubstr("global_scale"));

  CommandResult info = Run({"info", dir, fp4});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr("NVFP4 (fp4 e2m1, fp8 scales x global)"));
  EXPECT_THAT(info.out, HasSubstr("SGLang"));
}

// W4A8_AWQ with AWQ's pre_quant_scale: read gives the reference (the
// dequantized INT4 times the column's pre_quant_scale), scalar shows the
// group scale, weight_scale_2 and pre_quant_scale, and the diff against
// the source stays within half a step.
TEST_P(ModelOptCliTest, W4a8AwqReadsScalarsAndDiffsAgainstItsSource) {
  const std::string dir = *root + "/w4a8_awq";
  const std::string w = "model.layers.0.mlp.down_proj.weight";
  const std::vector<float> want = ReadNpy(dir + "/ref/" + w + ".npy").floats();
  const std::string out = MakeTempDir() + "/t.npy";
  CommandResult read = Run({"read", dir, w, "-o", out});
  ASSERT_EQ(read.exit_code, 0) << read.err;
  EXPECT_EQ(ReadNpy(out).floats(), want);

  CommandResult sc = Run({"scalar", dir, w, "1,130", "--json"});
  ASSERT_EQ(sc.exit_code, 0) << sc.err;
  const auto j = nlohmann::json::parse(sc.out);
  EXPECT_EQ(j["encoding"]["scheme"],
            "W4A8_AWQ (int4, float scales) x pre_quant_scale");
  const auto s = j["scalars"][0];
  EXPECT_EQ(s["value"].get<float>(), want[256 + 130]);
  std::vector<std::string> names;
  for (const auto& p : s["params"]) names.push_back(p["name"]);
  EXPECT_THAT(names, ::testing::ElementsAre("scale", "weight_scale_2",
                                            "pre_quant_scale"));

  CommandResult info = Run({"info", dir, w});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr("W4A8_AWQ (INT4 weights, FP8 GEMM"));

  CommandResult diff = Run({"--json", "diff", dir, dir + "/source"});
  ASSERT_EQ(diff.exit_code, 0) << diff.err;
  int reports = 0;
  std::istringstream lines(diff.out);
  for (std::string line; std::getline(lines, line);) {
    const auto r = nlohmann::json::parse(line);
    if (!r.contains("tensor")) continue;
    ++reports;
    EXPECT_LE(r["tensor"]["maxErrSteps"].get<double>(), 0.5 + 1e-6) << line;
    EXPECT_EQ(r["tensor"]["clipped"], "0") << line;
  }
  EXPECT_EQ(reports, 3);
}

INSTANTIATE_TEST_SUITE_P(BothModes, ModelOptCliTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Remote" : "Embedded";
                         });

}  // namespace
}  // namespace tensormorph::modelopt_cli_test
