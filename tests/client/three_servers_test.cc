// Three tensormorphd behind one client target, each serving the same object
// store prefix (--root s3://models/ckpts/, its own --cache-dir): a module
// whose weight and scale sit in different shards reads bit for bit as from
// one server on a local copy, a diff equals that server's diff, a server
// killed mid-diff is named and the next calls fail over, and `ls` names the
// server that is down. The client is a plain gRPC client: no placement, no
// merging (client/client.h).
#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/cli_error.h"
#include "tests/support/diff_events.h"
#include "tests/support/process.h"
#include "tests/support/sharded_diff_checkpoint.h"
#include "tests/support/status_matchers.h"
#include "tests/support/storage_servers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;
using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::DiffEvents;
using ::tensormorph::testing::ExpectSameDiff;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ParseDiffJson;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::ServerProcess;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kBucket[] = "models";
constexpr char kRoot[] = "s3://models/ckpts/";
// fp8_block_sharded: down_proj's FP8 weight in shard 1, its
// weight_scale_inv in shard 2.
constexpr char kStraddling[] = "model.layers.0.mlp.down_proj.weight";

// The checkpoints, on disk: fp8/ (the straddling module), fp8-source/ (its
// BF16 source), quant/ and source/ (WriteShardedDiffCheckpoint).
std::string WriteTree() {
  const std::string dir = testing::MakeTempDir();
  const std::string fp8 = testing::Fixture("safetensors/fp8_block_sharded");
  fs::create_directories(dir + "/fp8");
  for (const char* name : {"config.json", "model.safetensors.index.json",
                           "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors"}) {
    fs::copy_file(fp8 + "/" + name, dir + "/fp8/" + name);
  }
  fs::create_directories(dir + "/fp8-source");
  fs::copy_file(fp8 + "/source/model.safetensors",
                dir + "/fp8-source/model.safetensors");
  const testing::ShardedDiffCheckpoint diff =
      testing::WriteShardedDiffCheckpoint();
  fs::copy(diff.root, dir, fs::copy_options::recursive);
  return dir;
}

// Every file of `dir` uploaded as kRoot's key of the same relative path.
void Upload(const testing::S3rverServer& s3, const std::string& dir) {
  for (const auto& f : fs::recursive_directory_iterator(dir)) {
    if (!f.is_regular_file()) continue;
    s3.Put("ckpts/" + fs::relative(f.path(), dir).string(),
           testing::ReadFileBytes(f.path().string()));
  }
}

