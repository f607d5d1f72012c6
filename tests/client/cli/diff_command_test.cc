// QuantDiff end to end: the RPC through the client, and the diff command as
// CI runs it (--json lines, --fail-on exit codes), remote and embedded.
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "client/embedded/embedded_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/server.h"
#include "tests/support/cli_error.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/loopback_server.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph::diff_command_test {
namespace {

using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliJsonErrorOf;
using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::FixturesDir;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::ServerProcess;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

CliModes* cli = nullptr;
const std::string* demo = nullptr;

class DiffCliTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    demo = &::tensormorph::testing::DemoDir();
    cli = new CliModes({FixturesDir(), *demo});
  }
  static void TearDownTestSuite() {
    delete cli;
    cli = nullptr;
  }
  CommandResult Run(std::vector<std::string> args) {
    return cli->Run(GetParam(), std::move(args));
  }
};

TEST_P(DiffCliTest, FailOnExitsThreeWhenATensorTripsItAndZeroOtherwise) {
  CommandResult q8 =
      Run({"diff", Fixture("gguf/Q8_0.gguf"), Fixture("gguf/source_f32.gguf"),
           "--fail-on", "max_err_steps>0.51"});
  EXPECT_EQ(q8.exit_code, 3) << q8.err;
  EXPECT_THAT(q8.err, HasSubstr("blk.0.attn_q.weight: max_err_steps"));
  const std::string ct = Fixture("safetensors/ct_int8_channel");
  CommandResult ok = Run({"diff", ct, ct + "/source", "--fail-on",
                          "max_err_steps>0.51", "--fail-on", "sqnr_db<25"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("4 tensors compared"));
  CommandResult bad = Run({"diff", ct, ct + "/source", "--fail-on", "bogus>1"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(
      CliErrorOf(bad.err),
      AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames("'bogus'")));
}

TEST_P(DiffCliTest, JsonIsOneObjectPerLineWithProgressOnlyOnStderr) {
  CommandResult r =
      Run({"diff", Fixture("gguf/Q4_0.gguf"), Fixture("gguf/source_f32.gguf"),
           "--json", "--top", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<nlohmann::json> lines;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);)
    lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 3u);  // two tensors, then the summary
  EXPECT_TRUE(lines[0].contains("tensor"));
  EXPECT_TRUE(lines[2].contains("summary"));
  EXPECT_EQ(lines[0]["tensor"]["worst"].size(), 3u);
  // Q4_0 clips one side by design: clipped, beyond half a step, within its
  // bound.
  const nlohmann::json& t = lines[0]["tensor"];
  EXPECT_GT(std::stoll(t["aboveHalfStep"].get<std::string>()), 0);
  EXPECT_GT(std::stoll(t["clipped"].get<std::string>()), 0);
  EXPECT_EQ(std::stoll(t["notNearest"].get<std::string>()), 0);
  EXPECT_EQ(t["maxExcessSteps"].get<double>(), 0);
  EXPECT_GT(t["boundSteps"].get<double>(), 0.5);
  EXPECT_TRUE(t["nearestCodes"].get<bool>());
  EXPECT_THAT(r.err, HasSubstr("\"progress\""));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("progress")));
}

TEST_P(DiffCliTest,
       GgufAgainstItsHuggingFaceSourceFindsEveryTensorWithZeroError) {
  CommandResult r =
      Run({"diff", *demo + "/model-f32.gguf", *demo + "/source", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(r.out);
  int tensors = 0;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("tensor")) {
      ++tensors;
      EXPECT_EQ(j["tensor"]["maxAbsErr"].get<double>(), 0)
          << j["tensor"]["name"];
    } else {
      EXPECT_EQ(j["summary"]["pairing"], "DIFF_PAIRING_GGUF_TO_HF_NAMES");
      EXPECT_EQ(j["summary"]["pairingArchitecture"], "llama");
      EXPECT_TRUE(j["summary"]["onlyInCheckpoint"].empty());
      EXPECT_TRUE(j["summary"]["onlyInReference"].empty());
    }
  }
  EXPECT_EQ(tensors, 21);
  // The quantized GGUF pairs the same way; Q and K are not scrambled.
  CommandResult q8 = Run({"diff", *demo + "/model-q8_0.gguf", *demo + "/source",
                          "--fail-on", "max_err_steps>0.6"});
  EXPECT_EQ(q8.exit_code, 0) << q8.err << q8.out;
}

