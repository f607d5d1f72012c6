// CheckCheckpoint, rule by rule: each checkpoint of tests/support/
// check_cases breaks one rule and must yield exactly that finding (and the
// rules the same break necessarily fires); clean checkpoints, the golden
// fixtures and the demo yield no errors.
#include "core/check/check.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/check/rules.h"
#include "core/check/structure_rules.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/check_cases.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/fixture_copy.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::testing::AllOf;
using testing::HasMetadata;
using testing::HasReason;
using ::testing::HasSubstr;
using testing::MessageNames;
using testing::StatusIs;
using ::testing::UnorderedElementsAreArray;
namespace fs = std::filesystem;

struct CheckRun {
  std::vector<Finding> findings;
  CheckSummary summary;
};

// Opened as `check` opens it: leniently, what a strict open refuses being
// findings.
CheckRun CheckPath(const std::string& path, CheckOptions options = {}) {
  auto ckpt = Checkpoint::Open(path, {.lenient = true});
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
    std::shared_ptr<const Checkpoint> source;
    CheckOptions options;
    if (!c.source.empty()) {
      auto opened = Checkpoint::Open(c.source);
      ASSERT_TRUE(opened.ok()) << opened.status();
      source = *opened;
      options.source = source.get();
    }
    CheckRun run = CheckPath(c.dir, options);
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

TEST(CheckCheckpointTest,
     WhatAStrictOpenRefusesOpensLenientlyAndLsStillRefuses) {
  // The cases ls refuses: a strict open still does, at the first rule, and
  // a lenient one reports it as the case's finding.
  const std::set<std::string> refused = {
      "shard-missing",    "shard-corrupt",        "index-corrupt",
      "duplicate-name",   "index-tensor-missing", "shard-tensor-unindexed",
      "orphan-companion", "companion-shape",      "fp8-scale-layout",
      "config-key",       "unresolved-tensor"};
  int seen = 0;
  for (const testing::CheckCase& c : testing::CheckCases()) {
    if (!refused.contains(c.rule)) continue;
    SCOPED_TRACE(c.rule);
    ++seen;
    EXPECT_THAT(Checkpoint::Open(c.dir),
                StatusIs(absl::StatusCode::kDataLoss, ""));
    auto lenient = Checkpoint::Open(c.dir, {.lenient = true});
    ASSERT_TRUE(lenient.ok()) << lenient.status();
    EXPECT_FALSE((*lenient)->problems().empty());
  }
  EXPECT_EQ(seen, static_cast<int>(refused.size()));
}

TEST(CheckCheckpointTest, EveryConfigKeyProblemIsAFindingNamingItsKey) {
  // A GPTQ config with three bad keys: each is reported, with its path and
  // expected vs actual, and the check goes on with the defaults (4 bits,
  // group 128; the fixture's scales are of groups of 32, so that is a
  // companion-shape finding of its own).
  const std::string dir = testing::MakeTempDir();
  testing::CopyFixtureInto("gptq_4bit_g32", dir);
  for (const char* name : {"config.json", "quantize_config.json"}) {
    nlohmann::json j = testing::ReadJson(dir + "/" + name);
    nlohmann::json& q =
        j.contains("quantization_config") ? j["quantization_config"] : j;
    q["bits"] = "four";
    q["group_size"] = 32.0;
    q["desc_act"] = "no";
    testing::WriteJson(dir + "/" + name, j);
  }
  CheckRun run = CheckPath(dir);
  std::set<std::string> keys;
  for (const Finding& f : run.findings) {
    if (f.rule != "config-key") continue;
    EXPECT_EQ(f.severity, Severity::kError);
    EXPECT_THAT(f.file, HasSubstr("config.json"));
    keys.insert(f.expected.substr(0, f.expected.find(':')));
    if (absl::StrContains(f.expected, ".bits")) {
      EXPECT_EQ(f.actual, "string \"four\"");
      EXPECT_THAT(f.expected, HasSubstr("an integer in [1, 32]"));
    }
    if (absl::StrContains(f.expected, ".group_size")) {
      EXPECT_EQ(f.actual, "number 32.0");
    }
  }
  EXPECT_EQ(keys, (std::set<std::string>{"quantization_config.bits",
                                         "quantization_config.group_size",
                                         "quantization_config.desc_act"}));
  EXPECT_TRUE(Rules(run).contains("companion-shape"));
  EXPECT_TRUE(run.summary.failed);
}

TEST(CheckCheckpointTest, ANameStoredTwiceKeepsOneCopyAndEveryOtherNameFound) {
  // Short names (held inside their strings) after the dropped copy: each
  // is still found by name, and hashing every tensor reaches each.
  const std::string dir = testing::MakeTempDir();
  // Distinct values, so that no two tensors are duplicates by content.
  std::vector<float> v(64, 0.25f), v2(64, 0.5f), v3(64, 0.75f);
  testing::WriteFile(
      dir + "/a.safetensors",
      testing::BuildSafetensors({{"w", "F32", {2, 32}, testing::Bytes(v)}}));
  testing::WriteFile(
      dir + "/b.safetensors",
      testing::BuildSafetensors({{"w", "F32", {2, 32}, testing::Bytes(v)},
                                 {"x", "F32", {2, 32}, testing::Bytes(v2)},
                                 {"y", "F32", {2, 32}, testing::Bytes(v3)}}));
  auto ckpt = Checkpoint::Open(dir, {.lenient = true});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ASSERT_EQ((*ckpt)->stored_tensors().size(), 3u);
  for (const char* name : {"w", "x", "y"}) {
    const StoredTensor* t = (*ckpt)->FindStored(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->name, name);
  }
  EXPECT_EQ((*ckpt)->files()[(*ckpt)->FindStored("w")->file_index].path,
            dir + "/a.safetensors");
  CheckRun run = CheckPath(dir, {.hashes = true});
  EXPECT_EQ(Rules(run), (std::set<std::string>{"duplicate-name"}));
  EXPECT_EQ(run.summary.stored_tensors, 3);
}

TEST(CheckCheckpointTest, OfANameStoredTwiceTheCopyTheIndexPlacesIsChecked) {
  // The index places `w` in the second shard (the first holds a stale copy
  // beside `v`), whose copy holds a NaN: that copy is the one loaders take,
  // so it is the one checked.
  const std::string dir = testing::MakeTempDir();
  std::vector<float> clean(64, 0.25f), other(64, 0.5f), third(64, 0.75f);
  std::vector<float> nan = clean;
  nan[3] = std::numeric_limits<float>::quiet_NaN();
  testing::WriteFile(dir + "/s1.safetensors",
                     testing::BuildSafetensors(
                         {{"v", "F32", {2, 32}, testing::Bytes(other)},
                          {"w", "F32", {2, 32}, testing::Bytes(clean)}}));
  testing::WriteFile(dir + "/s2.safetensors",
                     testing::BuildSafetensors(
                         {{"w", "F32", {2, 32}, testing::Bytes(nan)},
                          {"u", "F32", {2, 32}, testing::Bytes(third)}}));
  testing::WriteJson(dir + "/model.safetensors.index.json",
                     {{"weight_map",
                       {{"v", "s1.safetensors"},
                        {"w", "s2.safetensors"},
                        {"u", "s2.safetensors"}}}});
  CheckRun run = CheckPath(dir);
  EXPECT_EQ(Rules(run),
            (std::set<std::string>{"duplicate-name", "shard-tensor-unindexed",
                                   "nan-stored-value"}));
  for (const Finding& f : run.findings) {
    if (f.rule == "duplicate-name") {
      EXPECT_THAT(f.expected, HasSubstr("s2.safetensors"));
      EXPECT_EQ(f.file, dir + "/s1.safetensors");
    }
  }
}

TEST(CheckCheckpointTest, NamesThatAreNoRegularFileAreFindings) {
  // A dangling index (a Hugging Face cache whose blob is gone) and a shard
  // that is a symlink loop: reported, never opened; the good shard checked.
  const std::string dir = testing::MakeTempDir();
  std::vector<float> v(64, 0.25f);
  testing::WriteFile(
      dir + "/a.safetensors",
      testing::BuildSafetensors({{"w", "F32", {2, 32}, testing::Bytes(v)}}));
  std::filesystem::create_symlink("/nonexistent/blob",
                                  dir + "/model.safetensors.index.json");
  std::filesystem::create_symlink(dir + "/loop.safetensors",
                                  dir + "/loop.safetensors");
  CheckRun run = CheckPath(dir);
  EXPECT_EQ(Rules(run),
            (std::set<std::string>{"index-corrupt", "shard-corrupt"}));
  for (const Finding& f : run.findings) {
    EXPECT_THAT(f.actual, HasSubstr("not a regular file")) << f.rule;
  }
  EXPECT_EQ(run.summary.tensors_checked, 1);
  // Nothing readable past an unusable index: the refusal names both.
  const std::string bare = testing::MakeTempDir();
  testing::WriteJson(bare + "/model.safetensors.index.json", {1, 2});
  testing::WriteFile(bare + "/a.safetensors", "not safetensors");
  auto opened = Checkpoint::Open(bare, {.lenient = true});
  // The shard's reason: the error that ended the open.
  EXPECT_THAT(opened, AllOf(HasReason(ErrorReason::kHeaderInvalid),
                            MessageNames("'weight_map'"),
                            MessageNames("a.safetensors")));
}

TEST(CheckCheckpointTest, HostileIndexesAndConfigsArePreciseErrorsOrFindings) {
  auto sharded = [] {
    const std::string dir = testing::MakeTempDir();
    testing::CopyFixtureInto("fp8_block_sharded", dir);
    return dir;
  };
  const std::string index = "/model.safetensors.index.json";
  {
    // A truncated index: not JSON. A strict open refuses it naming the
    // file; a check reports it and checks the shards the directory holds.
    const std::string dir = sharded();
    const std::string text = testing::ReadFileBytes(dir + index);
    testing::WriteFile(dir + index, text.substr(0, text.size() / 2));
    EXPECT_THAT(
        Checkpoint::Open(dir),
        AllOf(HasReason(ErrorReason::kIndexInvalid),
              HasMetadata("file", dir + index), HasMetadata("rule", "json")));
    CheckRun run = CheckPath(dir);
    ASSERT_TRUE(Rules(run).contains("index-corrupt"));
    for (const Finding& f : run.findings) {
      if (f.rule != "index-corrupt") continue;
      EXPECT_EQ(f.file, dir + index);
      EXPECT_THAT(f.actual, HasSubstr("model.safetensors.index.json"));
      EXPECT_THAT(f.actual, HasSubstr("files were checked instead"));
    }
    EXPECT_GT(run.summary.tensors_checked, 0);
  }
  {
    // An index naming a shard outside its directory: refused by a strict
    // open, set aside by a check (the named file is never opened).
    const std::string dir = sharded();
    nlohmann::json j = testing::ReadJson(dir + index);
    j["weight_map"]["model.norm.weight"] = "../../etc/passwd";
    testing::WriteJson(dir + index, j);
    EXPECT_THAT(Checkpoint::Open(dir),
                AllOf(HasReason(ErrorReason::kIndexInvalid),
                      MessageNames("../../etc/passwd")));
    auto lenient = Checkpoint::Open(dir, {.lenient = true});
    ASSERT_TRUE(lenient.ok()) << lenient.status();
    ASSERT_FALSE((*lenient)->problems().empty());
    EXPECT_EQ((*lenient)->problems()[0].rule, "index-corrupt");
    EXPECT_THAT((*lenient)->problems()[0].actual,
                HasSubstr("is not a plain file name in the index's directory"));
    for (const Checkpoint::File& f : (*lenient)->files()) {
      EXPECT_EQ(f.path.rfind(dir, 0), 0u) << f.path;
    }
  }
  {
    // A directory whose every shard is corrupt: nothing left to check, so
    // even a lenient open fails, naming the first.
    const std::string dir = testing::MakeTempDir();
    testing::WriteFile(dir + "/a.safetensors", "not a safetensors file");
    testing::WriteFile(dir + "/b.safetensors", std::string(3, '\0'));
    EXPECT_THAT(Checkpoint::Open(dir, {.lenient = true}),
                AllOf(HasReason(ErrorReason::kHeaderInvalid),
                      MessageNames("a.safetensors")));
  }
  {
    // A config that is not JSON, and one whose quantization_config is a
    // string: findings, and the tensors still checked.
    const std::string dir = testing::WriteCleanCheckCheckpoint();
    testing::WriteFile(dir + "/config.json", "{\"quantization_config\": ");
    CheckRun run = CheckPath(dir);
    ASSERT_EQ(Rules(run), std::set<std::string>{"config-key"});
    EXPECT_THAT(run.findings[0].expected,
                HasSubstr("(the whole file): a JSON document"));
    testing::WriteFile(dir + "/config.json",
                       R"({"quantization_config": "fp8"})");
    run = CheckPath(dir);
    ASSERT_EQ(Rules(run), std::set<std::string>{"config-key"});
    EXPECT_EQ(run.findings[0].expected, "quantization_config: an object");
    EXPECT_EQ(run.findings[0].actual, "string \"fp8\"");
    EXPECT_EQ(run.summary.tensors_checked, 3);
  }
  {
    // Wrong types everywhere in a compressed-tensors config: one finding
    // per key, no crash.
    const std::string dir = testing::WriteCleanCheckCheckpoint();
    nlohmann::json j = testing::ReadJson(dir + "/config.json");
    nlohmann::json& q = j["quantization_config"];
    q["format"] = 7;
    q["ignore"] = "lm_head";
    q["config_groups"]["group_0"]["targets"] = {1, "Linear"};
    q["config_groups"]["group_0"]["weights"]["strategy"] = false;
    q["config_groups"]["group_0"]["weights"]["block_structure"] = {-1, "a"};
    testing::WriteJson(dir + "/config.json", j);
    CheckRun run = CheckPath(dir);
    int keys = 0;
    for (const Finding& f : run.findings) keys += f.rule == "config-key";
    EXPECT_EQ(keys, 5);
  }
}

TEST(CheckCheckpointTest, CorruptFilesAreFindingsWhateverElseOpens) {
  // One rule, with or without an index, for scripts reading the exit code:
  // while one .safetensors file opens, each corrupt file is a
  // shard-corrupt finding (exit 3) and the others are checked; a
  // checkpoint none of whose files opens fails its open, naming the first
  // corrupt file and the rule it broke (DATA_LOSS HEADER_INVALID), and
  // CheckUnopened makes that the one shard-corrupt finding (exit 3 too).
  auto cut = [](const std::string& path) {
    const std::string bytes = testing::ReadFileBytes(path);
    testing::WriteFile(path, bytes.substr(0, bytes.size() - 4));
  };
  const std::string kFirst = "/model-00001-of-00002.safetensors";
  const std::string kSecond = "/model-00002-of-00002.safetensors";
  {
    // A single-file checkpoint whose file is cut short.
    const std::string dir = testing::MakeTempDir();
    testing::CopyFixtureInto("gptq_4bit_g32", dir);
    cut(dir + "/model.safetensors");
    const auto opened = Checkpoint::Open(dir, {.lenient = true});
    EXPECT_THAT(opened, AllOf(StatusIs(absl::StatusCode::kDataLoss, ""),
                              HasReason(ErrorReason::kHeaderInvalid),
                              MessageNames(dir + "/model.safetensors")));
    std::vector<Finding> found;
    CheckOptions options;
    auto unopened =
        CheckUnopened(dir, opened.status(), options,
                      [&](const Finding& f) { found.push_back(f); });
    ASSERT_TRUE(unopened.ok()) << unopened.status();
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].rule, "shard-corrupt");
    EXPECT_EQ(found[0].severity, Severity::kError);
    EXPECT_EQ(found[0].file, dir + "/model.safetensors");
    EXPECT_EQ(found[0].actual, opened.status().message());
    EXPECT_EQ(unopened->errors, 1);
    EXPECT_TRUE(unopened->failed);
    ASSERT_EQ(unopened->rules.size(), 1u);
    EXPECT_EQ(unopened->rules[0].worst_tensor, "");
    // An error finding fails the check at every fail level.
    options.fail_level = Severity::kError;
    EXPECT_TRUE(CheckUnopened(dir, opened.status(), options, nullptr)->failed);
  }
  {
    // What is not about a file's bytes is the error itself: nothing was
    // checked, and nothing is reported.
    bool reported = false;
    const absl::Status missing =
        WithReason(absl::NotFoundError("no such checkpoint"),
                   ErrorReason::kCheckpointNotFound);
    EXPECT_EQ(CheckUnopened("x", missing, {},
                            [&](const Finding&) { reported = true; })
                  .status(),
              missing);
    EXPECT_FALSE(reported);
  }
  {
    // A sharded one whose every shard is cut short: its index opens, yet
    // there is nothing to check either.
    const std::string dir = testing::MakeTempDir();
    testing::CopyFixtureInto("fp8_block_sharded", dir);
    cut(dir + kFirst);
    cut(dir + kSecond);
    EXPECT_THAT(Checkpoint::Open(dir, {.lenient = true}),
                AllOf(StatusIs(absl::StatusCode::kDataLoss, ""),
                      HasReason(ErrorReason::kHeaderInvalid),
                      MessageNames("no shard its weight_map names opens"),
                      MessageNames(dir + kFirst)));
  }
  {
    // The same with the second shard whole: a finding on the first (which
    // holds down_proj's weight), and the second's o_proj and norm checked.
    const std::string dir = testing::MakeTempDir();
    testing::CopyFixtureInto("fp8_block_sharded", dir);
    cut(dir + kFirst);
    CheckRun run = CheckPath(dir);
    EXPECT_EQ(Rules(run), std::set<std::string>{"shard-corrupt"});
    ASSERT_EQ(run.findings.size(), 1u);
    EXPECT_EQ(run.findings[0].tensor, "model.layers.0.mlp.down_proj.weight");
    EXPECT_EQ(run.findings[0].file, dir + kFirst);
    EXPECT_THAT(run.findings[0].actual,
                HasSubstr("data bytes after the header"));
    EXPECT_EQ(run.summary.tensors_checked, 2);
    EXPECT_TRUE(run.summary.failed);
  }
  {
    // Two files and no index, one cut short: the same.
    const std::string dir = testing::MakeTempDir();
    std::vector<float> v(64, 0.25f), w(64, 0.5f);
    testing::WriteFile(
        dir + "/a.safetensors",
        testing::BuildSafetensors({{"x", "F32", {2, 32}, testing::Bytes(v)}}));
    testing::WriteFile(
        dir + "/b.safetensors",
        testing::BuildSafetensors({{"y", "F32", {2, 32}, testing::Bytes(w)}}));
    cut(dir + "/b.safetensors");
    CheckRun run = CheckPath(dir);
    EXPECT_EQ(Rules(run), std::set<std::string>{"shard-corrupt"});
    ASSERT_EQ(run.findings.size(), 1u);
    EXPECT_EQ(run.findings[0].file, dir + "/b.safetensors");
    EXPECT_EQ(run.summary.tensors_checked, 1);
    EXPECT_TRUE(run.summary.failed);
  }
}

