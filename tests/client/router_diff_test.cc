// A diff over checkpoints split across servers: three tensormorphd run with
// --partial-shards each hold some shards of a quantized checkpoint and the
// source shards of the same tensors, and a client given all three diffs
// them exactly as one server holding both checkpoints does: every report,
// the summary, the refusals, the gates and the parts (which diff-merge
// puts back together). A pair whose halves no one server holds, and a
// server that died, are named.
#include <signal.h>

#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "client/diff_plan.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/diff_events.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/sharded_checkpoint.h"
#include "tests/support/sharded_diff_checkpoint.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::CopyShards;
using ::tensormorph::testing::ExpectSameDiff;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::ParseDiffJson;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::ServerProcess;
using ::tensormorph::testing::ShardedCheckpoint;
using ::tensormorph::testing::ShardedDiffCheckpoint;
using ::tensormorph::testing::StatusIs;
using ::tensormorph::testing::WriteFile;
using ::testing::HasSubstr;

std::string QuantShard(int i) {
  return absl::StrFormat("model-%05d-of-00004.safetensors", i);
}
std::string SourceShard(int i) {
  return absl::StrFormat("model-%05d-of-00002.safetensors", i);
}

// Which shards (1-based) one server holds: of the quantized checkpoint
// (layer l in shard l+1; embedding, final norm and the odd ones out in 4)
// and of its source (layers 0 and 1 in shard 1, the rest in 2).
struct Holding {
  std::vector<int> quant, source;
};

// Each server the quantized shards and the source shards of the same
// tensors; source shard 1 on two servers.
const std::vector<Holding> kAffine = {{{1}, {1}}, {{2}, {1}}, {{3, 4}, {2}}};

// A root per server, holding `layout`'s shards of `c` (indexes and configs
// in each).
std::vector<std::string> PartialRoots(const ShardedDiffCheckpoint& c,
                                      const std::vector<Holding>& layout) {
  std::vector<std::string> roots;
  for (const Holding& h : layout) {
    roots.push_back(MakeTempDir());
    std::vector<std::string> q, s;
    for (int i : h.quant) q.push_back(QuantShard(i));
    for (int i : h.source) s.push_back(SourceShard(i));
    CopyShards(ShardedCheckpoint{c.root + "/" + c.quant, {}}, q,
               roots.back() + "/" + c.quant);
    CopyShards(ShardedCheckpoint{c.root + "/" + c.reference, {}}, s,
               roots.back() + "/" + c.reference);
  }
  return roots;
}

struct Servers {
  std::vector<std::unique_ptr<ServerProcess>> partial;
  std::vector<std::string> addresses;
  std::string List() const { return absl::StrJoin(addresses, ","); }
};

Servers StartPartial(const std::vector<std::string>& roots) {
  Servers s;
  for (const std::string& root : roots) {
    s.partial.push_back(std::make_unique<ServerProcess>(
        std::vector<std::string>{root},
        std::vector<std::string>{"--partial-shards"}));
    s.addresses.push_back(s.partial.back()->address());
  }
  return s;
}

std::unique_ptr<Client> Connect(const std::string& target) {
  auto c = Client::Connect(target);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

using Diff = ::tensormorph::testing::DiffEvents;

Diff RunDiff(Client& c, const v1::QuantDiffRequest& req) {
  Diff d;
  d.status = c.QuantDiff(req, [&](const v1::QuantDiffEvent& e) {
    if (e.has_tensor()) d.reports.push_back(e.tensor());
    if (e.has_progress()) d.progress.push_back(e.progress());
    if (e.has_summary()) d.summaries.push_back(e.summary());
    return true;
  });
  return d;
}

class RouterDiffTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ckpt_ = new ShardedDiffCheckpoint(
        ::tensormorph::testing::WriteShardedDiffCheckpoint());
    servers_ = new Servers(StartPartial(PartialRoots(*ckpt_, kAffine)));
    whole_ = new ServerProcess({ckpt_->root});
  }
  static void TearDownTestSuite() {
    delete whole_;
    delete servers_;
    delete ckpt_;
  }
  void SetUp() override {
    routed_ = Connect(servers_->List());
    single_ = Connect(whole_->address());
  }

  static v1::QuantDiffRequest Request() {
    v1::QuantDiffRequest req;
    req.set_checkpoint(ckpt_->quant);
    req.set_reference(ckpt_->reference);
    return req;
  }
  // `tensormorph --server SERVER --json diff quant source extra...`.
  static CommandResult Cli(const std::string& server,
                           std::vector<std::string> args) {
    std::vector<std::string> argv = {CliPath(), "--server", server};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  }
  static std::vector<std::string> DiffArgs(std::vector<std::string> extra) {
    std::vector<std::string> args = {"--json", "diff", ckpt_->quant,
                                     ckpt_->reference};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  static ShardedDiffCheckpoint* ckpt_;
  static Servers* servers_;
  static ServerProcess* whole_;
  std::unique_ptr<Client> routed_, single_;
};