// A CI gate over nothing must not pass: each way of comparing no tensor
// fails saying why, --fail-on or not: exit 1 where the request is wrong
// (a filter matching nothing, the arguments reversed), 2 where the two
// checkpoints have nothing in common.
TEST_P(DiffCliTest, ZeroTensorsComparedIsAnErrorNamingWhy) {
  const std::string gate = "max_err_steps>0.51";
  const std::string q8 = *demo + "/model-q8_0.gguf", src = *demo + "/source";
  struct Case {
    const char* what;
    std::vector<std::string> args;
    ErrorReason reason;
    std::vector<std::string> named;  // values the message names
  };
  const std::string ct = Fixture("safetensors/ct_int8_channel");
  const Case cases[] = {
      {"a filter matching nothing",
       {q8, src, "--filter", "blk.9.*"},
       ErrorReason::kRequestInvalid,
       {"'blk.9.*'", "21"}},
      {"no name matched",
       {q8, Fixture("safetensors/plain")},
       ErrorReason::kFailedPrecondition,
       {"'model.layers.0.self_attn.k_proj.weight'", "'blk.0.attn_k.weight'"}},
      {"every shape mismatched",
       {q8, Fixture("gguf/source_f32.gguf"), "--filter", "blk.0.*_[qd]*"},
       ErrorReason::kFailedPrecondition,
       {"blk.0.attn_q.weight: [256,256] vs [4,256]",
        "blk.0.ffn_down.weight: [256,512] vs [4,256]"}},
      // Reversed, the demo pairs perfectly; the fixture would "succeed"
      // with errors of hundreds of steps.
      {"GGUF arguments reversed",
       {src, q8},
       ErrorReason::kRequestInvalid,
       {"holds 16"}},
      {"safetensors arguments reversed",
       {ct + "/source", ct},
       ErrorReason::kRequestInvalid,
       {}},
  };
  for (const Case& c : cases) {
    for (const bool json : {false, true}) {
      SCOPED_TRACE(absl::StrCat(c.what, json ? " --json" : ""));
      std::vector<std::string> args = {"diff"};
      if (json) args.insert(args.begin(), "--json");
      args.insert(args.end(), c.args.begin(), c.args.end());
      args.insert(args.end(), {"--fail-on", gate});
      CommandResult r = Run(args);
      EXPECT_EQ(r.exit_code, c.reason == ErrorReason::kRequestInvalid ? 1 : 2)
          << r.out << r.err;
      const absl::Status error = CliErrorOf(r.err);
      EXPECT_THAT(error, HasReason(c.reason));
      for (const std::string& s : c.named) EXPECT_THAT(error, MessageNames(s));
      EXPECT_THAT(r.out, Not(HasSubstr("0 tensors compared")));
      EXPECT_THAT(r.out, Not(HasSubstr("summary")));
    }
  }
}

