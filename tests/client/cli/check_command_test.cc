// `tensormorph check` as people and CI run it, embedded and against a
// tensormorphd: every rule's broken checkpoint is reported, --json lines
// parse, the exit code follows --fail-level, --manifest/--verify round-trip
// and name a one-byte change, and the fixtures and the demo check clean of
// errors.
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/check/rules.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/check_cases.h"
#include "tests/support/cli_error.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/fixture_copy.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph::check_command_test {
namespace {

namespace fs = std::filesystem;
using ::tensormorph::testing::CheckCase;
using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::FixturesDir;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

CliModes* cli = nullptr;
std::vector<CheckCase>* cases = nullptr;

class CheckCliTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    cases = new std::vector<CheckCase>(testing::CheckCases());
    const std::string tmp = fs::path(cases->front().dir).parent_path();
    cli = new CliModes({FixturesDir(), testing::DemoDir(), tmp});
  }
  static void TearDownTestSuite() {
    delete cli;
    delete cases;
    cli = nullptr;
  }
  CommandResult Run(std::vector<std::string> args) {
    return cli->Run(GetParam(), std::move(args));
  }
};

// The JSON objects of stdout, one a line; fails the test on a line that
// does not parse.
std::vector<nlohmann::json> JsonLines(const std::string& out) {
  std::vector<nlohmann::json> lines;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    try {
      lines.push_back(nlohmann::json::parse(line));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not JSON: " << line;
    }
  }
  return lines;
}

TEST_P(CheckCliTest, EveryRuleIsReportedAndJsonIsOneFindingPerLine) {
  for (const CheckCase& c : *cases) {
    SCOPED_TRACE(c.rule);
    std::vector<std::string> args = {"check", c.dir, "--json"};
    if (!c.source.empty()) {
      args.push_back("--source");
      args.push_back(c.source);
    }
    CommandResult r = Run(args);
    EXPECT_EQ(r.exit_code, c.severity == "error" ? 3 : 0) << r.err;
    std::vector<nlohmann::json> lines = JsonLines(r.out);
    ASSERT_FALSE(lines.empty());
    bool found = false;
    for (size_t i = 0; i + 1 < lines.size(); ++i) {
      ASSERT_TRUE(lines[i].contains("finding")) << lines[i].dump();
      const nlohmann::json& f = lines[i]["finding"];
      if (f["rule"] != c.rule || f.value("tensor", "") != c.tensor) continue;
      found = true;
      EXPECT_EQ(
          f["severity"], "CHECK_SEVERITY_" + [&] {
            std::string s = c.severity;
            for (char& ch : s) ch = static_cast<char>(std::toupper(ch));
            return s;
          }());
      EXPECT_THAT(f.value("actual", "") + " | " + f.value("expected", ""),
                  HasSubstr(c.says));
    }
    EXPECT_TRUE(found);
    ASSERT_TRUE(lines.back().contains("summary")) << lines.back().dump();
    EXPECT_EQ(lines.back()["summary"].value("failed", false),
              c.severity == "error");
  }
}

TEST_P(CheckCliTest, ExitCodeFollowsFailLevel) {
  for (const CheckCase& c : *cases) {
    if (c.rule != "duplicate-tensor") continue;
    EXPECT_EQ(Run({"check", c.dir}).exit_code, 0);
    EXPECT_EQ(Run({"check", c.dir, "--fail-level", "warning"}).exit_code, 0);
    CommandResult info = Run({"check", c.dir, "--fail-level", "info"});
    EXPECT_EQ(info.exit_code, 3);
    EXPECT_THAT(info.err, HasSubstr("findings at or above info"));
    CommandResult bad = Run({"check", c.dir, "--fail-level", "fatal"});
    EXPECT_EQ(bad.exit_code, 1);
  }
  for (const CheckCase& c : *cases) {
    if (c.rule != "zero-scale") continue;
    EXPECT_EQ(Run({"check", c.dir}).exit_code, 0);
    EXPECT_EQ(Run({"check", c.dir, "--fail-level", "warning"}).exit_code, 3);
  }
  EXPECT_EQ(Run({"check", "/no/such/checkpoint"}).exit_code, 2);
}