ShardedDiffCheckpoint* RouterDiffTest::ckpt_ = nullptr;
Servers* RouterDiffTest::servers_ = nullptr;
ServerProcess* RouterDiffTest::whole_ = nullptr;

// Each layer's pairs can be compared on one server only (kAffine): the
// diff succeeding means all three took their share.
TEST_F(RouterDiffTest, TheDiffIsTheSingleServersFieldForField) {
  const Diff routed = RunDiff(*routed_, Request());
  const Diff single = RunDiff(*single_, Request());
  ASSERT_TRUE(single.status.ok()) << single.status;
  EXPECT_EQ(single.reports.size(), ckpt_->compared.size());
  ExpectSameDiff(routed, single);
  // The lists of the whole plan, though no server holds it all.
  const v1::DiffSummary& s = routed.summaries[0];
  EXPECT_THAT(s.only_in_checkpoint(),
              ::testing::ElementsAre(ckpt_->only_in_quant));
  EXPECT_THAT(s.only_in_reference(),
              ::testing::ElementsAre(ckpt_->only_in_reference));
  EXPECT_EQ(s.shape_mismatches_size(), 1);
  EXPECT_EQ(s.pairing(), v1::DIFF_PAIRING_BY_NAME);
  // Progress summed over the servers: first none done, last all.
  ASSERT_GE(routed.progress.size(), 2u);
  EXPECT_EQ(routed.progress.front().tensors_done(), 0);
  EXPECT_EQ(routed.progress.back().tensors_done(),
            static_cast<int64_t>(ckpt_->compared.size()));
  EXPECT_EQ(routed.progress.back().tensors_total(),
            static_cast<int64_t>(ckpt_->compared.size()));
  EXPECT_EQ(routed.progress.back().bytes_done(),
            routed.progress.back().bytes_total());
  EXPECT_EQ(routed.progress.back().bytes_total(), s.bytes_read());
}

TEST_F(RouterDiffTest, OptionsFiltersAndNamedTensorsAreTheSingleServers) {
  std::vector<v1::QuantDiffRequest> reqs;
  for (const char* filter :
       {"*mlp*", "model.layers.1.*", "*norm*", "model.[en]*"}) {
    reqs.push_back(Request());
    reqs.back().set_filter(filter);
  }
  reqs.push_back(Request());
  reqs.back().set_top_k(3);
  reqs.back().set_worst_groups(0);
  reqs.push_back(Request());
  for (const char* t :
       {"model.layers.2.mlp.up_proj.weight",
        "model.layers.0.input_layernorm.weight", "model.mismatch.weight"}) {
    reqs.back().add_tensors(t);
  }
  for (const v1::QuantDiffRequest& req : reqs) {
    SCOPED_TRACE(req.ShortDebugString());
    ExpectSameDiff(RunDiff(*routed_, req), RunDiff(*single_, req));
  }
}