TEST(CheckCheckpointTest, GptqCompanionsMissingOrOrphanedAreFoundInTheFiles) {
  const std::string dir = testing::MakeTempDir();
  testing::CopyFixtureInto("gptq_4bit_g32", dir);
  std::vector<std::string> modules;
  testing::EditSafetensors(
      dir + "/model.safetensors", [&](std::vector<testing::StTensor>& ts) {
        for (const testing::StTensor& t : ts) {
          if (t.name.ends_with(".qweight")) {
            modules.push_back(t.name.substr(0, t.name.size() - 8));
          }
        }
        ASSERT_GE(modules.size(), 2u);
        std::erase_if(ts, [&](const testing::StTensor& t) {
          return t.name == modules[0] + ".qweight" ||
                 t.name == modules[1] + ".scales";
        });
      });
  CheckRun run = CheckPath(dir);
  EXPECT_EQ(Rules(run),
            (std::set<std::string>{"missing-companion", "orphan-companion"}));
  for (const Finding& f : run.findings) {
    if (f.rule == "missing-companion") {
      EXPECT_EQ(f.tensor, modules[1] + ".weight");
      EXPECT_THAT(f.actual, HasSubstr(modules[1] + ".scales"));
    } else {
      EXPECT_EQ(ModuleOfTensor(f.tensor), modules[0]);
      EXPECT_THAT(f.expected, HasSubstr(modules[0] + ".qweight"));
      EXPECT_GE(f.count, 2);  // its qzeros and scales (and g_idx)
    }
  }
}