TEST_P(CheckCliTest, PeopleSeeFindingsGroupedByRule) {
  for (const CheckCase& c : *cases) {
    if (c.rule != "zero-scale") continue;
    CommandResult r = Run({"check", c.dir});
    EXPECT_THAT(r.out, HasSubstr("warning zero-scale: 1 finding\n  " +
                                 std::string(testing::kCheckScale)));
    EXPECT_THAT(r.out, HasSubstr("warning all-zero-group: 1 finding\n"));
    EXPECT_THAT(r.out, HasSubstr("    expected: non-zero scales\n"));
    EXPECT_THAT(r.out, HasSubstr("    hint:     "));
    EXPECT_THAT(r.out, HasSubstr("2 tensors checked (3 stored tensors"));
    EXPECT_THAT(r.out, HasSubstr("0 errors, 2 warnings, 0 infos"));
  }
}

TEST_P(CheckCliTest, ARuleIsHeadedAndSummarizedByItsWorstFinding) {
  // The GPTQ fixture against its source: two source-err-steps findings,
  // information (GPTQ chooses its codes and clips by design): exit 0.
  const std::string fixture = Fixture("safetensors/gptq_4bit_g32");
  CommandResult plain =
      Run({"check", fixture, "--source", fixture + "/source"});
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_THAT(plain.out, HasSubstr("info source-err-steps: 2 findings"));
  EXPECT_THAT(plain.out, HasSubstr("0 errors, 0 warnings, 2 infos"));
  // A copy with one of down_proj's scales stored as zero: that finding is
  // an error (GPTQ never stores one), q_proj's still information. The
  // heading and the summary's tally say error and name the error's tensor,
  // as the totals and the exit code do.
  const std::string copy = testing::MakeTempDir();
  testing::CopyFixtureInto("gptq_4bit_g32", copy);
  testing::EditSafetensors(
      copy + "/model.safetensors", [](std::vector<testing::StTensor>& ts) {
        for (testing::StTensor& t : ts) {
          if (t.name == "model.layers.0.mlp.down_proj.scales") {
            t.data[0] = 0;
            t.data[1] = 0;
          }
        }
      });
  const std::vector<std::string> args = {"check", copy, "--source",
                                         fixture + "/source"};
  CommandResult text = Run(args);
  EXPECT_EQ(text.exit_code, 3) << text.err;
  EXPECT_THAT(text.out, HasSubstr("error source-err-steps: 2 findings, worst "
                                  "model.layers.0.mlp.down_proj.weight"));

  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  CommandResult json = Run(json_args);
  EXPECT_EQ(json.exit_code, 3) << json.err;
  std::vector<nlohmann::json> lines = JsonLines(json.out);
  ASSERT_FALSE(lines.empty());
  const nlohmann::json& summary = lines.back()["summary"];
  const nlohmann::json* tally = nullptr;
  for (const nlohmann::json& r : summary["rules"]) {
    if (r["rule"] == "source-err-steps") tally = &r;
  }
  ASSERT_NE(tally, nullptr) << summary.dump();
  EXPECT_EQ((*tally)["severity"], "CHECK_SEVERITY_ERROR");
  EXPECT_EQ((*tally)["worstTensor"], "model.layers.0.mlp.down_proj.weight");
}

