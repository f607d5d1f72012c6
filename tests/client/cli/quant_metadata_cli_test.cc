// Metadata that tells the truth, through the CLI, remote and embedded:
// `symmetric` means no offset or zero-point term, per ggml type and
// convention; and one group id serves every view: the count stats gives,
// the ids of heatmap's group mode, the inspector's group, and the diff's
// worst groups and per-element groups.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/process.h"
#include "tests/support/symmetric_cases.h"
#include "tests/support/test_paths.h"

namespace tensormorph::quant_metadata_cli_test {
namespace {

using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::FixturesDir;
using ::testing::HasSubstr;

CliModes* cli = nullptr;

// proto3 JSON writes int64 as a string.
int64_t Int(const nlohmann::json& j) {
  return j.is_string() ? std::stoll(j.get<std::string>()) : j.get<int64_t>();
}

class CliModesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cli = new CliModes({FixturesDir()}); }
  static void TearDownTestSuite() {
    delete cli;
    cli = nullptr;
  }
};

// ---- symmetric ------------------------------------------------------------

using ::tensormorph::testing::kSymmetricCases;
using ::tensormorph::testing::SymmetricCase;

class SymmetricCliTest : public CliModesTest,
                         public ::testing::WithParamInterface<bool> {};

TEST_P(SymmetricCliTest, InfoSaysSymmetricExactlyWithoutOffsetOrZeroPoint) {
  for (const SymmetricCase& c : kSymmetricCases) {
    SCOPED_TRACE(c.path);
    CommandResult json =
        cli->Run(GetParam(), {"info", Fixture(c.path), c.tensor, "--json"});
    ASSERT_EQ(json.exit_code, 0) << json.err;
    const auto t = nlohmann::json::parse(json.out);
    EXPECT_EQ(t["encoding"].value("symmetric", false), c.symmetric);
    CommandResult text =
        cli->Run(GetParam(), {"info", Fixture(c.path), c.tensor});
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_THAT(text.out, HasSubstr(c.symmetric ? "symmetric    yes"
                                                : "symmetric    no"));
  }
}

INSTANTIATE_TEST_SUITE_P(BothModes, SymmetricCliTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Remote" : "Embedded";
                         });

// ---- group ids ------------------------------------------------------------

struct GroupCase {
  const char* label;
  const char* quant;      // under the fixtures directory
  const char* reference;  // its source
  const char* tensor;
  int64_t groups;
};
const GroupCase kGroupCases[] = {
    {"Q4_K", "gguf/Q4_K.gguf", "gguf/source_f32.gguf", "blk.0.attn_q.weight",
     32},
    {"Q5_K", "gguf/Q5_K.gguf", "gguf/source_f32.gguf", "blk.0.attn_q.weight",
     32},
    {"IQ4_XS", "gguf/IQ4_XS.gguf", "gguf/source_f32.gguf",
     "blk.0.attn_q.weight", 32},
    {"Q4_0", "gguf/Q4_0.gguf", "gguf/source_f32.gguf", "blk.0.attn_q.weight",
     32},
    {"Q6_K", "gguf/Q6_K.gguf", "gguf/source_f32.gguf", "blk.0.ffn_down.weight",
     64},
    {"gptq", "safetensors/gptq_4bit_g32", "safetensors/gptq_4bit_g32/source",
     "model.layers.0.mlp.down_proj.weight", 96 * 2},
    {"per_channel", "safetensors/ct_int8_channel",
     "safetensors/ct_int8_channel/source",
     "model.layers.0.mlp.down_proj.weight", 48},
};

class GroupIdCliTest
    : public CliModesTest,
      public ::testing::WithParamInterface<std::tuple<GroupCase, bool>> {
 protected:
  CommandResult Run(std::vector<std::string> args) {
    return cli->Run(std::get<1>(GetParam()), std::move(args));
  }
};