TEST(CheckCheckpointTest, AStatusThatSaysWhatIsStoredPasses) {
  // The quantization-status case's dense F32 weight under "frozen" (saved
  // uncompressed, as it says): no finding, and the weight still checked.
  for (const testing::CheckCase& c : testing::CheckCases()) {
    if (c.rule != "quantization-status") continue;
    nlohmann::json j = testing::ReadJson(c.dir + "/config.json");
    j["quantization_config"]["quantization_status"] = "frozen";
    testing::WriteJson(c.dir + "/config.json", j);
    CheckRun run = CheckPath(c.dir);
    EXPECT_TRUE(run.findings.empty())
        << run.findings[0].rule << ": " << run.findings[0].actual;
    EXPECT_EQ(run.summary.tensors_checked, 3);
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

TEST(CheckCheckpointTest, GptqBeyondItsBoundAgainstItsSourceIsInformation) {
  // Against its source, the GPTQ fixture's down_proj clips beyond the bound
  // and its q_proj chooses codes other than the nearest: both by design
  // (GPTQ takes a group's range from weights its error feedback has moved),
  // so both are information and the check passes; its SQNR judges it.
  const std::string fixture = testing::Fixture("safetensors/gptq_4bit_g32");
  auto source = Checkpoint::Open(fixture + "/source");
  ASSERT_TRUE(source.ok()) << source.status();
  CheckRun run = CheckPath(fixture, {.source = source->get()});
  std::vector<std::pair<std::string, Severity>> found;
  for (const Finding& f : run.findings) {
    if (f.rule == "source-err-steps") found.emplace_back(f.tensor, f.severity);
  }
  EXPECT_EQ(found,
            (std::vector<std::pair<std::string, Severity>>{
                {"model.layers.0.mlp.down_proj.weight", Severity::kInfo},
                {"model.layers.0.self_attn.q_proj.weight", Severity::kInfo}}));
  EXPECT_EQ(run.summary.errors, 0);
  EXPECT_FALSE(run.summary.failed);
}

TEST(CheckCheckpointTest, ARuleTalliesAsTheWorstOfItsFindings) {
  // The same copy with one of down_proj's scales stored as zero (its group
  // is not zero in the source, and GPTQ never stores a zero scale): that
  // tensor's finding is an error, q_proj's still information. One rule, two
  // severities: its tally is an error, as the totals and the failed check
  // say, and names the error's tensor as its worst.
  const std::string dir = testing::MakeTempDir();
  testing::CopyFixtureInto("gptq_4bit_g32", dir);
  testing::EditSafetensors(
      dir + "/model.safetensors", [](std::vector<testing::StTensor>& ts) {
        for (testing::StTensor& t : ts) {
          if (t.name == "model.layers.0.mlp.down_proj.scales") {
            t.data[0] = 0;
            t.data[1] = 0;  // scales[0, 0], F16 +0
          }
        }
      });
  auto source = Checkpoint::Open(testing::Fixture("safetensors/gptq_4bit_g32") +
                                 "/source");
  ASSERT_TRUE(source.ok()) << source.status();
  CheckRun run = CheckPath(dir, {.source = source->get()});
  std::vector<std::pair<std::string, Severity>> found;
  for (const Finding& f : run.findings) {
    if (f.rule == "source-err-steps") found.emplace_back(f.tensor, f.severity);
  }
  EXPECT_EQ(found,
            (std::vector<std::pair<std::string, Severity>>{
                {"model.layers.0.mlp.down_proj.weight", Severity::kError},
                {"model.layers.0.self_attn.q_proj.weight", Severity::kInfo}}));
  ASSERT_FALSE(run.summary.rules.empty());
  const RuleTally* tally = nullptr;
  for (const RuleTally& t : run.summary.rules) {
    if (t.rule == "source-err-steps") tally = &t;
  }
  ASSERT_NE(tally, nullptr);
  EXPECT_EQ(SeverityName(tally->severity), "error");
  EXPECT_EQ(tally->findings, 2);
  EXPECT_EQ(tally->worst_tensor, "model.layers.0.mlp.down_proj.weight");
  EXPECT_GE(run.summary.errors, 1);
  EXPECT_TRUE(run.summary.failed);
}

TEST(TallyFindingTest, TheWorstFindingIsOfTheRulesSeverity) {
  // An error on a few elements and information on many, in every order:
  // the rule is an error, and its worst tensor is the error's, which is
  // what a reader must fix, not the larger information finding.
  auto finding = [](std::string tensor, Severity s, int64_t count,
                    int64_t group) {
    Finding f;
    f.rule = "source-err-steps";
    f.tensor = std::move(tensor);
    f.severity = s;
    f.count = count;
    f.worst_group = group;
    return f;
  };
  const Finding error = finding("down", Severity::kError, 3, 7);
  const Finding info = finding("q", Severity::kInfo, 1000, 2);
  const Finding bigger_error = finding("up", Severity::kError, 5, 9);
  std::vector<int> order = {0, 1, 2};
  const Finding all[] = {error, info, bigger_error};
  do {
    RuleTally t;
    for (int i : order) TallyFinding(all[i], &t);
    EXPECT_EQ(t.severity, Severity::kError);
    EXPECT_EQ(t.findings, 3);
    EXPECT_EQ(t.count, 1008);
    EXPECT_EQ(t.worst_tensor, "up");
    EXPECT_EQ(t.worst_count, 5);
    EXPECT_EQ(t.worst_group, 9);
  } while (std::next_permutation(order.begin(), order.end()));
  // Among findings of one severity, the largest count.
  RuleTally infos;
  TallyFinding(finding("a", Severity::kInfo, 4, 0), &infos);
  TallyFinding(info, &infos);
  TallyFinding(finding("b", Severity::kInfo, 4, 1), &infos);
  EXPECT_EQ(infos.severity, Severity::kInfo);
  EXPECT_EQ(infos.worst_tensor, "q");
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
      EXPECT_NE(f.severity, Severity::kError)
          << f.rule << " " << f.tensor << ": " << f.actual;
      // `plain` stores F16 specials on purpose: stored, not decoded, so
      // warnings of their own rules.
      if (p.ends_with("/plain") && f.tensor == "f16_special") {
        EXPECT_TRUE(f.rule == "nan-stored-value" ||
                    f.rule == "inf-stored-value" ||
                    f.rule == "fp16-saturated-scale")
            << f.rule;
      }
    }
    EXPECT_FALSE(run.summary.failed);
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

// Plain F16 and BF16 tensors are read from their codes and decoded only
// where a piece holds a special one: their findings are those of the same
// values stored as F32, count, first index and largest value alike, with
// the specials in different pieces of a tensor many pieces long.
TEST(CheckCheckpointTest, Float16FindingsAreThoseOfTheSameValuesInF32) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v(5000);
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>(static_cast<int>(i % 200) - 100) / 64;  // exact
  }
  v[17] = nan;
  v[2500] = inf;
  v[4999] = -inf;
  std::vector<float> bf16_values = v;
  bf16_values[3333] = 131072;  // past fp16, exact in BF16
  std::vector<uint16_t> f16(v.size()), bf16(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    f16[i] = testing::F32ToF16Bits(v[i]);
    bf16[i] = testing::F32ToBF16Bits(bf16_values[i]);
  }
  CheckOptions o;
  o.values.piece_elements = 1000;
  auto findings = [&](const std::string& dtype, const std::string& bytes) {
    const std::string dir = testing::MakeTempDir();
    testing::WriteFile(
        dir + "/m.safetensors",
        testing::BuildSafetensors({{"w", dtype, {50, 100}, bytes}}));
    std::vector<std::string> out;
    for (const Finding& f : CheckPath(dir, o).findings) {
      out.push_back(absl::StrCat(f.rule, " ", f.count, " ", f.actual));
    }
    return out;
  };
  const std::vector<std::string> f32 = findings("F32", testing::Bytes(v));
  EXPECT_THAT(f32, ::testing::SizeIs(2));  // nan-stored-value, inf-stored-value
  EXPECT_EQ(findings("F16", testing::Bytes(f16)), f32);
  const std::vector<std::string> bf16_f32 =
      findings("F32", testing::Bytes(bf16_values));
  EXPECT_THAT(bf16_f32, ::testing::SizeIs(3));  // and fp16-saturated-scale
  EXPECT_EQ(findings("BF16", testing::Bytes(bf16)), bf16_f32);
}