std::unique_ptr<Client> Connect(const std::string& target) {
  auto c = Client::Connect(target);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

v1::Counters CountersOf(const std::string& address) {
  auto info = Connect(address)->GetServerInfo();
  EXPECT_TRUE(info.ok()) << info.status();
  return info.ok() ? info->counters() : v1::Counters();
}

DiffEvents Diff(Client& c, const std::string& quant, const std::string& ref) {
  v1::QuantDiffRequest req;
  req.set_checkpoint(quant);
  req.set_reference(ref);
  DiffEvents out;
  out.status = c.QuantDiff(req, [&](const v1::QuantDiffEvent& e) {
    if (e.has_tensor()) out.reports.push_back(e.tensor());
    if (e.has_progress()) out.progress.push_back(e.progress());
    if (e.has_summary()) out.summaries.push_back(e.summary());
    return true;
  });
  return out;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// One s3rver (behind the tests' fault proxy, which can delay its answers),
// a tensormorphd on the local copy, and the servers on the object store.
class ThreeServersTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string js = testing::S3rverPath();
    if (js.empty() || !fs::exists(js)) return;
    local_ = new std::string(WriteTree());
    s3_ = new testing::S3rverServer(js, kBucket);
    Upload(*s3_, *local_);
    proxy_ = new testing::FaultProxy(s3_->port());
    // The servers read these at start (docs/storage.md): s3rver's own key,
    // through the proxy.
    setenv("AWS_ENDPOINT_URL", proxy_->Url("").c_str(), 1);
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    setenv("AWS_REGION", "us-east-1", 1);
    single_ = new ServerProcess({*local_});
    three_ = new std::vector<std::unique_ptr<ServerProcess>>(StartThree());
  }
  static void TearDownTestSuite() {
    delete three_;
    delete single_;
    delete proxy_;
    delete s3_;
    delete local_;
    three_ = nullptr;
  }
  void SetUp() override {
    if (three_ == nullptr) {
      GTEST_SKIP() << "s3rver is not fetched (tests/io/fetch_s3rver.sh BUILD)";
    }
  }

  static std::vector<std::unique_ptr<ServerProcess>> StartThree() {
    std::vector<std::unique_ptr<ServerProcess>> out;
    for (int i = 0; i < 3; ++i) {
      out.push_back(std::make_unique<ServerProcess>(
          std::vector<std::string>{kRoot},
          std::vector<std::string>{"--cache-dir", testing::MakeTempDir()}));
    }
    return out;
  }
  static std::vector<std::string> Addresses(
      const std::vector<std::unique_ptr<ServerProcess>>& servers) {
    std::vector<std::string> out;
    for (const auto& s : servers) out.push_back(s->address());
    return out;
  }
  // "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3": a channel each.
  static std::string Target(
      const std::vector<std::unique_ptr<ServerProcess>>& servers) {
    return absl::StrJoin(Addresses(servers), ",");
  }

  static std::string* local_;
  static testing::S3rverServer* s3_;
  static testing::FaultProxy* proxy_;
  static ServerProcess* single_;
  static std::vector<std::unique_ptr<ServerProcess>>* three_;
};

std::string* ThreeServersTest::local_ = nullptr;
testing::S3rverServer* ThreeServersTest::s3_ = nullptr;
testing::FaultProxy* ThreeServersTest::proxy_ = nullptr;
ServerProcess* ThreeServersTest::single_ = nullptr;
std::vector<std::unique_ptr<ServerProcess>>* ThreeServersTest::three_ = nullptr;

TEST_F(ThreeServersTest, TheStraddlingModuleReadsBitForBitAsOneLocalServer) {
  auto three = Connect(Target(*three_));
  auto single = Connect(single_->address());
  auto listed = single->ListTensors("fp8");
  ASSERT_TRUE(listed.ok()) << listed.status();
  auto through = three->ListTensors("fp8");
  ASSERT_TRUE(through.ok()) << through.status();
  ASSERT_EQ(through->size(), listed->size());
  std::set<std::string> names;
  for (size_t i = 0; i < listed->size(); ++i) {
    EXPECT_EQ((*through)[i].SerializeAsString(),
              (*listed)[i].SerializeAsString())
        << (*listed)[i].name();
    names.insert((*listed)[i].name());
  }
  ASSERT_TRUE(names.count(kStraddling));
  for (const std::string& name : names) {
    for (const v1::OutputMode mode :
         {v1::OUTPUT_MODE_UNSPECIFIED, v1::OUTPUT_MODE_RAW}) {
      v1::ReadSliceRequest req;
      req.set_checkpoint("fp8");
      req.set_tensor(name);
      req.set_mode(mode);
      auto want = single->ReadSliceAll(req);
      auto got = three->ReadSliceAll(req);
      ASSERT_EQ(got.status(), want.status()) << name;
      if (!want.ok()) continue;  // a raw read the encoding has no form for
      EXPECT_EQ(got->shape, want->shape) << name;
      EXPECT_EQ(got->dtype, want->dtype) << name;
      EXPECT_TRUE(got->bytes == want->bytes) << name << " differs";
    }
  }
  // Scaled, not the FP8 codes: the fixture's dequantized values.
  v1::ReadSliceRequest req;
  req.set_checkpoint("fp8");
  req.set_tensor(kStraddling);
  auto got = three->ReadSliceAll(req);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->bytes == testing::ReadFileBytes(testing::Fixture(
                                "safetensors/fp8_block_sharded/expected/" +
                                std::string(kStraddling) + ".f32")));
  // The calls took turns: every server of the three answered some.
  for (const std::string& a : Addresses(*three_)) {
    EXPECT_GT(CountersOf(a).streams_started(), 0) << a;
  }
}