// A caller that stops at the first report stops every sub-diff.
TEST_F(RouterDiffTest, ACallerThatStopsCancelsTheDiff) {
  int reports = 0;
  const absl::Status s =
      routed_->QuantDiff(Request(), [&](const v1::QuantDiffEvent& e) {
        reports += e.has_tensor();
        return !e.has_tensor();
      });
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kCancelled, "by the caller"));
  EXPECT_EQ(reports, 1);
  // The servers are free for the next.
  EXPECT_TRUE(RunDiff(*routed_, Request()).status.ok());
}

// A callback that throws on a sub-diff's thread (client.h says it must
// not) fails the call INTERNAL instead of ending the process.
TEST_F(RouterDiffTest, ACallbackThatThrowsFailsInternal) {
  const absl::Status s =
      routed_->QuantDiff(Request(), [&](const v1::QuantDiffEvent& e) {
        if (e.has_tensor()) throw std::runtime_error("the dashboard broke");
        return true;
      });
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInternal,
                          "callback threw: the dashboard broke"));
  EXPECT_TRUE(RunDiff(*routed_, Request()).status.ok());
}

// The server's refusals, with its codes and its very messages.
TEST_F(RouterDiffTest, RefusalsAreTheSingleServers) {
  std::vector<v1::QuantDiffRequest> reqs;
  reqs.push_back(Request());
  reqs.back().set_filter("nothing.*");  // a glob matching nothing
  reqs.push_back(Request());
  reqs.back().set_filter("model.extra.*");  // nothing left to compare
  reqs.push_back(Request());
  reqs.back().set_filter("model.m*");
  reqs.back().add_tensors("model.mismatch.weight");  // nothing left either
  reqs.push_back(Request());                         // reversed arguments
  reqs.back().set_checkpoint(ckpt_->reference);
  reqs.back().set_reference(ckpt_->quant);
  reqs.push_back(Request());
  reqs.back().add_tensors("model.nope.weight");
  reqs.push_back(Request());
  reqs.back().set_filter("*mlp*");
  reqs.back().add_tensors("model.norm.weight");
  reqs.push_back(Request());
  reqs.back().mutable_part()->set_index(3);
  reqs.back().mutable_part()->set_count(3);
  for (const v1::QuantDiffRequest& req : reqs) {
    SCOPED_TRACE(req.ShortDebugString());
    const Diff single = RunDiff(*single_, req);
    EXPECT_FALSE(single.status.ok());
    EXPECT_EQ(RunDiff(*routed_, req).status, single.status);
  }
  // A checkpoint no server has: NOT_FOUND as one server says it (naming
  // that server's roots).
  v1::QuantDiffRequest nope = Request();
  nope.set_checkpoint("nope");
  EXPECT_THAT(RunDiff(*routed_, nope).status,
              StatusIs(absl::StatusCode::kNotFound,
                       "checkpoint 'nope' not found under the server's roots"));
}

// A gate some tensors trip and others not: halfway between two of the
// run's distinct errors.
TEST_F(RouterDiffTest, GatesFlagAsOnTheSingleServerWithExitCode3) {
  const Diff plain = RunDiff(*single_, Request());
  std::vector<double> steps;
  for (const auto& r : plain.reports) steps.push_back(r.max_err_steps());
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  ASSERT_GE(steps.size(), 2u);
  const size_t k = (steps.size() - 1) / 2;
  const std::string gate =
      absl::StrFormat("max_err_steps>%.17g", (steps[k] + steps[k + 1]) / 2);
  v1::QuantDiffRequest req = Request();
  req.add_fail_on(gate);
  req.add_fail_on("sqnr_db<1");
  const Diff routed = RunDiff(*routed_, req);
  const Diff single = RunDiff(*single_, req);
  ASSERT_GT(single.summaries.at(0).flagged_size(), 0);
  ExpectSameDiff(routed, single);
  // The CLI: exit 3 both ways, the same events.
  const CommandResult r = Cli(servers_->List(), DiffArgs({"--fail-on", gate}));
  const CommandResult s = Cli(whole_->address(), DiffArgs({"--fail-on", gate}));
  EXPECT_EQ(s.exit_code, 3) << s.err;
  EXPECT_EQ(r.exit_code, 3) << r.err;
  ExpectSameDiff(ParseDiffJson(r.out), ParseDiffJson(s.out));
  EXPECT_THAT(r.err, HasSubstr("--fail-on tripped by"));
  // A sub-diff refused fails the call with its status, naming its server.
  v1::QuantDiffRequest big = Request();
  big.set_top_k(1000000);
  const absl::Status refused = RunDiff(*routed_, big).status;
  EXPECT_EQ(refused.code(), RunDiff(*single_, big).status.code());
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kResourceExhausted,
                                "top_k 1000000 is outside the limit"));
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr(" pair(s) on 127.0.0.1:"));
  // A gate that does not parse: the server's INVALID_ARGUMENT.
  v1::QuantDiffRequest bad = Request();
  bad.add_fail_on("max_err_steps>>1");
  EXPECT_THAT(RunDiff(*routed_, bad).status,
              StatusIs(absl::StatusCode::kInvalidArgument, "fail_on[0]"));
}