// What tripped is in the output a CI job keeps: each report's flagged and
// flagReasons, the summary's flagged list, and the table's FAIL-ON column.
TEST_P(DiffCliTest, FailOnMarksTheTensorsItTripsInJsonAndText) {
  // Q8_0's two tensors reach 0.5133 and 0.5125 steps: one trips, one not.
  const double limit = 0.513;
  const std::string gate = "max_err_steps>0.513";
  const std::vector<std::string> args = {"diff",
                                         Fixture("gguf/Q8_0.gguf"),
                                         Fixture("gguf/source_f32.gguf"),
                                         "--fail-on",
                                         gate,
                                         "--fail-on",
                                         "sqnr_db<10"};
  std::vector<std::string> json_args = args;
  json_args.insert(json_args.begin(), "--json");
  CommandResult j = Run(json_args);
  ASSERT_EQ(j.exit_code, 3) << j.err;
  std::vector<std::string> flagged, clean;
  nlohmann::json summary;
  std::istringstream in(j.out);
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line);
    if (e.contains("summary")) {
      summary = e["summary"];
      continue;
    }
    const auto& t = e["tensor"];
    const std::string name = t["name"];
    const bool trips = t["maxErrSteps"].get<double>() > limit;
    EXPECT_EQ(t["flagged"].get<bool>(), trips) << name;
    if (trips) {
      flagged.push_back(name);
      ASSERT_EQ(t["flagReasons"].size(), 1u) << name;
      EXPECT_THAT(t["flagReasons"][0].get<std::string>(),
                  AllOf(HasSubstr("max_err_steps = 0.51"),
                        HasSubstr("(" + gate + ")")));
    } else {
      clean.push_back(name);
      EXPECT_TRUE(t["flagReasons"].empty()) << name;
    }
  }
  EXPECT_EQ(flagged, std::vector<std::string>{"blk.0.attn_q.weight"});
  EXPECT_EQ(clean, std::vector<std::string>{"blk.0.ffn_down.weight"});
  ASSERT_FALSE(summary.is_null());
  EXPECT_EQ(summary["flagged"], nlohmann::json(flagged));

  CommandResult t = Run(args);
  ASSERT_EQ(t.exit_code, 3) << t.err;
  EXPECT_THAT(t.out, HasSubstr("FAIL-ON"));
  EXPECT_THAT(t.out, ::testing::ContainsRegex(
                         "blk.0.attn_q.weight +Q8_0 .* max_err_steps>0.513\n"));
  EXPECT_THAT(t.out,
              ::testing::ContainsRegex("blk.0.ffn_down.weight +Q8_0 .* -\n"));
  EXPECT_THAT(
      t.out,
      HasSubstr("--fail-on: 1 of 2 tensors flagged: blk.0.attn_q.weight"));
  EXPECT_THAT(t.err, HasSubstr("blk.0.attn_q.weight: max_err_steps = 0.51"));

  // Nothing tripped: nothing flagged, exit 0.
  CommandResult ok =
      Run({"--json", "diff", Fixture("gguf/Q8_0.gguf"),
           Fixture("gguf/source_f32.gguf"), "--fail-on", "max_err_steps>0.6"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_THAT(ok.out, Not(HasSubstr("\"flagged\":true")));
  EXPECT_THAT(ok.out, HasSubstr("\"flagged\":[]"));
}

// Gating lives in the request: the CLI's --fail-on and a raw
// QuantDiffRequest.fail_on (what a Python or web client sends) flag the same
// tensors with the same reasons, against a live server and embedded.
TEST_P(DiffCliTest, CliAndRawRequestFlagTheSameTensorsWithTheSameReasons) {
  const std::string quant = Fixture("gguf/Q8_0.gguf");
  const std::string ref = Fixture("gguf/source_f32.gguf");
  const std::vector<std::string> gates = {"max_err_steps>0.513", "sqnr_db<60",
                                          "clipped >= 1000000"};
  std::vector<std::string> args = {"--json", "diff", quant, ref};
  for (const std::string& g : gates) args.insert(args.end(), {"--fail-on", g});
  CommandResult r = Run(args);
  ASSERT_EQ(r.exit_code, 3) << r.err;
  std::map<std::string, std::vector<std::string>> cli_reasons;
  std::vector<std::string> cli_flagged;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line);
    if (e.contains("summary")) {
      for (const auto& n : e["summary"]["flagged"]) cli_flagged.push_back(n);
      continue;
    }
    auto& reasons = cli_reasons[e["tensor"]["name"]];
    if (e["tensor"].contains("flagReasons")) {
      for (const auto& reason : e["tensor"]["flagReasons"])
        reasons.push_back(reason);
    }
  }

  absl::StatusOr<std::unique_ptr<Client>> client =
      GetParam() ? Client::Connect(cli->server().address()) : EmbeddedClient();
  ASSERT_TRUE(client.ok()) << client.status();
  v1::QuantDiffRequest req;
  req.set_checkpoint(quant);
  req.set_reference(ref);
  for (const std::string& g : gates) req.add_fail_on(g);
  std::map<std::string, std::vector<std::string>> raw_reasons;
  std::vector<std::string> raw_flagged;
  absl::Status st = (*client)->QuantDiff(req, [&](const v1::QuantDiffEvent& e) {
    if (e.has_tensor()) {
      auto& reasons = raw_reasons[e.tensor().name()];
      reasons.assign(e.tensor().flag_reasons().begin(),
                     e.tensor().flag_reasons().end());
      EXPECT_EQ(e.tensor().flagged(), !reasons.empty());
    }
    if (e.has_summary()) {
      raw_flagged.assign(e.summary().flagged().begin(),
                         e.summary().flagged().end());
    }
    return true;
  });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(raw_reasons, cli_reasons);
  EXPECT_EQ(raw_flagged, cli_flagged);
  // Q8_0's attn_q trips the step gate; both trip the SQNR one; none clips.
  ASSERT_EQ(raw_reasons.size(), 2u);
  EXPECT_THAT(raw_reasons["blk.0.attn_q.weight"],
              ::testing::ElementsAre(
                  AllOf(HasSubstr("max_err_steps = 0.513"),
                        HasSubstr("(max_err_steps>0.513)")),
                  AllOf(HasSubstr("sqnr_db = "), HasSubstr("(sqnr_db<60)"))));
  EXPECT_THAT(raw_reasons["blk.0.ffn_down.weight"],
              ::testing::ElementsAre(HasSubstr("(sqnr_db<60)")));
  EXPECT_EQ(raw_flagged, (std::vector<std::string>{"blk.0.attn_q.weight",
                                                   "blk.0.ffn_down.weight"}));
}