TEST_F(ThreeServersTest, CallsTakeTurnsOverTheServers) {
  auto three = Connect(Target(*three_));
  std::vector<int64_t> before;
  for (const std::string& a : Addresses(*three_)) {
    before.push_back(CountersOf(a).calls());
  }
  for (int i = 0; i < 9; ++i) {
    ASSERT_TRUE(three->GetTensor("fp8", kStraddling).ok());
  }
  // Three each (and GetServerInfo counts itself once).
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(CountersOf((*three_)[i]->address()).calls() - before[i] - 1, 3);
  }
}

TEST_F(ThreeServersTest, ADiffThroughTheThreeIsTheSingleServers) {
  auto three = Connect(Target(*three_));
  auto single = Connect(single_->address());
  for (const auto& [quant, ref] :
       {std::pair{"quant", "source"}, std::pair{"fp8", "fp8-source"}}) {
    SCOPED_TRACE(quant);
    const DiffEvents want = Diff(*single, quant, ref);
    ASSERT_TRUE(want.status.ok()) << want.status;
    ASSERT_FALSE(want.reports.empty());
    ExpectSameDiff(Diff(*three, quant, ref), want);
  }
  // The CLI, given the list, prints the single server's diff.
  const CommandResult got = RunCommand({CliPath(), "--server", Target(*three_),
                                        "diff", "quant", "source", "--json"});
  const CommandResult want =
      RunCommand({CliPath(), "--server", single_->address(), "diff", "quant",
                  "source", "--json"});
  ASSERT_EQ(got.exit_code, want.exit_code) << got.err;
  ExpectSameDiff(ParseDiffJson(got.out), ParseDiffJson(want.out));
}

// Its own three servers, caches cold but for the checkpoints' headers: the
// diff's reads of the source's tensors (past the 64 KiB an open fetches)
// are held up by the proxy, so the server answering is killed while the
// diff runs. The client then does what client.h says: a call with no reply
// yet is tried once more on the next server (the same diff), one with
// replies ends UNAVAILABLE naming the killed server. (Killing on the first
// event instead raced the diff's end: its events can all come after its
// last read.)
TEST_F(ThreeServersTest, AServerKilledMidDiffIsNamedAndTheNextCallsFailOver) {
  for (const auto& f : fs::directory_iterator(*local_ + "/source")) {
    if (f.path().extension() == ".safetensors") {
      ASSERT_GT(f.file_size(), 64u << 10) << "no read left to hold up";
    }
  }
  std::vector<std::unique_ptr<ServerProcess>> servers = StartThree();
  const std::vector<std::string> addresses = Addresses(servers);
  for (const std::string& a : addresses) {
    auto c = Connect(a);
    ASSERT_TRUE(c->GetCheckpoint("quant").ok());
    ASSERT_TRUE(c->GetCheckpoint("source").ok());
  }
  const DiffEvents want = Diff(*Connect(single_->address()), "quant", "source");
  ASSERT_TRUE(want.status.ok()) << want.status;

  auto client = Connect(Target(servers));
  // Every request to the store held up from here, so the diff's server is
  // surely still at work when the first one shows at the proxy: it is
  // killed then, from another thread, while the diff streams.
  const int requests_before = proxy_->Requests();
  proxy_->Inject("delay_ms=1000&count=1000");
  std::atomic<int> events{0};
  std::atomic<int> events_at_kill{-1};
  std::string killed;
  std::thread killer([&] {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (proxy_->Requests() == requests_before && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    for (size_t i = 0; i < servers.size() && killed.empty(); ++i) {
      if (CountersOf(addresses[i]).active_streams() > 0) {
        events_at_kill = events.load();
        killed = addresses[i];
        kill(servers[i]->pid(), SIGKILL);
        servers[i]->WaitForExit();
      }
    }
  });
  v1::QuantDiffRequest req;
  req.set_checkpoint("quant");
  req.set_reference("source");
  DiffEvents got;
  got.status = client->QuantDiff(req, [&](const v1::QuantDiffEvent& e) {
    ++events;
    if (e.has_tensor()) got.reports.push_back(e.tensor());
    if (e.has_progress()) got.progress.push_back(e.progress());
    if (e.has_summary()) got.summaries.push_back(e.summary());
    return true;
  });
  killer.join();
  proxy_->Inject("delay_ms=0&count=0");
  ASSERT_FALSE(killed.empty())
      << "no server had the diff's stream; " << events << " events, "
      << proxy_->Requests() - requests_before << " requests to S3";
  if (events_at_kill > 0) {
    // Replies had reached the caller: the call ends as it failed, naming
    // the server (client.h: no failover once replies arrived).
    EXPECT_THAT(got.status, AllOf(HasReason(ErrorReason::kUnavailable),
                                  MessageNames("server " + killed)));
  } else {
    // Killed before any reply reached the caller: tried once more on the
    // next server, whose diff is the single server's.
    ExpectSameDiff(got, want);
  }

  // Three calls in a row start once at each server, the dead one too:
  // that one fails over to the next.
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(client->GetCheckpoint("quant").ok()) << i;
  }
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    ExpectSameDiff(Diff(*client, "quant", "source"), want);
  }
}