TEST_P(CheckCliTest, CorruptFilesAreFindingsWhateverElseOpens) {
  // What a script can rely on, with or without an index, one file or many:
  // a corrupt file is a shard-corrupt finding and exit 3. When none opens
  // (nothing else to check) that is the one finding, naming the first
  // corrupt file and the rule it broke.
  auto truncated_copy = [](const std::string& from, const std::string& to) {
    const std::string bytes = testing::ReadFileBytes(from);
    testing::WriteFile(to, bytes.substr(0, bytes.size() - 4));
  };
  const std::string gptq =
      Fixture("safetensors/gptq_4bit_g32") + "/model.safetensors";
  // Fresh directories beside the cases', inside the server's roots.
  const std::string single = testing::MakeTempDir();
  const std::string two = testing::MakeTempDir();
  const std::string sharded = testing::MakeTempDir();
  const std::string gguf = testing::MakeTempDir() + "/cut.gguf";
  truncated_copy(gptq, single + "/model.safetensors");
  fs::copy_file(gptq, two + "/a.safetensors");
  truncated_copy(gptq, two + "/b.safetensors");
  truncated_copy(Fixture("gguf/Q4_K.gguf"), gguf);
  // An index whose every shard is cut short: no file opens either.
  const std::string shards = Fixture("safetensors/fp8_block_sharded");
  fs::copy_file(shards + "/model.safetensors.index.json",
                sharded + "/model.safetensors.index.json");
  for (const char* n : {"/model-00001-of-00002.safetensors",
                        "/model-00002-of-00002.safetensors"}) {
    truncated_copy(shards + n, sharded + n);
  }

  const std::vector<std::pair<std::string, std::string>> none_opens = {
      {single, single + "/model.safetensors"},
      {sharded, sharded + "/model-00001-of-00002.safetensors"},
      {gguf, gguf}};
  for (const auto& [path, file] : none_opens) {
    SCOPED_TRACE(path);
    CommandResult r = Run({"check", path});
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_THAT(r.out, HasSubstr("error shard-corrupt: 1 finding\n"));
    EXPECT_THAT(r.out, HasSubstr("[" + file + "]"));
    EXPECT_THAT(r.out, HasSubstr("0 tensors checked"));
    // --json: the finding's line, then the summary's; no error line.
    CommandResult j = Run({"--json", "check", path});
    EXPECT_EQ(j.exit_code, 3) << j.err;
    std::vector<nlohmann::json> lines;
    for (absl::string_view line :
         absl::StrSplit(j.out, '\n', absl::SkipEmpty())) {
      lines.push_back(nlohmann::json::parse(line));
    }
    ASSERT_EQ(lines.size(), 2u) << j.out;
    EXPECT_EQ(lines[0]["finding"]["rule"], "shard-corrupt");
    EXPECT_EQ(lines[0]["finding"]["file"], file);
    EXPECT_EQ(lines[1]["summary"]["errors"], "1");
    EXPECT_TRUE(lines[1]["summary"]["failed"].get<bool>());
  }
  // A manifest asked of what did not open is not written: the one there
  // stays.
  const std::string manifest = testing::MakeTempDir() + "/m.json";
  testing::WriteFile(manifest, "previous");
  CommandResult m = Run({"check", gguf, "--manifest", manifest});
  EXPECT_EQ(m.exit_code, 3) << m.err;
  EXPECT_THAT(m.out, HasSubstr("no manifest written"));
  EXPECT_EQ(testing::ReadFileBytes(manifest), "previous");

  CommandResult r = Run({"check", two});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.out, HasSubstr("error shard-corrupt: 1 finding\n"));
  EXPECT_THAT(r.out, HasSubstr("[" + two + "/b.safetensors]"));
  // a.safetensors's stored tensors, each its own (no config came along).
  EXPECT_THAT(r.out, HasSubstr("8 tensors checked (8 stored tensors"));
  // What is not about a file's bytes still fails the call.
  CommandResult missing = Run({"check", single + "/nope"});
  EXPECT_EQ(missing.exit_code, 2) << missing.out;
}