// A gate that does not parse: the CLI refuses it before calling (exit 1),
// and the service refuses a raw request's before any work, naming it and
// the metrics allowed.
TEST_P(DiffCliTest, ABadGateIsAUsageErrorAndInvalidArgumentOnTheWire) {
  const std::string quant = Fixture("gguf/Q8_0.gguf");
  const std::string ref = Fixture("gguf/source_f32.gguf");
  CommandResult r = Run({"diff", quant, ref, "--fail-on", "max_err_steps>0.5",
                         "--fail-on", "sqnr_db<<25"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(
      CliErrorOf(r.err),
      AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames("--fail-on"),
            MessageNames("'sqnr_db<<25'"), MessageNames("max_err_steps")));
  EXPECT_TRUE(r.out.empty()) << r.out;

  absl::StatusOr<std::unique_ptr<Client>> client =
      GetParam() ? Client::Connect(cli->server().address()) : EmbeddedClient();
  ASSERT_TRUE(client.ok()) << client.status();
  v1::QuantDiffRequest req;
  req.set_checkpoint(quant);
  req.set_reference(ref);
  req.add_fail_on("max_err_steps>0.5");
  req.add_fail_on("snr<25");
  int events = 0;
  absl::Status st = (*client)->QuantDiff(req, [&](const v1::QuantDiffEvent&) {
    ++events;
    return true;
  });
  // The gate, its metric, and the metrics there are.
  EXPECT_THAT(st, AllOf(HasReason(ErrorReason::kRequestInvalid),
                        MessageNames("fail_on[1]"), MessageNames("'snr<25'"),
                        MessageNames("max_err_steps, p99_err_steps")));
  EXPECT_EQ(events, 0);
}

// An empty --imatrix (an unset shell variable) is a usage error naming the
// field: the request cannot carry it (an empty QuantDiffRequest.imatrix is
// none), so the diff would run unweighted and pass for a weighted one.
TEST_P(DiffCliTest, AnEmptyImatrixPathIsAUsageErrorNotAnUnweightedDiff) {
  const std::string ct = Fixture("safetensors/ct_int8_channel");
  for (const bool json : {false, true}) {
    std::vector<std::string> args = {"diff", ct, ct + "/source", "--imatrix",
                                     ""};
    if (json) args.insert(args.begin(), "--json");
    const CommandResult r = Run(args);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_THAT(CliErrorOf(r.err),
                AllOf(HasReason(ErrorReason::kRequestInvalid),
                      MessageNames("--imatrix")));
    if (json) {
      EXPECT_THAT(CliJsonErrorOf(r.out),
                  AllOf(HasReason(ErrorReason::kRequestInvalid),
                        HasMetadata("field", "imatrix")));
    } else {
      EXPECT_EQ(r.out, "");  // no table: nothing was compared
    }
  }
}

// An importance matrix of another model (llama.cpp names against a Hugging
// Face checkpoint) weighs nothing: the table gives no weighted SQNR ("-",
// not "inf dB" over no error), stderr warns, and the summary's weighted
// figures are 0 (no figure), as in each unweighted report. The same matrix
// against its own model weighs, without the warning.
TEST(DiffImatrixTest, AMatrixThatWeighsNoTensorGivesNoFigureAndAWarning) {
  const std::string& demo = ::tensormorph::testing::DemoDir();
  const std::string imatrix =
      ::tensormorph::testing::MakeTempDir() + "/imatrix.dat";
  ASSERT_TRUE(::tensormorph::testing::WriteDemoImatrix(imatrix));
  const std::vector<std::string> foreign = {
      "diff", demo + "/int8", demo + "/source", "--imatrix", imatrix};
  const CommandResult text = RunCommand(
      {CliPath(), foreign[0], foreign[1], foreign[2], foreign[3], foreign[4]});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("imatrix: 0 tensors weighted, weighted "
                                  "SQNR -\n"));
  EXPECT_THAT(text.out, Not(HasSubstr("weighted SQNR inf")));
  EXPECT_THAT(text.err, AllOf(HasSubstr("warning: the importance matrix "
                                        "weighed none of the"),
                              HasSubstr("another model's")));
  const CommandResult json =
      RunCommand({CliPath(), "--json", foreign[0], foreign[1], foreign[2],
                  foreign[3], foreign[4]});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(json.err, HasSubstr("weighed none of the"));
  int reports = 0;
  for (absl::string_view line :
       absl::StrSplit(json.out, '\n', absl::SkipEmpty())) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("tensor")) {
      ++reports;
      EXPECT_EQ(j["tensor"]["imatrixUse"], "IMATRIX_USE_MISSING") << line;
      EXPECT_EQ(j["tensor"].value("weightedSqnrDb", 0.0), 0.0) << line;
    } else if (j.contains("summary")) {
      const nlohmann::json& s = j["summary"];
      EXPECT_EQ(s.value("imatrixWeighted", "0"), "0") << line;
      EXPECT_EQ(s.value("weightedSqnrDb", nlohmann::json(0.0)),
                nlohmann::json(0.0))
          << line;
      EXPECT_EQ(s["imatrixMissing"].size(), static_cast<size_t>(reports));
    }
  }
  EXPECT_GT(reports, 0);
  // Its own model: weighed, a figure, no warning.
  const CommandResult own = RunCommand(
      {CliPath(), "diff", demo + "/model-q4_k_m.gguf", demo + "/model-f32.gguf",
       "--imatrix", imatrix, "--filter", "blk.0.*", "--top", "0"});
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_THAT(own.out,
              HasSubstr("imatrix: 7 tensors weighted, weighted SQNR "));
  EXPECT_THAT(own.out, HasSubstr(" dB (weighted squared error "));
  EXPECT_THAT(own.err, Not(HasSubstr("warning")));
}