// `ls` over a list asks every server (three on one local root here: a
// tensormorphd on an s3:// root refuses ListCheckpoints' second page today,
// PAGE_TOKEN_INVALID, a server matter): what the reachable ones hold is
// listed once, the one down is named, and none answering is a failed call.
// The paths of `ls --json`'s checkpoint lines (its last line, the
// unreachable servers, excluded when `has_unreachable_line`).
std::vector<std::string> ListedPaths(const std::string& out,
                                     bool has_unreachable_line) {
  std::vector<std::string> lines = Lines(out);
  if (has_unreachable_line && !lines.empty()) lines.pop_back();
  std::vector<std::string> paths;
  for (const std::string& l : lines) {
    paths.push_back(nlohmann::json::parse(l).at("path").get<std::string>());
  }
  return paths;
}

TEST_F(ThreeServersTest, LsListsWhatTheReachableServersHoldAndNamesTheOthers) {
  // Servers of their own (this test stops them), on the object store.
  std::vector<std::unique_ptr<ServerProcess>> servers = StartThree();
  const std::vector<std::string> addresses = Addresses(servers);
  const std::string target = Target(servers);
  const std::string down = addresses[1];
  servers[1]->Stop();
  const CommandResult ls =
      RunCommand({CliPath(), "--server", target, "ls", "--json"});
  EXPECT_EQ(ls.exit_code, 0) << ls.err;
  // A notice beside a listing that succeeded: it names the server.
  EXPECT_THAT(ls.err, HasSubstr(down));
  const std::vector<std::string> lines = Lines(ls.out);
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(lines.back(),
              HasSubstr(absl::StrCat("{\"unreachable\":[{\"server\":\"", down,
                                     "\",\"error\":{\"code\":"
                                     "\"UNAVAILABLE\",\"reason\":"
                                     "\"UNAVAILABLE\"")));
  const CommandResult alone =
      RunCommand({CliPath(), "--server", single_->address(), "ls", "--json"});
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  // Each path once, as one server of a local copy lists them (the object
  // store's modification times are its own).
  EXPECT_EQ(ListedPaths(ls.out, true), ListedPaths(alone.out, false));
  EXPECT_FALSE(ListedPaths(alone.out, false).empty());
  // A directory of the store lists as the same directory on a disk.
  const CommandResult dir = RunCommand(
      {CliPath(), "--server", target, "ls", "fp8", "--checkpoints", "--json"});
  const CommandResult dir_alone =
      RunCommand({CliPath(), "--server", single_->address(), "ls", "fp8",
                  "--checkpoints", "--json"});
  ASSERT_EQ(dir.exit_code, 0) << dir.err;
  ASSERT_EQ(dir_alone.exit_code, 0) << dir_alone.err;
  EXPECT_EQ(ListedPaths(dir.out, true), ListedPaths(dir_alone.out, false));
  // Every server up: the last line names none.
  const CommandResult one_each =
      RunCommand({CliPath(), "--server", addresses[0] + "," + addresses[2],
                  "ls", "--json"});
  EXPECT_EQ(one_each.exit_code, 0) << one_each.err;
  EXPECT_EQ(Lines(one_each.out).back(), "{\"unreachable\":[]}");

  servers[0]->Stop();
  servers[2]->Stop();
  const CommandResult none = RunCommand({CliPath(), "--server", target, "ls"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(CliErrorOf(none.err), HasReason(ErrorReason::kUnavailable));
  for (const std::string& a : addresses) {
    EXPECT_THAT(CliErrorOf(none.err), MessageNames(a));
  }
}

// What the router's tests held that still means something for a thin
// client: the list's syntax, and dns:/// names resolved by gRPC.
TEST(ServerListTest, AMalformedListIsInvalidArgumentNamingTheEntry) {
  // Each entry the message names: its place in the list, and the text.
  for (const auto& [target, named] :
       std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"127.0.0.1:1,,127.0.0.1:2", {"entry 2"}},
           {"127.0.0.1:1,b", {"entry 2", "'b'"}},
           {"127.0.0.1", {"entry 1", "'127.0.0.1'"}},
           {"127.0.0.1:1,b:99999", {"entry 2", "'b:99999'", "host:port"}},
           {"a:1,dns://8.8.8.8/x:1", {"entry 2", "'dns://8.8.8.8/x:1'"}},
           {" ", {}}}) {
    EXPECT_THAT(Client::Connect(target),
                HasReason(ErrorReason::kRequestInvalid))
        << target;
    for (const std::string& value : named) {
      EXPECT_THAT(Client::Connect(target), MessageNames(value)) << target;
    }
  }
}

