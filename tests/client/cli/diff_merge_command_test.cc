// `tensormorph diff --part i/N --json > part-i.jsonl` N times and
// `tensormorph diff-merge part-*.jsonl` against a real tensormorphd serving a
// sharded checkpoint: the merge is the single run, field for field (timing
// aside), with the same gates, exit codes and table; part files that are
// not one whole plan are refused by name.
#include <algorithm>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli/diff_merge.h"
#include "core/util/error_reason.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensormorph/v1/tensormorph.pb.h"
#include "tests/support/cli_error.h"
#include "tests/support/diff_events.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/sharded_diff_checkpoint.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliJsonErrorOf;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::ExpectSameDiff;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ParseDiffJson;
using ::tensormorph::testing::PrintDiffJson;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::ServerProcess;
using ::tensormorph::testing::ShardedDiffCheckpoint;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

using Events = ::tensormorph::testing::DiffEvents;

// The text output without the line that carries wall time and speed.
std::string WithoutTiming(const std::string& text) {
  std::vector<std::string> kept;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.find(" of source in ") == absl::string_view::npos)
      kept.emplace_back(line);
  }
  return absl::StrJoin(kept, "\n");
}

class DiffMergeCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ckpt = new ShardedDiffCheckpoint(
        ::tensormorph::testing::WriteShardedDiffCheckpoint());
    server = new ServerProcess({ckpt->root});
  }
  static void TearDownTestSuite() {
    delete server;
    delete ckpt;
  }
  void SetUp() override { dir_ = MakeTempDir(); }

  static CommandResult Cli(std::vector<std::string> args) {
    std::vector<std::string> argv = {CliPath(), "--server", server->address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  }
  // `tensormorph --json diff quant source [extra...]`.
  static CommandResult Diff(std::vector<std::string> extra) {
    std::vector<std::string> args = {"--json", "diff", ckpt->quant,
                                     ckpt->reference};
    args.insert(args.end(), extra.begin(), extra.end());
    return Cli(args);
  }
  // Runs the N parts as a batch job would, each into part-i.jsonl; returns
  // the files.
  std::vector<std::string> RunParts(int n, std::vector<std::string> extra,
                                    const std::string& prefix = "part-") {
    std::vector<std::string> files;
    for (int i = 0; i < n; ++i) {
      std::vector<std::string> args = extra;
      args.insert(args.end(), {"--part", absl::StrCat(i, "/", n)});
      CommandResult r = Diff(args);
      EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 3)
          << "part " << i << "/" << n << ": " << r.err;
      files.push_back(absl::StrCat(dir_, "/", prefix, i, ".jsonl"));
      WriteFile(files.back(), r.out);
    }
    return files;
  }
  static CommandResult Merge(const std::vector<std::string>& files,
                             std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"diff-merge"};
    args.insert(args.end(), files.begin(), files.end());
    args.insert(args.end(), extra.begin(), extra.end());
    return Cli(args);
  }
  // A gate some tensors trip and others not: halfway between two of the
  // run's distinct errors, written exactly.
  static std::string SplittingGate() {
    Events whole = ParseDiffJson(Diff({}).out);
    std::vector<double> steps;
    for (const auto& r : whole.reports) steps.push_back(r.max_err_steps());
    std::sort(steps.begin(), steps.end());
    steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
    EXPECT_GE(steps.size(), 2u);
    const size_t k = (steps.size() - 1) / 2;
    return absl::StrFormat("max_err_steps>%.17g",
                           (steps[k] + steps[k + 1]) / 2);
  }

  static ShardedDiffCheckpoint* ckpt;
  static ServerProcess* server;
  std::string dir_;
};

ShardedDiffCheckpoint* DiffMergeCliTest::ckpt = nullptr;
ServerProcess* DiffMergeCliTest::server = nullptr;