// `--part i/3` three times through the router and `diff-merge`: the single
// run; each part the single server's part (the same pairs, DiffPartInfo
// and fingerprint).
TEST_F(RouterDiffTest, PartsThroughTheRouterMergeIntoTheSingleRun) {
  const std::string dir = MakeTempDir();
  const CommandResult whole = Cli(whole_->address(), DiffArgs({}));
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  std::vector<std::string> files;
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(absl::StrCat("part ", i));
    const std::vector<std::string> args =
        DiffArgs({"--part", absl::StrCat(i, "/3")});
    const CommandResult r = Cli(servers_->List(), args);
    const CommandResult s = Cli(whole_->address(), args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_EQ(s.exit_code, 0) << s.err;
    const Diff routed = ParseDiffJson(r.out), single = ParseDiffJson(s.out);
    ExpectSameDiff(routed, single);
    ASSERT_TRUE(routed.summaries.at(0).has_part());
    EXPECT_EQ(routed.summaries[0].part().plan_fingerprint(),
              single.summaries.at(0).part().plan_fingerprint());
    files.push_back(absl::StrCat(dir, "/part-", i, ".jsonl"));
    WriteFile(files.back(), r.out);
  }
  std::vector<std::string> merge = {"--json", "diff-merge"};
  merge.insert(merge.end(), files.begin(), files.end());
  const CommandResult m = Cli(whole_->address(), merge);
  ASSERT_EQ(m.exit_code, 0) << m.err;
  ExpectSameDiff(ParseDiffJson(m.out), ParseDiffJson(whole.out));
  // More parts than pairs: the empty ones too are the single server's.
  for (int i : {0, 40, 63}) {
    v1::QuantDiffRequest req = Request();
    req.mutable_part()->set_index(i);
    req.mutable_part()->set_count(64);
    SCOPED_TRACE(req.ShortDebugString());
    ExpectSameDiff(RunDiff(*routed_, req), RunDiff(*single_, req));
  }
}

// The plan sums stored_bytes off the wire: a negative count, or two whose
// sum overflows, is INTERNAL naming the pair, never a wrapped total.
TEST(RouterDiffPlanTest, ByteCountsFromTheWireAreChecked) {
  auto tensor = [](int64_t bytes) {
    v1::TensorInfo t;
    t.set_name("w");
    t.add_shape(2);
    t.set_num_elements(2);
    t.set_stored_bytes(bytes);
    return t;
  };
  v1::QuantDiffRequest req;
  req.set_checkpoint("q");
  req.set_reference("r");
  EXPECT_TRUE(PlanDiffByName(req, {tensor(8)}, {tensor(8)}).ok());
  EXPECT_THAT(PlanDiffByName(req, {tensor(-8)}, {tensor(8)}),
              StatusIs(absl::StatusCode::kInternal,
                       "the pair 'w' lists stored_bytes -8"));
  const int64_t huge = std::numeric_limits<int64_t>::max();
  EXPECT_THAT(PlanDiffByName(req, {tensor(huge)}, {tensor(huge)}),
              StatusIs(absl::StatusCode::kInternal, "fits 64 bits"));
}