// A quantized GGUF q.gguf in a fresh directory whose blk.0.ffn_down.weight
// is of ggml type id 200, which no ggml has (any type without a decoder),
// with blk.0.attn_norm.weight (F32) beside it when `with_decodable`, and
// its source s.gguf of both in F32; returns the directory.
std::string UndecodablePair(bool with_decodable) {
  namespace t = ::tensormorph::testing;
  const std::string dir = t::MakeTempDir();
  std::vector<float> w(256);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.01f * (i % 17);
  const std::string f32(reinterpret_cast<const char*>(w.data()), w.size() * 4);
  t::GgufSpec quant, source;
  if (with_decodable) {
    quant.tensors.push_back({"blk.0.attn_norm.weight", {256}, 0, f32});
    source.tensors.push_back({"blk.0.attn_norm.weight", {256}, 0, f32});
  }
  quant.tensors.push_back(
      {"blk.0.ffn_down.weight", {256}, 200, std::string(64, '\x11')});
  source.tensors.push_back({"blk.0.ffn_down.weight", {256}, 0, f32});
  t::WriteFile(dir + "/q.gguf", t::BuildGguf(quant));
  t::WriteFile(dir + "/s.gguf", t::BuildGguf(source));
  return dir;
}

// A tensor Tensormorph cannot decode is a gap the report names (its type
// and why), not the end of the diff: the others are compared and the exit
// code says "compared with gaps". With every pair undecodable the answer
// is the list of gaps, not a refusal that hides them: the same table, the
// same exit code.
TEST(DiffGapsTest, AnUndecodableTensorIsListedAndTheRestCompared) {
  for (const bool with_decodable : {true, false}) {
    SCOPED_TRACE(with_decodable ? "beside a decodable one" : "alone");
    const std::string dir = UndecodablePair(with_decodable);
    const CommandResult text = ::tensormorph::testing::RunCommand(
        {CliPath(), "diff", dir + "/q.gguf", dir + "/s.gguf"});
    EXPECT_EQ(text.exit_code, 4) << text.err;
    EXPECT_THAT(text.out, HasSubstr("not compared, cannot decode (1):"));
    EXPECT_THAT(text.out,
                HasSubstr("blk.0.ffn_down.weight: ggml type 200 (unknown): "));
    EXPECT_THAT(text.out, HasSubstr(with_decodable ? "\n1 tensor compared"
                                                   : "\n0 tensors compared"));
    const CommandResult json = ::tensormorph::testing::RunCommand(
        {CliPath(), "--json", "diff", dir + "/q.gguf", dir + "/s.gguf"});
    EXPECT_EQ(json.exit_code, 4) << json.err;
    EXPECT_THAT(json.out,
                HasSubstr("\"undecodable\":[\"blk.0.ffn_down.weight"));
    EXPECT_THAT(json.err, Not(HasSubstr("FAILED_PRECONDITION")));
  }
}