TEST_F(DiffMergeCliTest, PartsMergeIntoTheSingleRunFieldForField) {
  const CommandResult whole = Diff({});
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const Events w = ParseDiffJson(whole.out);
  ASSERT_EQ(w.reports.size(), ckpt->compared.size());
  // The 21 projections are int8 (the rest BF16, compared exactly).
  EXPECT_EQ(std::count_if(w.reports.begin(), w.reports.end(),
                          [](const auto& r) { return r.scheme() != "BF16"; }),
            21)
      << w.reports[1].scheme();
  for (const int n : {1, 2, 3, 7}) {
    SCOPED_TRACE(absl::StrCat(n, " parts"));
    const std::vector<std::string> files = RunParts(n, {});
    // In any order.
    std::vector<std::string> shuffled(files.rbegin(), files.rend());
    const CommandResult m = Merge(shuffled, {"--json"});
    ASSERT_EQ(m.exit_code, 0) << m.err;
    const Events merged = ParseDiffJson(m.out);
    ExpectSameDiff(merged, w);
    // --json: the tensor lines sorted by name, then the summary.
    std::vector<std::string> names;
    for (const auto& r : merged.reports) names.push_back(r.name());
    EXPECT_EQ(names, ckpt->compared);
    EXPECT_THAT(m.out.substr(m.out.rfind('\n', m.out.size() - 2)),
                HasSubstr("\"summary\""));
    EXPECT_FALSE(merged.summaries[0].has_part());
    EXPECT_GT(merged.summaries[0].wall_seconds(), 0);
  }
}

TEST_F(DiffMergeCliTest, GatesTripAsInTheSingleRunWithTheSameExitCodes) {
  const std::string gate = SplittingGate();
  const CommandResult whole = Diff({"--fail-on", gate});
  ASSERT_EQ(whole.exit_code, 3) << whole.err;
  const Events w = ParseDiffJson(whole.out);
  ASSERT_GT(w.summaries[0].flagged_size(), 0);
  ASSERT_LT(w.summaries[0].flagged_size(), static_cast<int>(w.reports.size()));
  for (const int n : {1, 2, 3, 7}) {
    SCOPED_TRACE(absl::StrCat(n, " parts"));
    // Parts run with the gate: their flags hold.
    const CommandResult gated =
        Merge(RunParts(n, {"--fail-on", gate}, "gated-"), {"--json"});
    EXPECT_EQ(gated.exit_code, 3) << gated.err;
    ExpectSameDiff(ParseDiffJson(gated.out), w);
    // Parts run without: --fail-on on the merge gates them alike.
    const std::vector<std::string> plain = RunParts(n, {}, "plain-");
    const CommandResult regated = Merge(plain, {"--json", "--fail-on", gate});
    EXPECT_EQ(regated.exit_code, 3) << regated.err;
    ExpectSameDiff(ParseDiffJson(regated.out), w);
    EXPECT_THAT(regated.err, HasSubstr("--fail-on tripped by"));
    // A gate nothing trips: exit 0, nothing flagged.
    const CommandResult clean =
        Merge(plain, {"--json", "--fail-on", "max_err_steps>100"});
    EXPECT_EQ(clean.exit_code, 0) << clean.err;
    EXPECT_EQ(ParseDiffJson(clean.out).summaries[0].flagged_size(), 0);
  }
  // A merge's --fail-on replaces the parts' gates.
  const CommandResult replaced =
      Merge(RunParts(3, {"--fail-on", gate}, "replaced-"),
            {"--json", "--fail-on", "max_err_steps>100"});
  EXPECT_EQ(replaced.exit_code, 0) << replaced.err;
  EXPECT_THAT(replaced.out, Not(HasSubstr("\"flagged\":true")));
  // --fail-on before the files takes one gate: the files stay files.
  std::vector<std::string> first = {"diff-merge", "--fail-on", gate};
  for (const std::string& f : RunParts(2, {}, "first-")) first.push_back(f);
  const CommandResult gate_first = Cli(first);
  EXPECT_EQ(gate_first.exit_code, 3) << gate_first.err;
  // A gate that does not parse is a usage error, as for diff.
  const CommandResult bad =
      Merge(RunParts(1, {}, "bad-"), {"--fail-on", "sqnr<<1"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(CliErrorOf(bad.err),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("--fail-on"), MessageNames("'sqnr<<1'")));
}

TEST_F(DiffMergeCliTest, TheMergedTableIsTheSingleRunsTable) {
  const std::string gate = SplittingGate();
  const CommandResult whole = Cli(
      {"diff", ckpt->quant, ckpt->reference, "--fail-on", gate, "--top", "4"});
  ASSERT_EQ(whole.exit_code, 3) << whole.err;
  const CommandResult m = Merge(RunParts(3, {"--fail-on", gate, "--top", "4"}));
  ASSERT_EQ(m.exit_code, 3) << m.err;
  EXPECT_EQ(WithoutTiming(m.out), WithoutTiming(whole.out));
  EXPECT_EQ(m.err, whole.err);
  EXPECT_THAT(m.out, HasSubstr("FAIL-ON"));
  EXPECT_THAT(m.out, HasSubstr(absl::StrCat("only in ", ckpt->quant, ": ",
                                            ckpt->only_in_quant)));
}

TEST_F(DiffMergeCliTest, APartSaysWhichPartItIsAndMayBeEmpty) {
  // 64 parts of fewer pairs: some are empty, and that is no failure.
  int empty = 0;
  for (int i = 0; i < 64 && empty == 0; ++i) {
    CommandResult r = Cli({"diff", ckpt->quant, ckpt->reference, "--part",
                           absl::StrCat(i, "/64")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("part ", i, "/64 of plan ")));
    if (r.out.find("\n0 tensors compared") != std::string::npos) {
      ++empty;
      EXPECT_THAT(r.out, HasSubstr(absl::StrCat("0 of ", ckpt->compared.size(),
                                                " tensors")));
    }
  }
  EXPECT_EQ(empty, 1);
}

TEST_F(DiffMergeCliTest, ABadPartArgumentIsAUsageError) {
  for (const char* bad : {"3/3", "-1/3", "1/0", "x", "1/2/3", "0/65537"}) {
    CommandResult r =
        Cli({"diff", ckpt->quant, ckpt->reference, "--part", bad});
    EXPECT_EQ(r.exit_code, 1) << bad;
    EXPECT_THAT(
        CliErrorOf(r.err),
        AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames("--part")))
        << bad;
    EXPECT_TRUE(r.out.empty()) << bad;
  }
  CommandResult r =
      Cli({"diff", ckpt->quant, ckpt->reference, "--part", "3/3"});
  EXPECT_THAT(CliErrorOf(r.err), MessageNames("0 to 2"));
}