TEST_P(GroupIdCliTest, StatsHeatmapScalarAndDiffShareOneGroupId) {
  const GroupCase& c = std::get<0>(GetParam());
  const std::string quant = Fixture(c.quant);

  // stats: how many groups.
  CommandResult stats = Run({"--json", "stats", quant, c.tensor});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  const int64_t groups = Int(nlohmann::json::parse(stats.out)["groups"]);
  EXPECT_EQ(groups, c.groups);

  // heatmap --mode group at full resolution: one cell per element, and
  // every id 0..groups-1 present.
  CommandResult info = Run({"--json", "info", quant, c.tensor});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  const auto shape = nlohmann::json::parse(info.out)["shape"];
  ASSERT_EQ(shape.size(), 2u);
  const int64_t rows = Int(shape[0]), cols = Int(shape[1]);
  CommandResult heat =
      Run({"--json", "heatmap", quant, c.tensor, "--mode", "group", "--size",
           std::to_string(cols) + "x" + std::to_string(rows)});
  ASSERT_EQ(heat.exit_code, 0) << heat.err;
  const auto h = nlohmann::json::parse(heat.out);
  ASSERT_EQ(Int(h["width"]), cols);
  ASSERT_EQ(Int(h["height"]), rows);
  std::vector<int64_t> cell_group;
  for (const auto& g : h["groups"]) cell_group.push_back(Int(g));
  ASSERT_EQ(static_cast<int64_t>(cell_group.size()), rows * cols);
  const std::set<int64_t> ids(cell_group.begin(), cell_group.end());
  EXPECT_EQ(static_cast<int64_t>(ids.size()), groups);
  EXPECT_EQ(*ids.begin(), 0);
  EXPECT_EQ(*ids.rbegin(), groups - 1);

  // diff: every element among the worst, so that each worst group's count
  // and max can be recomputed from the elements' own group ids.
  CommandResult diff =
      Run({"--json", "diff", quant, Fixture(c.reference), "--filter", c.tensor,
           "--top", std::to_string(rows * cols)});
  ASSERT_EQ(diff.exit_code, 0) << diff.err;
  nlohmann::json report;
  std::istringstream lines(diff.out);
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("tensor")) report = j["tensor"];
  }
  ASSERT_TRUE(report.is_object()) << diff.out;
  ASSERT_EQ(static_cast<int64_t>(report["worst"].size()), rows * cols);
  std::map<int64_t, std::pair<int64_t, double>> by_group;  // count, max
  std::map<int64_t, std::vector<int64_t>> worst_of_group;  // its worst index
  for (const auto& e : report["worst"]) {
    const int64_t g = Int(e["quant"]["group"]);
    const int64_t r = Int(e["index"][0]), col = Int(e["index"][1]);
    // The diff's per-element group is the heatmap's.
    ASSERT_EQ(g, cell_group[r * cols + col]) << "[" << r << "," << col << "]";
    auto& [count, max] = by_group[g];
    if (count == 0 || e["errSteps"].get<double>() > max) {
      worst_of_group[g] = {r, col};
    }
    ++count;
    max = std::max(max, e["errSteps"].get<double>());
  }
  EXPECT_EQ(static_cast<int64_t>(by_group.size()), groups);
  ASSERT_FALSE(report["worstGroups"].empty());
  for (const auto& w : report["worstGroups"]) {
    const int64_t g = Int(w["group"]);
    SCOPED_TRACE("worst group " + std::to_string(g));
    ASSERT_TRUE(by_group.count(g));
    EXPECT_EQ(Int(w["count"]), by_group[g].first);
    // The group's max is kept in float: equal to float precision.
    EXPECT_NEAR(w["maxErrSteps"].get<double>(), by_group[g].second, 1e-6);
    // The scalar inspector on the group's worst element names the group.
    const auto& at = worst_of_group[g];
    CommandResult sc =
        Run({"--json", "scalar", quant, c.tensor,
             std::to_string(at[0]) + "," + std::to_string(at[1])});
    ASSERT_EQ(sc.exit_code, 0) << sc.err;
    EXPECT_EQ(Int(nlohmann::json::parse(sc.out)["scalars"][0]["group"]), g);
  }
  // The diff table's GROUP column is the same id.
  CommandResult table = Run({"diff", quant, Fixture(c.reference), "--filter",
                             c.tensor, "--top", "1"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  const auto& top = report["worst"][0];
  EXPECT_THAT(table.out,
              HasSubstr(std::to_string(Int(top["quant"]["group"])) + "\n"));
}

INSTANTIATE_TEST_SUITE_P(TypesAndConventionsBothModes, GroupIdCliTest,
                         ::testing::Combine(::testing::ValuesIn(kGroupCases),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).label) +
                                  (std::get<1>(info.param) ? "_Remote"
                                                           : "_Embedded");
                         });

}  // namespace
}  // namespace tensormorph::quant_metadata_cli_test
