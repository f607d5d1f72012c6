// QuantDiff end to end: the RPC through the client, and the diff command as
// CI runs it (--json lines, --fail-on exit codes), remote and embedded.
#include <sstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/server.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/loopback_server.h"
#include "tests/support/process.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::FixturesDir;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::ServerProcess;
using ::testing::HasSubstr;

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
  EXPECT_THAT(bad.err, HasSubstr("unknown metric 'bogus'"));
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
  EXPECT_GT(std::stoll(lines[0]["tensor"]["clipped"].get<std::string>()), 0);
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
      EXPECT_EQ(j["summary"]["pairing"], "GGUF -> Hugging Face names (llama)");
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
  req.set_min_sqnr_db(30);
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

}  // namespace
}  // namespace tensormorph