TEST_P(CheckCliTest, ManifestRoundTripsAndAOneByteChangeIsNamed) {
  const std::string original = testing::WriteCleanCheckCheckpoint();
  const std::string manifest = testing::MakeTempDir() + "/m.json";
  CommandResult w = Run({"check", original, "--manifest", manifest});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  EXPECT_THAT(w.out, HasSubstr("manifest of 3 stored tensors written to"));
  const nlohmann::json m =
      nlohmann::json::parse(testing::ReadFileBytes(manifest));
  ASSERT_EQ(m["tensors"].size(), 3u);
  EXPECT_EQ(Run({"check", original, "--verify", manifest}).exit_code, 0);

  // A copy with one byte changed in the scales.
  uint64_t offset = 0;
  for (const auto& t : m["tensors"]) {
    if (t["name"] == testing::kCheckScale) offset = t["offset"];
  }
  std::string bytes = testing::ReadFileBytes(original + "/model.safetensors");
  bytes[offset] ^= 0x01;
  const std::string copy = testing::MakeTempDir();
  testing::WriteFile(copy + "/model.safetensors", bytes);
  testing::WriteFile(copy + "/config.json",
                     testing::ReadFileBytes(original + "/config.json"));
  CommandResult v = Run({"check", copy, "--verify", manifest});
  EXPECT_EQ(v.exit_code, 3) << v.err;
  EXPECT_THAT(v.out, HasSubstr("error manifest-mismatch: 1 finding\n  " +
                               std::string(testing::kCheckScale)));

  // A manifest that does not parse is a usage error naming the field.
  testing::WriteFile(manifest, R"({"format": "tensormorph-manifest"})");
  CommandResult bad = Run({"check", copy, "--verify", manifest});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(
      CliErrorOf(bad.err),
      AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames(".version")));

  // A directory where the manifest should be is one too (it opens, and
  // fails only when read).
  CommandResult dir = Run({"check", copy, "--verify", copy});
  EXPECT_EQ(dir.exit_code, 1);
  EXPECT_THAT(CliErrorOf(dir.err),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("--verify"), MessageNames("directory")));

  // A manifest that cannot be written fails before the check runs (it was
  // a failed call, "is tensormorphd running there?", after), as every
  // command's output does: by the errno's code (CreateOutput).
  CommandResult nowhere =
      Run({"check", original, "--manifest", "/nonexistent/dir/m.json"});
  EXPECT_EQ(nowhere.exit_code, 2);
  EXPECT_THAT(
      CliErrorOf(nowhere.err),
      AllOf(HasReason(ErrorReason::kNotFound), MessageNames("--manifest"),
            MessageNames("'/nonexistent/dir/m.json'")));
}

TEST_P(CheckCliTest, FixturesAndTheDemoCheckWithoutErrors) {
  std::vector<std::string> paths;
  for (const char* kind : {"gguf", "safetensors"}) {
    for (const auto& e : fs::directory_iterator(Fixture(kind))) {
      const std::string p = e.path().string();
      // `plain` too: the NaN and Inf it stores on purpose are warnings
      // (nan-stored-value, inf-stored-value), not errors.
      if (e.is_directory() || p.ends_with(".gguf")) paths.push_back(p);
    }
  }
  for (const auto& e : fs::directory_iterator(testing::DemoDir())) {
    paths.push_back(e.path().string());
  }
  for (const std::string& p : paths) {
    CommandResult r = Run({"check", p, "--json"});
    EXPECT_EQ(r.exit_code, 0) << p << ": " << r.out << r.err;
    std::vector<nlohmann::json> lines = JsonLines(r.out);
    ASSERT_FALSE(lines.empty()) << p;
    EXPECT_EQ(lines.back()["summary"].value("errors", "0"), "0") << p;
  }
}

TEST_P(CheckCliTest, HelpTeachesSeveritiesRulesAndExamples) {
  CommandResult r = Run({"check", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("error    wrong: the model will answer wrong"));
  EXPECT_THAT(r.out, HasSubstr("gptq-zero-convention   error"));
  EXPECT_THAT(r.out, HasSubstr("tensormorph check model/ --json --fail-level "
                               "warning"));
}

INSTANTIATE_TEST_SUITE_P(BothModes, CheckCliTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Remote" : "Embedded";
                         });

TEST(CheckReadmeTest, ListsEveryRuleWithItsSeverity) {
  const std::string readme = testing::ReadFileBytes(
      std::string(TENSORMORPH_SOURCE_DIR) + "/docs/check.md");
  for (const CheckRule& r : CheckRules()) {
    EXPECT_THAT(readme, HasSubstr(absl::StrCat("| `", r.id, "` | ",
                                               SeverityName(r.severity), " |")))
        << r.id;
  }
}

}  // namespace
}  // namespace tensormorph::check_command_test