TEST(ServerListTest, ADnsNameReachesEveryAddressItResolvesTo) {
  const std::string root = testing::MakeTempDir();
  fs::copy(testing::Fixture("safetensors/fp8_block_sharded"), root + "/fp8",
           fs::copy_options::recursive);
  ServerProcess server({root});
  // localhost resolves to ::1 too, where nothing listens: round_robin keeps
  // to the address that answers.
  auto c = Connect(absl::StrCat("dns:///localhost:", server.port()));
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(c->GetTensor("fp8", kStraddling).ok());
  }
  // A name that does not resolve fails the call, UNAVAILABLE naming it.
  auto nowhere = Connect("dns:///no-such-host.invalid:7431");
  EXPECT_THAT(nowhere->GetServerInfo(),
              AllOf(HasReason(ErrorReason::kUnavailable),
                    MessageNames("dns:///no-such-host.invalid:7431")));
}

TEST(ServerListTest, BothServersDownNamesEach) {
  const int a = testing::FreeLoopbackPort(), b = testing::FreeLoopbackPort();
  auto c = Connect(absl::StrCat("127.0.0.1:", a, ",127.0.0.1:", b));
  const absl::Status s = c->GetServerInfo().status();
  EXPECT_THAT(s, HasReason(ErrorReason::kUnavailable));
  EXPECT_THAT(s, MessageNames(absl::StrCat(":", a)));
  EXPECT_THAT(s, MessageNames(absl::StrCat(":", b)));
}

}  // namespace
}  // namespace tensormorph
