// CheckCheckpoint, rule by rule: each checkpoint of tests/support/
// check_cases breaks one rule and must yield exactly that finding (and the
// rules the same break necessarily fires); clean checkpoints, the golden
// fixtures and the demo yield no errors.
#include "core/check/check.h"

#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "core/check/rules.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/check_cases.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/fixture_copy.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;
using ::testing::UnorderedElementsAreArray;
namespace fs = std::filesystem;

struct CheckRun {
  std::vector<Finding> findings;
  CheckSummary summary;
};

CheckRun CheckPath(const std::string& path, CheckOptions options = {}) {
  auto ckpt = Checkpoint::Open(path);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  CheckRun run;
  if (!ckpt.ok()) return run;
  auto summary =
      CheckCheckpoint(**ckpt, options, nullptr, nullptr,
                      [&](const Finding& f) { run.findings.push_back(f); });
  EXPECT_TRUE(summary.ok()) << summary.status();
  if (summary.ok()) run.summary = *summary;
  return run;
}

std::set<std::string> Rules(const CheckRun& run) {
  std::set<std::string> rules;
  for (const Finding& f : run.findings) rules.insert(f.rule);
  return rules;
}

TEST(CheckRulesTest, EveryRuleHasAStableIdAndSaysWhatItCatches) {
  std::set<absl::string_view> ids;
  for (const CheckRule& r : CheckRules()) {
    EXPECT_TRUE(ids.insert(r.id).second) << r.id;
    for (char c : r.id) {
      EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')
          << r.id << " is not kebab-case";
    }
    EXPECT_FALSE(r.brief.empty()) << r.id;
    EXPECT_FALSE(r.catches.empty()) << r.id;
  }
  // Every rule a test case breaks is registered, and every registered rule
  // has a case (manifest-mismatch has its own tests below).
  std::set<std::string> broken = {"manifest-mismatch"};
  for (const auto& c : testing::CheckCases()) broken.insert(c.rule);
  for (const CheckRule& r : CheckRules()) {
    EXPECT_TRUE(broken.contains(std::string(r.id))) << r.id << " has no case";
  }
}

TEST(CheckCheckpointTest, ACleanCheckpointHasNoFindings) {
  CheckRun run = CheckPath(testing::WriteCleanCheckCheckpoint());
  EXPECT_TRUE(run.findings.empty())
      << run.findings[0].rule << ": " << run.findings[0].actual;
  EXPECT_FALSE(run.summary.failed);
  EXPECT_EQ(run.summary.tensors_checked, 2);
  EXPECT_EQ(run.summary.stored_tensors, 3);
}

TEST(CheckCheckpointTest, EachBrokenRuleYieldsItsFindingAndNoOther) {
  for (const testing::CheckCase& c : testing::CheckCases()) {
    SCOPED_TRACE(c.rule);
    CheckRun run = CheckPath(c.dir);
    std::set<std::string> want(c.also.begin(), c.also.end());
    want.insert(c.rule);
    EXPECT_EQ(Rules(run), want);
    bool found = false;
    for (const Finding& f : run.findings) {
      if (f.rule != c.rule || f.tensor != c.tensor) continue;
      found = true;
      EXPECT_EQ(SeverityName(f.severity), c.severity);
      EXPECT_THAT(f.actual + " | " + f.expected, HasSubstr(c.says));
      EXPECT_FALSE(f.expected.empty());
      EXPECT_FALSE(f.hint.empty());
      EXPECT_GE(f.count, 1);
    }
    EXPECT_TRUE(found) << "no " << c.rule << " finding naming '" << c.tensor
                       << "'";
    // The default fail level is error.
    EXPECT_EQ(run.summary.failed, c.severity == "error");
  }
}

TEST(CheckCheckpointTest, FailLevelDecidesWhatFails) {
  for (const testing::CheckCase& c : testing::CheckCases()) {
    if (c.rule != "duplicate-tensor") continue;
    CheckOptions o;
    EXPECT_FALSE(CheckPath(c.dir, o).summary.failed);
    o.fail_level = Severity::kWarning;
    EXPECT_FALSE(CheckPath(c.dir, o).summary.failed);
    o.fail_level = Severity::kInfo;
    CheckRun run = CheckPath(c.dir, o);
    EXPECT_TRUE(run.summary.failed);
    EXPECT_EQ(run.summary.infos, 1);
    ASSERT_EQ(run.summary.rules.size(), 1u);
    EXPECT_EQ(run.summary.rules[0].rule, "duplicate-tensor");
    EXPECT_EQ(run.summary.rules[0].worst_tensor, "a");
  }
}

TEST(CheckCheckpointTest, AnFp16SaturatedScaleIsFoundOnTheScaleAndTheValues) {
  for (const testing::CheckCase& c : testing::CheckCases()) {
    if (c.rule != "fp16-saturated-scale") continue;
    CheckRun run = CheckPath(c.dir);
    ASSERT_EQ(run.findings.size(), 2u);
    std::set<std::string> where = {run.findings[0].tensor,
                                   run.findings[1].tensor};
    EXPECT_EQ(where, (std::set<std::string>{testing::kCheckScale,
                                            testing::kCheckWeight}));
    for (const Finding& f : run.findings) {
      EXPECT_THAT(f.actual, HasSubstr(f.tensor == testing::kCheckScale
                                          ? "saturated"
                                          : "would overflow fp16"));
    }
  }
}