INSTANTIATE_TEST_SUITE_P(BothModes, DiffCliTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Remote" : "Embedded";
                         });

TEST(QuantDiffRpcTest, StreamsProgressReportsAndASummaryAndFlagsByThreshold) {
  testing::LoopbackServer s =
      testing::StartLoopbackServer({FixturesDir()}, /*workers=*/2);
  Client* c = s.client.get();
  v1::QuantDiffRequest req;
  req.set_checkpoint("gguf/Q4_K.gguf");
  req.set_reference("gguf/source_f32.gguf");
  req.add_fail_on("sqnr_db<30");
  std::vector<v1::QuantDiffEvent> events;
  absl::Status st = c->QuantDiff(req, [&](const v1::QuantDiffEvent& e) {
    events.push_back(e);
    return true;
  });
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_GE(events.size(), 4u);
  EXPECT_TRUE(events.front().has_progress());
  EXPECT_TRUE(events.back().has_summary());
  int reports = 0;
  for (const auto& e : events) {
    if (!e.has_tensor()) continue;
    ++reports;
    EXPECT_TRUE(e.tensor().flagged())
        << e.tensor().name();  // Q4_K is below 30 dB
    EXPECT_THAT(e.tensor().flag_reasons(0), HasSubstr("sqnr_db"));
  }
  EXPECT_EQ(reports, 2);
  EXPECT_EQ(events.back().summary().flagged_size(), 2);

  // Cancelling after the first event frees the server's work.
  int seen = 0;
  st = c->QuantDiff(req, [&](const v1::QuantDiffEvent&) { return ++seen < 1; });
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(s.server->state().metrics.WaitForIdle(absl::Seconds(30)));
  // Unknown checkpoints are NOT_FOUND, and the server keeps serving.
  req.set_reference("gguf/nope.gguf");
  st = c->QuantDiff(req, [](const v1::QuantDiffEvent&) { return true; });
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(c->GetServerInfo().ok());
}

// The service itself refuses a diff that compares nothing, so every client
// (Python, web) gets the reason, not an empty success.
TEST(QuantDiffRpcTest, ZeroPairsAndReversedArgumentsFailTheCall) {
  testing::LoopbackServer s =
      testing::StartLoopbackServer({FixturesDir()}, /*workers=*/2);
  auto call = [&](const std::string& quant, const std::string& ref,
                  const std::string& filter) {
    v1::QuantDiffRequest req;
    req.set_checkpoint(quant);
    req.set_reference(ref);
    req.set_filter(filter);
    int events = 0;
    absl::Status st = s.client->QuantDiff(req, [&](const v1::QuantDiffEvent&) {
      ++events;
      return true;
    });
    EXPECT_EQ(events, 0) << quant << " " << ref;
    return st;
  };
  EXPECT_THAT(
      call("gguf/Q4_K.gguf", "gguf/source_f32.gguf", "x*"),
      AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames("'x*'")));
  EXPECT_THAT(call("gguf/source_f32.gguf", "gguf/Q4_K.gguf", ""),
              HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(call("safetensors/ct_int8_channel", "safetensors/plain", ""),
              HasReason(ErrorReason::kFailedPrecondition));
  EXPECT_TRUE(s.client->GetServerInfo().ok());
}

// A diff refused before its first event finishes while its worker still
// holds the call's lock; the call's end must wait for that worker (under
// ASan a use after free, here once a worker spinning forever).
TEST(QuantDiffRpcTest, ManyRefusedDiffsLeaveEveryWorkerFree) {
  testing::LoopbackServer s =
      testing::StartLoopbackServer({FixturesDir()}, /*workers=*/2);
  v1::QuantDiffRequest req;
  req.set_checkpoint("gguf/source_f32.gguf");  // reversed
  req.set_reference("gguf/Q4_K.gguf");
  for (int i = 0; i < 300; ++i) {
    absl::Status st = s.client->QuantDiff(
        req, [](const v1::QuantDiffEvent&) { return true; });
    ASSERT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << i << st;
  }
  EXPECT_TRUE(s.server->state().metrics.WaitForIdle(absl::Seconds(20)));
  EXPECT_EQ(s.server->state().admitted_streams.load(), 0);
  EXPECT_EQ(s.server->state().active_diffs.load(), 0);
  EXPECT_TRUE(s.client->GetServerInfo().ok());
}

}  // namespace
}  // namespace tensormorph::diff_command_test