TEST(CheckCheckpointTest, ProgressReachesTheTotalAndCancellationStops) {
  auto ckpt = Checkpoint::Open(testing::DemoDir() + "/model-q4_k_m.gguf");
  ASSERT_TRUE(ckpt.ok());
  CheckProgress last;
  std::vector<int64_t> done;
  auto summary = CheckCheckpoint(
      **ckpt, {}, nullptr,
      [&](const CheckProgress& p) {
        last = p;
        done.push_back(p.bytes_done);
      },
      nullptr);
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ(last.bytes_done, last.bytes_total);
  EXPECT_EQ(last.tensors_done, last.tensors_total);
  EXPECT_EQ(summary->bytes_read, last.bytes_total);
  // Each stored byte once, though the hash and the value pass both read it.
  int64_t stored = 0;
  for (const StoredTensor& t : (*ckpt)->stored_tensors()) {
    stored += static_cast<int64_t>(t.nbytes);
  }
  EXPECT_EQ(last.bytes_total, stored);
  EXPECT_TRUE(std::is_sorted(done.begin(), done.end()));
  EXPECT_LE(done.back(), stored);

  std::atomic<bool> cancelled{true};
  EXPECT_THAT(CheckCheckpoint(**ckpt, {}, &cancelled, nullptr, nullptr),
              HasReason(ErrorReason::kCancelled));
}

