// The CLI on every convention fixture, remote and embedded: ls shows one
// logical tensor per layer with its convention and granularity, read
// reproduces the expected values, scalar shows the group's scale and zero.
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/cli_error.h"
#include "tests/support/npy_reader.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::FixturesDir;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ReadF32File;
using ::tensormorph::testing::ReadNpy;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::ServerProcess;
using ::testing::AllOf;

namespace fs = std::filesystem;

struct Case {
  const char* dir;
  const char* convention;
  const char* granularity;
};
const Case kCases[] = {
    {"gptq_4bit_g32", "gptq", "group 32 along in"},
    {"gptq_4bit_g32_actorder", "gptq", "group 32 along in, act-order"},
    {"awq_4bit_g32", "awq-gemm", "group 32 along in"},
    {"ct_int8_channel", "compressed-tensors", "channel along out"},
    {"ct_int8_tensor_asym", "compressed-tensors", "tensor"},
    {"ct_w4a16_group", "compressed-tensors", "group 32 along in"},
    {"fp8_block_sharded", "fp8", "block 128x128"},
    {"mxfp4_gptoss", "mxfp4 (gpt-oss)", "group 32 along the last dimension"},
    {"bnb_nf4", "bitsandbytes", "block 64 (flat)"},
};

CliModes* cli = nullptr;

class CliConventionTest
    : public ::testing::TestWithParam<std::tuple<Case, bool>> {
 protected:
  static void SetUpTestSuite() { cli = new CliModes({FixturesDir()}); }
  static void TearDownTestSuite() {
    delete cli;
    cli = nullptr;
  }
  CommandResult Run(std::vector<std::string> args) {
    return cli->Run(std::get<1>(GetParam()), std::move(args));
  }
};

TEST_P(CliConventionTest, LsReadAndScalarShowTheLogicalTensor) {
  const Case& c = std::get<0>(GetParam());
  const std::string dir = Fixture(std::string("safetensors/") + c.dir);
  CommandResult ls = Run({"ls", dir, "--json"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  std::map<std::string, nlohmann::json> listed;
  std::istringstream lines(ls.out);
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);
    listed[j["name"]] = j;
  }
  for (const auto& entry : fs::directory_iterator(dir + "/expected")) {
    std::string name = entry.path().filename().string();
    name = name.substr(0, name.size() - 4);
    SCOPED_TRACE(name);
    ASSERT_TRUE(listed.count(name)) << ls.out;
    const nlohmann::json& t = listed[name];
    const std::vector<float> want = ReadF32File(entry.path().string());
    if (t["encoding"]["quantized"].get<bool>()) {
      EXPECT_EQ(t["encoding"]["convention"], c.convention);
      EXPECT_EQ(t["encoding"]["granularity"], c.granularity);
      EXPECT_GE(t["parts"].size(), 2u);  // built from several stored tensors
    }
    const std::string out = MakeTempDir() + "/t.npy";
    CommandResult read = Run({"read", dir, name, "-o", out});
    ASSERT_EQ(read.exit_code, 0) << read.err;
    const std::vector<float> got = ReadNpy(out).floats();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << i;

    std::vector<std::string> index(t["shape"].size(), "1");
    std::string coords;
    for (size_t d = 0; d < index.size(); ++d)
      coords += (d ? "," : "") + index[d];
    CommandResult sc = Run({"scalar", dir, name, coords, "--json"});
    ASSERT_EQ(sc.exit_code, 0) << sc.err;
    const auto s = nlohmann::json::parse(sc.out)["scalars"][0];
    const int64_t flat = std::stoll(s["flatIndex"].get<std::string>());
    EXPECT_EQ(s["value"].get<float>(), want[flat]);
    EXPECT_TRUE(s.contains("scale") && s.contains("zeroPoint") &&
                s.contains("rawCode"));
  }
}

INSTANTIATE_TEST_SUITE_P(AllConventionsBothModes, CliConventionTest,
                         ::testing::Combine(::testing::ValuesIn(kCases),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).dir) +
                                  (std::get<1>(info.param) ? "_Remote"
                                                           : "_Embedded");
                         });

TEST(CliConventionErrorTest,
     BrokenConventionIsDataLossAndTheServerKeepsServing) {
  const std::string dir = MakeTempDir();
  fs::create_directory(dir + "/broken");
  // A GPTQ layer whose scales disagree with its group size.
  ::tensormorph::testing::WriteFile(
      dir + "/broken/model.safetensors",
      ::tensormorph::testing::BuildSafetensors(
          {{"l.qweight", "I32", {16, 64}, std::string(4096, '\0')},
           {"l.qzeros", "I32", {4, 8}, std::string(128, '\0')},
           {"l.scales", "F16", {3, 64}, std::string(384, '\0')}}));
  ::tensormorph::testing::WriteFile(
      dir + "/broken/config.json",
      R"({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 32}})");
  ServerProcess s({dir, FixturesDir()});
  CommandResult bad =
      RunCommand({CliPath(), "--server", s.address(), "ls", "broken"});
  EXPECT_EQ(bad.exit_code, 2);
  // The part at fault and its dtype and shape.
  EXPECT_THAT(CliErrorOf(bad.err),
              AllOf(HasReason(ErrorReason::kConventionMismatch),
                    MessageNames("'l.scales'"), MessageNames("F16[3,64]")));
  CommandResult good = RunCommand({CliPath(), "--server", s.address(), "ls",
                                   Fixture("safetensors/gptq_4bit_g32")});
  EXPECT_EQ(good.exit_code, 0) << good.err;
}

}  // namespace
}  // namespace tensormorph