TEST(CheckCheckpointTest, GptqZerosStoredV2UnderAV1ConfigAreFoundToo) {
  // The reverse of the case: v2's 8 under checkpoint_format "gptq".
  const std::string dir = testing::MakeTempDir();
  for (const testing::CheckCase& c : testing::CheckCases()) {
    if (c.rule != "gptq-zero-convention") continue;
    for (const auto& e : fs::directory_iterator(c.dir)) {
      fs::copy(e.path(), dir + "/" + e.path().filename().string());
    }
  }
  // Rewrite the zeros as v2 stores a symmetric 4-bit zero, and the config
  // as v1.
  std::string st = testing::ReadFileBytes(dir + "/model.safetensors");
  for (size_t at = 0;
       (at = st.find("\x77\x77\x77\x77", at)) != std::string::npos; at += 4) {
    st.replace(at, 4, "\x88\x88\x88\x88");
  }
  testing::WriteFile(dir + "/model.safetensors", st);
  for (const char* name : {"config.json", "quantize_config.json"}) {
    std::string text = testing::ReadFileBytes(dir + "/" + name);
    const size_t at = text.find("\"gptq_v2\"");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 9, "\"gptq\"");
    testing::WriteFile(dir + "/" + name, text);
  }
  CheckRun run = CheckPath(dir);
  ASSERT_EQ(Rules(run), std::set<std::string>{"gptq-zero-convention"});
  EXPECT_THAT(run.findings[0].actual,
              HasSubstr("every qzeros code is 8, as v2 stores it"));
  EXPECT_THAT(run.findings[0].expected,
              HasSubstr("checkpoint_format \"gptq\""));
}

TEST(CheckCheckpointTest, GroupsOfFloatCodesAreJudgedToo) {
  // FP8 codes are not evenly spaced: their groups come from GroupIds in
  // bulk, not from DecodeRuns. Zero the first 128x128 block of the
  // fixture's [200, 300] weight: block (0, 0), group 0, decodes to zeros.
  const std::string dir = testing::MakeTempDir();
  testing::CopyFixtureInto("fp8_block_sharded", dir);
  testing::EditSafetensors(
      dir + "/model-00001-of-00002.safetensors",
      [](std::vector<testing::StTensor>& ts) {
        for (testing::StTensor& t : ts) {
          if (t.name != "model.layers.0.mlp.down_proj.weight") continue;
          for (int r = 0; r < 128; ++r) {
            std::fill_n(t.data.begin() + r * 300, 128, '\0');
          }
        }
      });
  CheckRun run = CheckPath(dir);
  ASSERT_EQ(Rules(run), std::set<std::string>{"all-zero-group"});
  EXPECT_EQ(run.findings[0].tensor, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(run.findings[0].worst_group, 0);
  EXPECT_THAT(run.findings[0].actual, HasSubstr("1 of 6 groups"));
}

TEST(CheckCheckpointTest, EveryGoldenFixtureChecksWithoutErrors) {
  std::vector<std::string> paths;
  for (const char* kind : {"gguf", "safetensors"}) {
    for (const auto& e : fs::directory_iterator(testing::Fixture(kind))) {
      const std::string p = e.path().string();
      if (e.is_directory() || p.ends_with(".gguf")) paths.push_back(p);
    }
  }
  ASSERT_GE(paths.size(), 30u);
  for (const std::string& p : paths) {
    SCOPED_TRACE(p);
    CheckRun run = CheckPath(p);
    for (const Finding& f : run.findings) {
      if (f.severity != Severity::kError) continue;
      // `plain` stores F16 specials on purpose: its NaN and Infs are
      // reported, and nothing else is an error anywhere.
      EXPECT_TRUE(p.ends_with("/plain") && f.tensor == "f16_special" &&
                  (f.rule == "nan-value" || f.rule == "inf-value"))
          << f.rule << " " << f.tensor << ": " << f.actual;
    }
  }
}

TEST(CheckCheckpointTest, TheDemoChecksWithoutErrors) {
  for (const auto& e : fs::directory_iterator(testing::DemoDir())) {
    SCOPED_TRACE(e.path().string());
    CheckRun run = CheckPath(e.path().string());
    EXPECT_EQ(run.summary.errors, 0);
    EXPECT_FALSE(run.summary.failed);
    EXPECT_GT(run.summary.tensors_checked, 0);
  }
}

TEST(CheckCheckpointTest, ProgressReachesTheTotalAndCancellationStops) {
  auto ckpt = Checkpoint::Open(testing::DemoDir() + "/model-q4_k_m.gguf");
  ASSERT_TRUE(ckpt.ok());
  CheckProgress last;
  auto summary = CheckCheckpoint(
      **ckpt, {}, nullptr, [&](const CheckProgress& p) { last = p; }, nullptr);
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ(last.bytes_done, last.bytes_total);
  EXPECT_EQ(last.tensors_done, last.tensors_total);
  EXPECT_EQ(summary->bytes_read, last.bytes_total);

  std::atomic<bool> cancelled{true};
  EXPECT_THAT(CheckCheckpoint(**ckpt, {}, &cancelled, nullptr, nullptr),
              StatusIs(absl::StatusCode::kCancelled, "cancelled"));
}

TEST(CheckCheckpointTest, ASmallPieceSizeFindsTheSameGroups) {
  // Pieces of one row: groups are judged as each piece passes them.
  for (const testing::CheckCase& c : testing::CheckCases()) {
    if (c.rule != "constant-group" && c.rule != "all-zero-group") continue;
    CheckOptions o;
    o.values.piece_elements = 64;
    CheckRun run = CheckPath(c.dir, o);
    ASSERT_EQ(run.findings.size(), 1u) << c.rule;
    EXPECT_THAT(run.findings[0].actual, HasSubstr(c.says));
  }
}

}  // namespace
}  // namespace tensormorph