TEST_F(DiffMergeCliTest, PartFilesThatAreNotOneWholePlanAreRefusedByName) {
  const std::vector<std::string> f = RunParts(3, {});
  // Each case: the files given, and what the refusal says.
  auto edit = [&](const std::string& from, const std::string& name,
                  const std::function<void(Events&)>& change) {
    Events e = ParseDiffJson(testing::ReadFileBytes(from));
    change(e);
    const std::string path = absl::StrCat(dir_, "/", name);
    WriteFile(path, PrintDiffJson(e));
    return path;
  };
  const std::string again = absl::StrCat(dir_, "/again.jsonl");
  WriteFile(again, testing::ReadFileBytes(f[1]));
  const CommandResult whole = Diff({});
  const std::string whole_file = absl::StrCat(dir_, "/whole.jsonl");
  WriteFile(whole_file, whole.out);
  // Part 1 cut short before its summary, and after losing a report.
  std::string p1 = testing::ReadFileBytes(f[1]);
  const std::string cut = absl::StrCat(dir_, "/cut.jsonl");
  WriteFile(cut, p1.substr(0, p1.rfind("{\"summary\"")));
  const std::string lost =
      edit(f[1], "lost.jsonl", [](Events& e) { e.reports.pop_back(); });
  // Part 2 of another plan: 3 parts of a filtered diff.
  const std::vector<std::string> other =
      RunParts(3, {"--filter", "model.layers.*"}, "other-");
  // Part 2 with a different pairing list.
  const std::string lists = edit(f[2], "lists.jsonl", [](Events& e) {
    e.summaries[0].add_only_in_reference("model.stray.weight");
  });
  // Part 2 also reporting a tensor of part 0 (its count kept consistent).
  const Events p0 = ParseDiffJson(testing::ReadFileBytes(f[0]));
  const std::string dup = edit(f[2], "dup.jsonl", [&](Events& e) {
    e.reports.push_back(p0.reports.front());
    e.summaries[0].set_tensors_compared(e.summaries[0].tensors_compared() + 1);
  });
  const std::string dup_name = p0.reports.front().name();
  // Each refusal's reason (diff_merge.h's, else the generic one) and the
  // files, parts and names its message must point the user at.
  const std::string kIncomplete(kDiffPartsIncomplete);
  const std::string kOtherPlan(kDiffPartsOfDifferentPlans);
  const std::string kGeneric = "REQUEST_INVALID";
  const struct {
    const char* what;
    std::vector<std::string> files;
    std::string reason;
    std::vector<std::string> named;
  } cases[] = {
      {"no summary", {f[0], cut, f[2]}, kGeneric, {cut, "--part i/N --json"}},
      {"a whole run's file", {f[0], whole_file, f[2]}, kGeneric, {whole_file}},
      {"a part twice",
       {f[0], f[1], f[2], again},
       kIncomplete,
       {"1/3", f[1], again}},
      {"parts missing",
       {f[0], f[1]},
       kIncomplete,
       {"2/3", "0/3 (" + f[0] + ")", "1/3 (" + f[1] + ")"}},
      {"two missing", {f[1]}, kIncomplete, {"0/3, 2/3", "1/3 (" + f[1] + ")"}},
      {"another plan",
       {f[0], f[1], other[2]},
       kOtherPlan,
       {f[0], "0/3", other[2]}},
      {"another part count",
       {f[0], f[1], RunParts(4, {}, "four-")[2]},
       kOtherPlan,
       {}},
      {"pairing lists that disagree",
       {f[0], f[1], lists},
       kGeneric,
       {"only_in_reference", lists + " (part 2/3)", f[0] + " (part 0/3)"}},
      {"a tensor twice",
       {f[0], f[1], dup},
       kGeneric,
       {"'" + dup_name + "'", f[0], dup}},
      {"a truncated file", {f[0], lost, f[2]}, kGeneric, {lost, "1/3"}},
      {"no such file",
       {f[0], f[1], dir_ + "/nope.jsonl"},
       kGeneric,
       {"'" + dir_ + "/nope.jsonl'"}},
  };
  for (const auto& c : cases) {
    for (const bool json : {false, true}) {
      SCOPED_TRACE(absl::StrCat(c.what, json ? " --json" : ""));
      CommandResult r = Merge(c.files, json ? std::vector<std::string>{"--json"}
                                            : std::vector<std::string>{});
      EXPECT_EQ(r.exit_code, 1) << r.err;
      const absl::Status error = CliErrorOf(r.err);
      EXPECT_EQ(error.code(), absl::StatusCode::kInvalidArgument) << error;
      EXPECT_EQ(ReasonNameOf(error), c.reason) << error;
      for (const std::string& value : c.named) {
        EXPECT_THAT(error, MessageNames(value));
      }
      // --json: one error line on stdout, as every command's usage errors,
      // with the same code and reason.
      if (json) {
        const absl::Status line = CliJsonErrorOf(r.out);
        EXPECT_EQ(line.code(), absl::StatusCode::kInvalidArgument) << r.out;
        EXPECT_EQ(ReasonNameOf(line), c.reason) << r.out;
        EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
      } else {
        EXPECT_TRUE(r.out.empty()) << r.out;
      }
    }
  }
  // A line that is no event names the file and line.
  const std::string junk = absl::StrCat(dir_, "/junk.jsonl");
  WriteFile(junk, testing::ReadFileBytes(f[0]) + "not json\n");
  CommandResult r = Merge({junk, f[1], f[2]});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(CliErrorOf(r.err), AllOf(HasReason(ErrorReason::kRequestInvalid),
                                       MessageNames(junk + " line ")));
  // Progress lines in a part file (stderr sent along) are skipped.
  const std::string with_progress = absl::StrCat(dir_, "/progress.jsonl");
  WriteFile(with_progress, "{\"progress\":{\"tensorsDone\":\"0\"}}\n" +
                               testing::ReadFileBytes(f[0]));
  r = Merge({with_progress, f[1], f[2]});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// The run id each part of `files` carries (DiffPartInfo.run_id).
std::vector<std::string> RunIds(const std::vector<std::string>& files) {
  std::vector<std::string> ids;
  for (const std::string& f : files) {
    const Events e = ParseDiffJson(testing::ReadFileBytes(f));
    EXPECT_EQ(e.summaries.size(), 1u) << f;
    if (!e.summaries.empty()) ids.push_back(e.summaries[0].part().run_id());
  }
  return ids;
}

TEST_F(DiffMergeCliTest, PartsOfTwoRunsAreRefusedNamingBothRunsAndFiles) {
  // Night 1 and night 2 over the same checkpoint: the same plan, so only
  // the run id tells last night's part 2 from tonight's.
  const std::vector<std::string> night1 =
      RunParts(3, {"--run-id", "night-1"}, "n1-");
  const std::vector<std::string> night2 =
      RunParts(3, {"--run-id", "night-2"}, "n2-");
  EXPECT_EQ(RunIds(night1),
            std::vector<std::string>({"night-1", "night-1", "night-1"}));
  const CommandResult mixed =
      Merge({night2[0], night2[1], night1[2]}, {"--json"});
  EXPECT_EQ(mixed.exit_code, 1) << mixed.err;
  EXPECT_EQ(ReasonNameOf(CliJsonErrorOf(mixed.out)), kDiffPartsOfDifferentRuns);
  const absl::Status error = CliErrorOf(mixed.err);
  EXPECT_EQ(ReasonNameOf(error), kDiffPartsOfDifferentRuns) << error;
  for (const std::string& named : std::vector<std::string>{
           night2[0], "0/3", "'night-2'", night1[2], "2/3", "'night-1'"}) {
    EXPECT_THAT(error, MessageNames(named));
  }
  // One run's parts merge into the single run, as without run ids.
  const CommandResult merged = Merge(night2, {"--json"});
  ASSERT_EQ(merged.exit_code, 0) << merged.err;
  ExpectSameDiff(ParseDiffJson(merged.out), ParseDiffJson(Diff({}).out));
}

TEST_F(DiffMergeCliTest, TheRunIdDefaultsToTheEnvironmentThenTheInputs) {
  // $TENSORMORPH_RUN_ID: what the overlays set from the Job's uid.
  std::vector<std::string> from_env;
  for (int i = 0; i < 2; ++i) {
    CommandResult r = RunCommand(
        {CliPath(), "--server", server->address(), "--json", "diff",
         ckpt->quant, ckpt->reference, "--part", absl::StrCat(i, "/2")},
        {"TENSORMORPH_RUN_ID=3f2b9c1e-77aa-4c1d"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    from_env.push_back(absl::StrCat(dir_, "/env-", i, ".jsonl"));
    WriteFile(from_env.back(), r.out);
  }
  EXPECT_EQ(RunIds(from_env), std::vector<std::string>({"3f2b9c1e-77aa-4c1d",
                                                        "3f2b9c1e-77aa-4c1d"}));
  // Neither: every part derives the same id from the two checkpoints.
  const std::vector<std::string> derived = RunIds(RunParts(3, {}));
  ASSERT_EQ(derived.size(), 3u);
  EXPECT_THAT(derived[0], ::testing::MatchesRegex("inputs-[0-9a-f]{16}"));
  EXPECT_EQ(derived[1], derived[0]);
  EXPECT_EQ(derived[2], derived[0]);
  // A filtered diff of the same checkpoints is another plan, not another
  // run: the id is the inputs'.
  EXPECT_EQ(RunIds(RunParts(2, {"--filter", "model.layers.*"}, "f-"))[0],
            derived[0]);
}

TEST_F(DiffMergeCliTest, ARunIdOutsideItsCharactersIsAUsageError) {
  for (const char* bad : {"a/b", "night 1", "x;rm"}) {
    CommandResult r = Cli({"diff", ckpt->quant, ckpt->reference, "--part",
                           "0/2", "--run-id", bad});
    EXPECT_EQ(r.exit_code, 1) << bad;
    EXPECT_THAT(
        CliErrorOf(r.err),
        AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames("--run-id"),
              MessageNames("A-Z a-z 0-9 . _ : -")))
        << bad;
  }
}

TEST_F(DiffMergeCliTest, HelpTeachesTheThreePartRun) {
  CommandResult r = RunCommand({CliPath(), "diff-merge", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("--part $i/3 --json > part-$i.jsonl"));
  EXPECT_THAT(r.out, HasSubstr("tensormorph diff-merge part-*.jsonl"));
}

// Every number of the merged summary is the single run's, with a broken
// quantizer in every projection so that no total is 0 = 0 + 0: a merge that
// started from part 0's summary counted its clipped elements twice (21789
// for a single run's 14490), and the fault-free checkpoint hid it.
TEST(DiffMergeTotalsTest, EveryNumberOfTheMergedSummaryIsTheSingleRuns) {
  const ShardedDiffCheckpoint c =
      ::tensormorph::testing::WriteShardedDiffCheckpoint(
          {.quantizer_faults = true});
  ServerProcess server({c.root});
  const std::string dir = MakeTempDir();
  auto diff = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = {CliPath(),  "--server", server.address(),
                                     "--json",   "diff",     c.quant,
                                     c.reference};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunCommand(argv);
  };
  const CommandResult whole = diff({});
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const Events w = ParseDiffJson(whole.out);
  ASSERT_EQ(w.summaries.size(), 1u);
  const v1::DiffSummary& single = w.summaries[0];
  // The numbers a merge adds up; the weighted ones need an imatrix
  // (DiffMergeTest.AddsTheWeightedSumsOfAllPartsInNameOrder).
  const google::protobuf::Descriptor* d = v1::DiffSummary::descriptor();
  const google::protobuf::Reflection* reflect = single.GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> numbers;
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->is_repeated() || f->name() == "wall_seconds" ||
        absl::StrContains(f->name(), "weight")) {
      continue;
    }
    if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_INT64) {
      numbers.push_back(f);
      EXPECT_GT(reflect->GetInt64(single, f), 0) << f->name();
    } else if (f->cpp_type() ==
               google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE) {
      numbers.push_back(f);
      EXPECT_GT(reflect->GetDouble(single, f), 0) << f->name();
    }
  }
  ASSERT_GE(numbers.size(), 6u);  // tensors_compared ... max_excess_steps
  for (const int n : {1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat(n, " parts"));
    std::vector<std::string> files;
    for (int i = 0; i < n; ++i) {
      const CommandResult part = diff({"--part", absl::StrCat(i, "/", n)});
      ASSERT_EQ(part.exit_code, 0) << part.err;
      // Part 0 has excess totals of its own to count (once).
      if (i == 0) {
        EXPECT_GT(ParseDiffJson(part.out).summaries[0].clipped(), 0);
      }
      files.push_back(absl::StrCat(dir, "/", n, "-part-", i, ".jsonl"));
      WriteFile(files.back(), part.out);
    }
    std::vector<std::string> argv = {CliPath(), "--json", "diff-merge"};
    argv.insert(argv.end(), files.begin(), files.end());
    const CommandResult m = RunCommand(argv);
    ASSERT_EQ(m.exit_code, 0) << m.err;
    const Events merged = ParseDiffJson(m.out);
    ASSERT_EQ(merged.summaries.size(), 1u);
    for (const google::protobuf::FieldDescriptor* f : numbers) {
      if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_INT64) {
        EXPECT_EQ(reflect->GetInt64(merged.summaries[0], f),
                  reflect->GetInt64(single, f))
            << f->name();
      } else {
        EXPECT_EQ(reflect->GetDouble(merged.summaries[0], f),
                  reflect->GetDouble(single, f))
            << f->name();
      }
    }
    ExpectSameDiff(merged, w);
  }
}