TEST(CheckCheckpointTest, WithHashesProgressMovesAsTheValuePassAlone) {
  // --manifest hashes each stored byte in the value pass that reads it: no
  // pass of its own, so on a checkpoint whose every stored tensor the value
  // pass reads, the bar moves exactly as without hashes.
  auto ckpt = Checkpoint::Open(testing::DemoDir() + "/model-q4_k_m.gguf");
  ASSERT_TRUE(ckpt.ok());
  auto run = [&](bool hashes, int64_t* entries) {
    CheckOptions o;
    o.hashes = hashes;
    std::vector<int64_t> done;
    auto summary = CheckCheckpoint(
        **ckpt, o, nullptr,
        [&](const CheckProgress& p) { done.push_back(p.bytes_done); }, nullptr,
        [&](const ManifestEntry&) { ++*entries; });
    EXPECT_TRUE(summary.ok());
    EXPECT_EQ(summary->stored_tensors,
              static_cast<int64_t>((*ckpt)->stored_tensors().size()));
    return done;
  };
  int64_t with = 0, without = 0;
  const std::vector<int64_t> hashed = run(true, &with);
  EXPECT_EQ(with, static_cast<int64_t>((*ckpt)->stored_tensors().size()));
  EXPECT_EQ(hashed, run(false, &without));
  int64_t stored = 0;
  for (const StoredTensor& t : (*ckpt)->stored_tensors()) {
    stored += static_cast<int64_t>(t.nbytes);
  }
  ASSERT_FALSE(hashed.empty());
  EXPECT_EQ(hashed.back(), stored);
  EXPECT_TRUE(std::is_sorted(hashed.begin(), hashed.end()));
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