TEST(RouterDiffLayoutTest, APairWhoseHalvesAreApartIsNamedBeforeAnyWork) {
  const ShardedDiffCheckpoint c =
      ::tensormorph::testing::WriteShardedDiffCheckpoint();
  // Layer 0's quantized shard is on the first, its source on the second.
  const Servers s =
      StartPartial(PartialRoots(c, {{{1}, {2}}, {{2, 3, 4}, {1, 2}}}));
  auto client = Connect(s.List());
  v1::QuantDiffRequest req;
  req.set_checkpoint(c.quant);
  req.set_reference(c.reference);
  int events = 0;
  const absl::Status st =
      client->QuantDiff(req, [&](const v1::QuantDiffEvent&) {
        ++events;
        return true;
      });
  EXPECT_THAT(
      st, StatusIs(absl::StatusCode::kFailedPrecondition,
                   "'model.layers.0.input_layernorm.weight' "
                   "(quantized on " +
                       s.addresses[0] + "; source on " + s.addresses[1] + ")"));
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("Keep a model's quantized and source shards on the "
                        "same server"));
  EXPECT_EQ(events, 0);
  // A filter that leaves only pairs one server holds runs.
  req.set_filter("model.layers.2.*");
  EXPECT_TRUE(RunDiff(*client, req).status.ok());
}

TEST(RouterDiffLayoutTest, AKilledServerIsUnavailableNamingIt) {
  const ShardedDiffCheckpoint c =
      ::tensormorph::testing::WriteShardedDiffCheckpoint();
  Servers s = StartPartial(PartialRoots(c, kAffine));
  auto client = Connect(s.List());
  v1::QuantDiffRequest req;
  req.set_checkpoint(c.quant);
  req.set_reference(c.reference);
  ASSERT_TRUE(RunDiff(*client, req).status.ok());
  ::kill(s.partial[2]->pid(), SIGKILL);
  s.partial[2]->WaitForExit();
  EXPECT_THAT(RunDiff(*client, req).status,
              StatusIs(absl::StatusCode::kUnavailable, s.addresses[2]));
  // A fresh client too, and the CLI (exit 2).
  EXPECT_THAT(RunDiff(*Connect(s.List()), req).status,
              StatusIs(absl::StatusCode::kUnavailable, s.addresses[2]));
  const CommandResult r = RunCommand(
      {CliPath(), "--server", s.List(), "diff", c.quant, c.reference});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(s.addresses[2]));
  // Still so with a filter on what the other two hold: the plan's lists
  // need every listing (a merged listing never drops tensors silently).
  req.set_filter("model.layers.[01].*");
  EXPECT_THAT(RunDiff(*client, req).status,
              StatusIs(absl::StatusCode::kUnavailable, s.addresses[2]));
}

// A server that stops answering mid-diff (black-holed: its connection open,
// nothing sent) does not hold the call once another sub-diff failed: every
// sub-diff is cancelled at once, not at its next event.
TEST(RouterDiffLayoutTest, AFailureEndsASubDiffThatHangs) {
  const ShardedDiffCheckpoint c =
      ::tensormorph::testing::WriteShardedDiffCheckpoint();
  Servers s = StartPartial(PartialRoots(c, kAffine));
  auto client = Connect(s.List());
  v1::QuantDiffRequest req;
  req.set_checkpoint(c.quant);
  req.set_reference(c.reference);
  bool first = true;
  const absl::Time start = absl::Now();
  // The router's first progress event comes after the plan, before any
  // sub-diff starts: one server then hangs and another dies.
  const absl::Status st =
      client->QuantDiff(req, [&](const v1::QuantDiffEvent&) {
        if (first) {
          first = false;
          ::kill(s.partial[0]->pid(), SIGSTOP);
          ::kill(s.partial[2]->pid(), SIGKILL);
          s.partial[2]->WaitForExit();
        }
        return true;
      });
  ::kill(s.partial[0]->pid(), SIGCONT);
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kUnavailable, s.addresses[2]));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

}  // namespace
}  // namespace tensormorph