// The tensor lines `diff-merge --json` prints are the single run's, byte
// for byte: a float read back from a part file keeps every bit, the sign of
// a -0 included (protobuf's JSON parser reads the token -0 as the integer
// 0; MessageDifferencer, which says -0 == 0, cannot see that).
TEST(DiffMergeTextTest, TheMergedLinesAreTheSingleRunsLinesByteForByte) {
  const std::string q = testing::Fixture("gguf/Q4_0.gguf");
  const std::string s = testing::Fixture("gguf/source_f32.gguf");
  const std::string dir = MakeTempDir();
  auto tensor_lines = [](const std::string& out) {
    std::vector<std::string> lines;
    for (absl::string_view l : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
      if (absl::StartsWith(l, "{\"tensor\"")) lines.emplace_back(l);
    }
    std::sort(lines.begin(), lines.end());
    return lines;
  };
  const CommandResult whole = RunCommand({CliPath(), "--json", "diff", q, s});
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  ASSERT_THAT(whole.out, HasSubstr("\"decoded\":-0,"))
      << "the fixture pair no longer has a -0 to carry";
  std::vector<std::string> parts;
  for (int i = 0; i < 2; ++i) {
    const CommandResult part = RunCommand(
        {CliPath(), "--json", "diff", q, s, "--part", absl::StrCat(i, "/2")});
    ASSERT_EQ(part.exit_code, 0) << part.err;
    parts.push_back(absl::StrCat(dir, "/part-", i, ".jsonl"));
    WriteFile(parts.back(), part.out);
  }
  const CommandResult merged =
      RunCommand({CliPath(), "--json", "diff-merge", parts[0], parts[1]});
  ASSERT_EQ(merged.exit_code, 0) << merged.err;
  EXPECT_EQ(tensor_lines(merged.out), tensor_lines(whole.out));
}

// A part file with no end of line (/dev/zero, a binary dropped in by
// mistake) is refused once a line passes any report's size, not read whole.
TEST(DiffMergeTextTest, AnEndlessLineIsRefusedNotHeld) {
  const CommandResult r = RunCommand({CliPath(), "diff-merge", "/dev/zero"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(CliErrorOf(r.err),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("/dev/zero line 1"), MessageNames("256 MiB")));
}

}  // namespace
}  // namespace tensormorph
