// The CLI on HQQ checkpoints written by tests/python/writers/hqq.py, through
// a live server and embedded: ls lists one logical tensor per HQQ layer (its
// metadata tensors folded in), read gives the writer's reference bits,
// scalar shows the code, scale and zero beside the value.
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

namespace tensormorph::hqq_cli_test {
namespace {

using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::ReadNpy;

std::string* root = nullptr;
CliModes* cli = nullptr;

class HqqCliTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    root = new std::string(testing::WriterOutput("hqq.py"));
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

TEST_P(HqqCliTest, LsReadAndScalarOfAMixedBitModel) {
  const std::string dir = *root + "/hqq_mixed_bits";
  CommandResult ls = Run({"ls", dir, "--json"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  std::map<std::string, nlohmann::json> listed;
  std::istringstream lines(ls.out);
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);
    listed[j["name"]] = j;
  }
  // Four layers and lm_head: the metadata tensors are parts, not listed.
  EXPECT_EQ(listed.size(), 5u) << ls.out;
  const std::string down = "model.layers.0.mlp.down_proj.weight";
  ASSERT_TRUE(listed.count(down)) << ls.out;
  EXPECT_EQ(listed[down]["encoding"]["convention"], "hqq");
  EXPECT_EQ(listed[down]["encoding"]["granularity"], "group 64 along in");

  const std::vector<float> want =
      ReadNpy(dir + "/ref/" + down + ".npy").floats();
  const std::string out = MakeTempDir() + "/t.npy";
  CommandResult read = Run({"read", dir, down, "-o", out});
  ASSERT_EQ(read.exit_code, 0) << read.err;
  EXPECT_EQ(ReadNpy(out).floats(), want);

  CommandResult sc = Run({"scalar", dir, down, "1,2", "--json"});
  ASSERT_EQ(sc.exit_code, 0) << sc.err;
  const auto s = nlohmann::json::parse(sc.out)["scalars"][0];
  EXPECT_EQ(s["value"].get<float>(), want[128 + 2]);
  EXPECT_TRUE(s.contains("scale") && s.contains("zeroPoint") &&
              s.contains("rawCode"));
}

INSTANTIATE_TEST_SUITE_P(BothModes, HqqCliTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Remote" : "Embedded";
                         });

}  // namespace
}  // namespace tensormorph::hqq_cli_test
