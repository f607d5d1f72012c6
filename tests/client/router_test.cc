// Several tensormorphd behind one Client: three servers run with
// --partial-shards each hold one shard of a checkpoint, and a client given
// all three answers every call exactly as one server holding every shard.
// Endpoints that fail are named; replicas share calls; dns:/// resolves.
#include "client/router.h"

#include <arpa/inet.h>
#include <google/protobuf/util/message_differencer.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/sharded_checkpoint.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::google::protobuf::Message;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::CopyShards;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::ServerProcess;
using ::tensormorph::testing::ShardedCheckpoint;
using ::tensormorph::testing::StatusIs;
using ::tensormorph::testing::WriteShardedGptq;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kCkpt[] = "m";

// One root per shard (index and configs in each), and one with all three.
struct Roots {
  ShardedCheckpoint checkpoint;
  std::vector<std::string> parts;  // parts[i] holds shard i
  std::string whole;
};

Roots MakeRoots() {
  Roots r{WriteShardedGptq(), {}, MakeTempDir()};
  for (const std::string& shard : r.checkpoint.shards) {
    r.parts.push_back(MakeTempDir());
    CopyShards(r.checkpoint, {shard}, r.parts.back() + "/" + kCkpt);
  }
  CopyShards(r.checkpoint, r.checkpoint.shards, r.whole + "/" + kCkpt);
  return r;
}

// Three partial servers and one whole one, shared by the tests that only
// read; the tests that stop servers start their own.
struct Cluster {
  Roots roots = MakeRoots();
  std::vector<std::unique_ptr<ServerProcess>> partial;
  std::unique_ptr<ServerProcess> whole;

  Cluster() {
    for (const std::string& root : roots.parts) {
      partial.push_back(std::make_unique<ServerProcess>(
          std::vector<std::string>{root},
          std::vector<std::string>{"--partial-shards"}));
    }
    whole =
        std::make_unique<ServerProcess>(std::vector<std::string>{roots.whole});
  }
  std::string List() const {
    std::vector<std::string> a;
    for (const auto& s : partial) a.push_back(s->address());
    return absl::StrJoin(a, ",");
  }
};

std::unique_ptr<Client> Connect(const std::string& target) {
  auto c = Client::Connect(target);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// Equal after each went through its wire form, field for field.
::testing::AssertionResult SameMessage(const Message& a, const Message& b) {
  std::unique_ptr<Message> x(a.New()), y(b.New());
  x->ParseFromString(a.SerializeAsString());
  y->ParseFromString(b.SerializeAsString());
  std::string diff;
  google::protobuf::util::MessageDifferencer d;
  d.ReportDifferencesToString(&diff);
  if (d.Compare(*x, *y)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << diff;
}

template <typename T>
::testing::AssertionResult Same(const absl::StatusOr<T>& routed,
                                const absl::StatusOr<T>& single) {
  if (routed.status() != single.status()) {
    return ::testing::AssertionFailure()
           << "routed: " << routed.status() << "\nsingle: " << single.status();
  }
  return routed.ok() ? SameMessage(*routed, *single)
                     : ::testing::AssertionSuccess();
}

std::vector<v1::TensorInfo> List(Client& c, bool parts) {
  v1::ListTensorsRequest req;
  req.set_checkpoint(kCkpt);
  req.set_parts(parts);
  std::vector<v1::TensorInfo> out;
  EXPECT_TRUE(c.ListTensors(req, [&](const v1::TensorInfo& t) {
                 out.push_back(t);
               }).ok());
  return out;
}

class RouterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new Cluster(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  static const Cluster& Shared() { return *cluster_; }

  void SetUp() override {
    routed_ = Connect(Shared().List());
    single_ = Connect(Shared().whole->address());
  }
  std::unique_ptr<Client> routed_, single_;
  static Cluster* cluster_;
};

Cluster* RouterTest::cluster_ = nullptr;

TEST_F(RouterTest, GetCheckpointIsTheSingleServers) {
  auto routed = routed_->GetCheckpoint(kCkpt);
  ASSERT_TRUE(routed.ok()) << routed.status();
  EXPECT_EQ(routed->files_size(), 3);
  EXPECT_TRUE(routed->absent_files().empty());
  EXPECT_TRUE(Same(routed, single_->GetCheckpoint(kCkpt)));
}

TEST_F(RouterTest, ListTensorsIsTheSingleServersEveryField) {
  for (bool parts : {false, true}) {
    SCOPED_TRACE(parts ? "parts" : "logical");
    const std::vector<v1::TensorInfo> routed = List(*routed_, parts);
    const std::vector<v1::TensorInfo> single = List(*single_, parts);
    ASSERT_EQ(routed.size(), single.size());
    ASSERT_FALSE(routed.empty());
    for (size_t i = 0; i < routed.size(); ++i) {
      EXPECT_TRUE(SameMessage(routed[i], single[i])) << single[i].name();
    }
  }
}

TEST_F(RouterTest, AFilteredListingIsTheSingleServers) {
  v1::ListTensorsRequest req;
  req.set_checkpoint(kCkpt);
  req.set_filter("*proj*");
  std::vector<std::string> routed, single;
  ASSERT_TRUE(routed_
                  ->ListTensors(req,
                                [&](const v1::TensorInfo& t) {
                                  routed.push_back(t.SerializeAsString());
                                })
                  .ok());
  ASSERT_TRUE(single_
                  ->ListTensors(req,
                                [&](const v1::TensorInfo& t) {
                                  single.push_back(t.SerializeAsString());
                                })
                  .ok());
  EXPECT_EQ(routed.size(), 2u);
  EXPECT_EQ(routed, single);
}

TEST_F(RouterTest, EveryTensorReadsTheSameBytesFloatAndRaw) {
  for (bool parts : {false, true}) {
    for (const v1::TensorInfo& t : List(*single_, parts)) {
      for (v1::OutputMode mode :
           {v1::OUTPUT_MODE_FLOAT32, v1::OUTPUT_MODE_RAW}) {
        SCOPED_TRACE(absl::StrCat(t.name(), parts ? " part " : " ",
                                  v1::OutputMode_Name(mode)));
        v1::ReadSliceRequest req;
        req.set_checkpoint(kCkpt);
        req.set_tensor(t.name());
        req.set_part(parts);
        req.set_mode(mode);
        auto routed = routed_->ReadSliceAll(req);
        auto single = single_->ReadSliceAll(req);
        ASSERT_EQ(routed.status(), single.status());
        if (!single.ok()) continue;
        EXPECT_EQ(routed->shape, single->shape);
        EXPECT_EQ(routed->dtype, single->dtype);
        EXPECT_EQ(routed->bytes, single->bytes);
      }
    }
  }
}

TEST_F(RouterTest, InspectStatsAndHeatmapAreTheSingleServers) {
  for (const v1::TensorInfo& t : List(*single_, false)) {
    SCOPED_TRACE(t.name());
    v1::InspectScalarsRequest inspect;
    inspect.set_checkpoint(kCkpt);
    inspect.set_tensor(t.name());
    for (int64_t i = 0; i < t.num_elements(); i += 7) {
      inspect.add_flat_indices(i);
    }
    EXPECT_TRUE(Same(routed_->InspectScalars(inspect),
                     single_->InspectScalars(inspect)));
    v1::ComputeStatsRequest stats;
    stats.set_checkpoint(kCkpt);
    stats.set_tensor(t.name());
    EXPECT_TRUE(
        Same(routed_->ComputeStats(stats), single_->ComputeStats(stats)));
    v1::GetHeatmapRequest heat;
    heat.set_checkpoint(kCkpt);
    heat.set_tensor(t.name());
    heat.set_width(8);
    heat.set_height(4);
    EXPECT_TRUE(Same(routed_->GetHeatmap(heat), single_->GetHeatmap(heat)));
    EXPECT_TRUE(Same(routed_->GetTensor(kCkpt, t.name()),
                     single_->GetTensor(kCkpt, t.name())));
  }
}

TEST_F(RouterTest, AnUnknownTensorIsNotFoundAsFromOneServer) {
  EXPECT_THAT(routed_->GetTensor(kCkpt, "model.norm.weigth"),
              StatusIs(absl::StatusCode::kNotFound, "'model.norm.weigth'"));
  EXPECT_THAT(routed_->GetCheckpoint("nope"),
              StatusIs(absl::StatusCode::kNotFound, "nope"));
}

TEST_F(RouterTest, ListCheckpointsIsTheUnionByPath) {
  v1::ListCheckpointsRequest req;
  std::vector<std::string> paths;
  ASSERT_TRUE(routed_
                  ->ListAllCheckpoints(req,
                                       [&](const v1::CheckpointEntry& e) {
                                         paths.push_back(e.path());
                                       })
                  .ok());
  EXPECT_EQ(paths, std::vector<std::string>{kCkpt});
}

// A checkpoint split over partial servers lists as one server holding it
// all lists it: the files of the union, not one server's.
TEST_F(RouterTest, ListCheckpointsCountsASplitCheckpointsUnion) {
  auto entries = [](Client& c) {
    std::vector<v1::CheckpointEntry> out;
    EXPECT_TRUE(c.ListAllCheckpoints(
                     v1::ListCheckpointsRequest(),
                     [&](const v1::CheckpointEntry& e) { out.push_back(e); })
                    .ok());
    return out;
  };
  const std::vector<v1::CheckpointEntry> routed = entries(*routed_);
  const std::vector<v1::CheckpointEntry> single = entries(*single_);
  ASSERT_EQ(routed.size(), 1u);
  ASSERT_EQ(single.size(), 1u);
  EXPECT_EQ(routed[0].file_count(), 3);
  EXPECT_EQ(routed[0].file_count(), single[0].file_count());
  EXPECT_EQ(routed[0].total_bytes(), single[0].total_bytes());
  EXPECT_EQ(routed[0].has_stored_tensor_count(),
            single[0].has_stored_tensor_count());
  EXPECT_EQ(routed[0].stored_tensor_count(), single[0].stored_tensor_count());
  EXPECT_EQ(routed[0].format(), single[0].format());
  // The CLI's listing alike, but for the modification time.
  const CommandResult r =
      RunCommand({CliPath(), "--server", Shared().List(), "--json", "ls"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(R"("fileCount":"3")"));
}

// Every endpoint answered and a shard is on none of them: a server left
// out of the list, or not ready yet (a headless Service drops unready pods
// from DNS). UNAVAILABLE, which retry logic retries.
TEST_F(RouterTest, FilesNoEndpointHoldsAreUnavailable) {
  auto two = Connect(Shared().partial[0]->address() + "," +
                     Shared().partial[1]->address());
  const auto missing =
      AllOf(StatusIs(absl::StatusCode::kUnavailable,
                     "files no endpoint in the list (" +
                         Shared().partial[0]->address() + ", " +
                         Shared().partial[1]->address() +
                         ") holds: " + Shared().roots.checkpoint.shards[2]),
            StatusIs(absl::StatusCode::kUnavailable,
                     "is a server missing from --server, or not ready?"));
  EXPECT_THAT(two->ListTensors(kCkpt).status(), missing);
  EXPECT_THAT(two->GetCheckpoint(kCkpt).status(), missing);
  EXPECT_THAT(two->GetTensor(kCkpt, "lm_head.weight").status(), missing);
}

TEST_F(RouterTest, ArchitectureOfASplitCheckpointSaysWhatWorks) {
  EXPECT_THAT(
      routed_->GetArchitecture(kCkpt),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               "split across endpoints: " + Shared().partial[0]->address() +
                   " (" + Shared().roots.checkpoint.shards[0] + ")"));
}

// No endpoint holds the checkpoint whole: the diff runs as sub-diffs, one
// per endpoint, and gives what one server gives (router_diff_test.cc holds
// the full story, with a quantized checkpoint against its source).
TEST_F(RouterTest, DiffOfASplitCheckpointIsTheSingleServers) {
  v1::QuantDiffRequest req;
  req.set_checkpoint(kCkpt);
  req.set_reference(kCkpt);
  auto run = [&](Client& c, std::vector<v1::QuantDiffEvent>* tensors,
                 v1::DiffSummary* summary) {
    return c.QuantDiff(req, [&](const v1::QuantDiffEvent& e) {
      if (e.has_tensor()) tensors->push_back(e);
      if (e.has_summary()) *summary = e.summary();
      return true;
    });
  };
  std::vector<v1::QuantDiffEvent> routed, single;
  v1::DiffSummary routed_summary, single_summary;
  ASSERT_TRUE(run(*single_, &single, &single_summary).ok());
  ASSERT_TRUE(run(*routed_, &routed, &routed_summary).ok());
  auto by_name = [](const v1::QuantDiffEvent& a, const v1::QuantDiffEvent& b) {
    return a.tensor().name() < b.tensor().name();
  };
  std::sort(routed.begin(), routed.end(), by_name);
  std::sort(single.begin(), single.end(), by_name);
  ASSERT_EQ(routed.size(), single.size());
  for (size_t i = 0; i < routed.size(); ++i) {
    EXPECT_TRUE(SameMessage(routed[i], single[i])) << single[i].tensor().name();
  }
  routed_summary.clear_wall_seconds();
  single_summary.clear_wall_seconds();
  EXPECT_TRUE(SameMessage(routed_summary, single_summary));
}

std::vector<v1::CheckEvent> Check(Client& c, absl::Status* status) {
  v1::CheckCheckpointRequest req;
  req.set_checkpoint(kCkpt);
  req.set_hashes(true);
  std::vector<v1::CheckEvent> out;
  *status = c.CheckCheckpoint(req, [&](const v1::CheckEvent& e) {
    if (!e.has_progress()) out.push_back(e);
    return true;
  });
  // Timing is the one thing two runs do not share.
  for (v1::CheckEvent& e : out) {
    if (e.has_summary()) e.mutable_summary()->clear_wall_seconds();
  }
  return out;
}

// A check needs every shard on one server: through three partial servers
// it is refused naming who holds what (the library once dereferenced a
// channel a routing client does not have).
TEST_F(RouterTest, CheckOfASplitCheckpointNamesWhoHoldsWhat) {
  absl::Status s;
  EXPECT_TRUE(Check(*routed_, &s).empty());
  EXPECT_THAT(
      s, StatusIs(absl::StatusCode::kFailedPrecondition,
                  "split across endpoints: " + Shared().partial[0]->address() +
                      " (" + Shared().roots.checkpoint.shards[0] + ")"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(Shared().partial[2]->address() + " (" +
                        Shared().roots.checkpoint.shards[2] + ")"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("serve every shard of it on one server"));
  const CommandResult r =
      RunCommand({CliPath(), "--server", Shared().List(), "check", kCkpt});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("needs an endpoint holding it whole"));
}

// Two servers each holding it whole: the check runs on one of them (in
// turn) and is what one server gives, through the library and the CLI.
TEST(RouterCheckTest, ACheckRunsOnAWholeHolder) {
  const Roots roots = MakeRoots();
  ServerProcess a({roots.whole}), b({roots.whole});
  auto routed = Connect(a.address() + "," + b.address());
  auto single = Connect(a.address());
  absl::Status rs, ss;
  const std::vector<v1::CheckEvent> r1 = Check(*routed, &rs);
  const std::vector<v1::CheckEvent> r2 = Check(*routed, &rs);
  const std::vector<v1::CheckEvent> s = Check(*single, &ss);
  ASSERT_TRUE(ss.ok()) << ss;
  ASSERT_TRUE(rs.ok()) << rs;
  ASSERT_FALSE(s.empty());
  for (const auto* routed_events : {&r1, &r2}) {
    ASSERT_EQ(routed_events->size(), s.size());
    for (size_t i = 0; i < s.size(); ++i) {
      EXPECT_TRUE(SameMessage((*routed_events)[i], s[i]));
    }
  }
  const CommandResult rc = RunCommand(
      {CliPath(), "--server", a.address() + "," + b.address(), "check", kCkpt});
  const CommandResult sc =
      RunCommand({CliPath(), "--server", a.address(), "check", kCkpt});
  EXPECT_NE(sc.exit_code, 2) << sc.err;
  EXPECT_EQ(rc.exit_code, sc.exit_code) << rc.err;
  // The report but its timing line.
  auto untimed = [](const std::string& text) {
    std::vector<std::string> kept;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      if (line.find(" GB/s") == absl::string_view::npos) {
        kept.emplace_back(line);
      }
    }
    return absl::StrJoin(kept, "\n");
  };
  EXPECT_EQ(untimed(rc.out), untimed(sc.out));
  EXPECT_FALSE(sc.out.empty());
}

// What the CLI prints through three partial servers is what it prints
// through the whole one.
TEST_F(RouterTest, TheCliPrintsWhatTheSingleServerPrints) {
  const std::vector<std::vector<std::string>> commands = {
      {"info", kCkpt},
      {"ls", kCkpt},
      {"read", kCkpt, "model.layers.0.mlp.down_proj.weight", "--slice", "0:4"},
      {"read", kCkpt, "lm_head.weight", "--raw", "--slice", "1, :8"},
      {"scalar", kCkpt, "model.layers.0.self_attn.q_proj.weight", "3,17",
       "0,0"},
  };
  for (const auto& args : commands) {
    SCOPED_TRACE(absl::StrJoin(args, " "));
    std::vector<std::string> routed = {CliPath(), "--server", Shared().List(),
                                       "--json"};
    std::vector<std::string> single = {CliPath(), "--server",
                                       Shared().whole->address(), "--json"};
    routed.insert(routed.end(), args.begin(), args.end());
    single.insert(single.end(), args.begin(), args.end());
    const CommandResult r = RunCommand(routed);
    const CommandResult s = RunCommand(single);
    EXPECT_EQ(s.exit_code, 0) << s.err;
    EXPECT_EQ(r.exit_code, s.exit_code) << r.err;
    EXPECT_EQ(r.out, s.out);
  }
  // $TENSORMORPH_SERVER takes the list too.
  const CommandResult env =
      RunCommand({CliPath(), "--json", "info", kCkpt},
                 {"TENSORMORPH_SERVER=" + Shared().List()});
  EXPECT_EQ(env.exit_code, 0) << env.err;
  EXPECT_EQ(env.out,
            RunCommand({CliPath(), "--server", Shared().whole->address(),
                        "--json", "info", kCkpt})
                .out);
}

// A --partial-shards server per part of `roots`, and their addresses.
struct PartialServers {
  explicit PartialServers(const Roots& roots) {
    for (const std::string& root : roots.parts) {
      servers.push_back(std::make_unique<ServerProcess>(
          std::vector<std::string>{root},
          std::vector<std::string>{"--partial-shards"}));
      addresses.push_back(servers.back()->address());
    }
  }
  std::vector<std::unique_ptr<ServerProcess>> servers;
  std::vector<std::string> addresses;
};

TEST(RouterFailureTest, AStoppedServerIsNamedAndTheOthersStillServe) {
  const Roots roots = MakeRoots();
  PartialServers partial(roots);
  auto& [servers, addresses] = partial;
  auto client = Connect(absl::StrJoin(addresses, ","));
  ASSERT_TRUE(client->GetCheckpoint(kCkpt).ok());  // placed with all three
  // It held shard 3 (model.norm and lm_head), and crashes.
  ::kill(servers[2]->pid(), SIGKILL);
  servers[2]->WaitForExit();
  v1::ReadSliceRequest req;
  req.set_checkpoint(kCkpt);
  req.set_tensor("lm_head.weight");
  EXPECT_THAT(client->ReadSliceAll(req),
              StatusIs(absl::StatusCode::kUnavailable,
                       "tensor 'lm_head.weight' of 'm': not served by any "
                       "reachable endpoint; unreachable: " +
                           addresses[2] + " ("));
  // Placed again, without it: the message names the file nobody serves.
  const absl::Status again = client->ReadSliceAll(req).status();
  EXPECT_THAT(again, StatusIs(absl::StatusCode::kUnavailable, addresses[2]));
  EXPECT_THAT(std::string(again.message()),
              HasSubstr(roots.checkpoint.shards[2]));
  // What the others hold is still served.
  req.set_tensor("model.embed_tokens.weight");
  EXPECT_TRUE(client->ReadSliceAll(req).ok());
  v1::InspectScalarsRequest inspect;
  inspect.set_checkpoint(kCkpt);
  inspect.set_tensor("model.layers.0.self_attn.q_proj.weight");
  inspect.add_flat_indices(5);
  EXPECT_TRUE(client->InspectScalars(inspect).ok());
  // A listing never drops tensors silently.
  EXPECT_THAT(client->ListTensors(kCkpt),
              StatusIs(absl::StatusCode::kUnavailable,
                       "files no reachable endpoint holds: " +
                           roots.checkpoint.shards[2]));
  EXPECT_THAT(client->GetCheckpoint(kCkpt),
              StatusIs(absl::StatusCode::kUnavailable, addresses[2]));
}

// A placement that found an endpoint unreachable is asked again on the
// next call that needs it, not trusted until it expires (kPlacementTtl).
TEST(RouterFailureTest, AServerBackOnItsAddressServesTheNextCall) {
  const Roots roots = MakeRoots();
  PartialServers partial(roots);
  auto& [servers, addresses] = partial;
  ::kill(servers[2]->pid(), SIGKILL);
  servers[2]->WaitForExit();
  auto client = Connect(absl::StrJoin(addresses, ","));
  // Placed without it (lm_head.weight is in its shard 3).
  v1::ReadSliceRequest req;
  req.set_checkpoint(kCkpt);
  req.set_tensor("lm_head.weight");
  EXPECT_THAT(client->ReadSliceAll(req),
              StatusIs(absl::StatusCode::kUnavailable, addresses[2]));
  // Restarted where it was: the next call is served.
  servers[2] = std::make_unique<ServerProcess>(
      std::vector<std::string>{roots.parts[2]},
      std::vector<std::string>{"--partial-shards", "--listen", addresses[2]});
  EXPECT_TRUE(client->ReadSliceAll(req).ok());
  EXPECT_TRUE(client->ListTensors(kCkpt).ok());
}

TEST(RouterFailureTest, AStoppedReplicaIsNotNeeded) {
  const Roots roots = MakeRoots();
  ServerProcess a({roots.whole}), b({roots.whole});
  auto client = Connect(a.address() + "," + b.address());
  ASSERT_TRUE(client->GetCheckpoint(kCkpt).ok());
  ::kill(b.pid(), SIGKILL);
  b.WaitForExit();
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(client->GetTensor(kCkpt, "lm_head.weight").ok());
    EXPECT_TRUE(client->ListTensors(kCkpt).ok());
  }
}

// fp8_block_sharded keeps down_proj's FP8 weight in shard 1 and its
// weight_scale_inv in shard 2: on two servers, neither builds down_proj.
TEST(RouterSplitModuleTest, AMergeThatWouldDropATensorFailsNamingIt) {
  const std::vector<std::string> shards = {"model-00001-of-00002.safetensors",
                                           "model-00002-of-00002.safetensors"};
  std::vector<std::unique_ptr<ServerProcess>> servers;
  std::vector<std::string> addresses;
  for (const std::string& shard : shards) {
    const std::string root = MakeTempDir();
    std::filesystem::create_directories(root + "/f");
    for (const std::string& name :
         {std::string("config.json"),
          std::string("model.safetensors.index.json"), shard}) {
      std::filesystem::copy_file(::tensormorph::testing::Fixture(
                                     "safetensors/fp8_block_sharded/" + name),
                                 root + "/f/" + name);
    }
    servers.push_back(std::make_unique<ServerProcess>(
        std::vector<std::string>{root},
        std::vector<std::string>{"--partial-shards"}));
    addresses.push_back(servers.back()->address());
  }
  auto client = Connect(absl::StrJoin(addresses, ","));
  const std::string named =
      "model.layers.0.mlp.down_proj.weight (on " + addresses[0] + ")";
  EXPECT_THAT(client->ListTensors("f"),
              StatusIs(absl::StatusCode::kFailedPrecondition, named));
  EXPECT_THAT(client->GetCheckpoint("f"),
              StatusIs(absl::StatusCode::kFailedPrecondition, named));
  // The tensors one endpoint builds read as usual.
  v1::ReadSliceRequest req;
  req.set_checkpoint("f");
  req.set_tensor("model.layers.0.self_attn.o_proj.weight");
  EXPECT_TRUE(client->ReadSliceAll(req).ok());
  // The stored parts too.
  req.set_tensor("model.layers.0.mlp.down_proj.weight");
  req.set_part(true);
  req.set_mode(v1::OUTPUT_MODE_RAW);
  EXPECT_TRUE(client->ReadSliceAll(req).ok());
}

// The FP8 weight without its scale is not the tensor: read by its logical
// name it never falls back to the stored part of that name (FP8 codes,
// ~300x the scaled values), neither through the router nor from one
// partial server. Only part=true reads that part.
TEST(RouterSplitModuleTest, AWithheldTensorIsRefusedNeverItsUnscaledPart) {
  const std::vector<std::string> shards = {"model-00001-of-00002.safetensors",
                                           "model-00002-of-00002.safetensors"};
  std::vector<std::unique_ptr<ServerProcess>> servers;
  std::vector<std::string> addresses;
  for (const std::string& shard : shards) {
    const std::string root = MakeTempDir();
    std::filesystem::create_directories(root + "/fp8");
    for (const std::string& name :
         {std::string("config.json"),
          std::string("model.safetensors.index.json"), shard}) {
      std::filesystem::copy_file(::tensormorph::testing::Fixture(
                                     "safetensors/fp8_block_sharded/" + name),
                                 root + "/fp8/" + name);
    }
    servers.push_back(std::make_unique<ServerProcess>(
        std::vector<std::string>{root},
        std::vector<std::string>{"--partial-shards"}));
    addresses.push_back(servers.back()->address());
  }
  const std::string w = "model.layers.0.mlp.down_proj.weight";
  const std::string list = absl::StrJoin(addresses, ",");
  auto routed = Connect(list);
  const auto refused = StatusIs(absl::StatusCode::kFailedPrecondition,
                                "tensor '" + w +
                                    "' of 'fp8': no endpoint "
                                    "builds it");
  v1::ReadSliceRequest read;
  read.set_checkpoint("fp8");
  read.set_tensor(w);
  EXPECT_THAT(routed->ReadSliceAll(read).status(), refused);
  EXPECT_THAT(routed->GetTensor("fp8", w).status(), refused);
  v1::ComputeStatsRequest stats;
  stats.set_checkpoint("fp8");
  stats.set_tensor(w);
  EXPECT_THAT(routed->ComputeStats(stats).status(), refused);
  v1::InspectScalarsRequest scalars;
  scalars.set_checkpoint("fp8");
  scalars.set_tensor(w);
  scalars.add_flat_indices(0);
  EXPECT_THAT(routed->InspectScalars(scalars).status(), refused);
  v1::GetHeatmapRequest heat;
  heat.set_checkpoint("fp8");
  heat.set_tensor(w);
  EXPECT_THAT(routed->GetHeatmap(heat).status(), refused);
  // Its scale's name is refused alike, naming where each half is.
  const absl::Status scale =
      routed->GetTensor("fp8", w + "_scale_inv").status();
  EXPECT_THAT(scale, StatusIs(absl::StatusCode::kFailedPrecondition,
                              w + " (on " + addresses[0] + ")"));
  EXPECT_THAT(std::string(scale.message()),
              HasSubstr(w + "_scale_inv (on " + addresses[1] + ")"));
  // The part, asked for, is still read.
  read.set_part(true);
  read.set_mode(v1::OUTPUT_MODE_RAW);
  EXPECT_TRUE(routed->ReadSliceAll(read).ok());

  // A listing refuses to drop it, unless it could not include it: a
  // listing of stored parts (it is one), or a filter that leaves it out.
  v1::ListTensorsRequest ls;
  ls.set_checkpoint("fp8");
  auto names = [&](const v1::ListTensorsRequest& req) {
    std::vector<std::string> out;
    const absl::Status st = routed->ListTensors(
        req, [&](const v1::TensorInfo& t) { out.push_back(t.name()); });
    EXPECT_TRUE(st.ok()) << st;
    return out;
  };
  EXPECT_THAT(routed->ListTensors(ls, [](const v1::TensorInfo&) {}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "no endpoint builds the tensors"));
  ls.set_filter("model.layers.0.self_attn.*");
  EXPECT_THAT(names(ls),
              ::testing::ElementsAre("model.layers.0.self_attn.o_proj.weight"));
  ls.set_filter("");
  ls.set_parts(true);
  EXPECT_THAT(names(ls), ::testing::Contains(w + "_scale_inv"));

  // One partial server alone: NOT_FOUND naming the shard of the scale.
  auto single = Connect(addresses[0]);
  read.set_part(false);
  read.set_mode(v1::OUTPUT_MODE_UNSPECIFIED);
  const absl::Status one = single->ReadSliceAll(read).status();
  EXPECT_THAT(one, StatusIs(absl::StatusCode::kNotFound,
                            "model-00002-of-00002.safetensors', which this "
                            "server does not hold"));
  EXPECT_THAT(single->GetTensor("fp8", w).status(),
              StatusIs(absl::StatusCode::kNotFound, shards[1]));
  EXPECT_THAT(single->ComputeStats(stats).status(),
              StatusIs(absl::StatusCode::kNotFound, shards[1]));

  // QA's command: a failed call (exit 2) naming the tensor, no values.
  const CommandResult r = RunCommand(
      {CliPath(), "--server", list, "read", "fp8", w, "--slice", "0,0:3"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_THAT(r.err, HasSubstr("no endpoint builds it"));
  EXPECT_EQ(r.out, "");
}

int64_t Calls(const std::string& address) {
  auto info = Connect(address)->GetServerInfo();
  EXPECT_TRUE(info.ok()) << info.status();
  return info.ok() ? info->counters().calls() : -1;
}

TEST(RouterReplicaTest, ReplicasShareTheCalls) {
  const Roots roots = MakeRoots();
  ServerProcess a({roots.whole}), b({roots.whole});
  auto client = Connect(a.address() + "," + b.address());
  ASSERT_TRUE(client->GetCheckpoint(kCkpt).ok());
  const int64_t a0 = Calls(a.address()), b0 = Calls(b.address());
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(client->GetTensor(kCkpt, "model.norm.weight").ok());
  }
  // Round-robin: five each (GetServerInfo counts itself once).
  EXPECT_EQ(Calls(a.address()) - a0 - 1, 5);
  EXPECT_EQ(Calls(b.address()) - b0 - 1, 5);
}

// Replicas list the same entries: a listing places none of them (which
// would ask every endpoint about every checkpoint), and passes on no
// endpoint's page token.
TEST(RouterReplicaTest, AListingOfReplicasPlacesNothing) {
  const Roots roots = MakeRoots();
  CopyShards(roots.checkpoint, roots.checkpoint.shards, roots.whole + "/n");
  ServerProcess a({roots.whole}), b({roots.whole});
  auto client = Connect(a.address() + "," + b.address());
  const int64_t a0 = Calls(a.address()), b0 = Calls(b.address());
  v1::ListCheckpointsRequest req;
  req.set_page_size(1);
  std::vector<std::string> paths;
  ASSERT_TRUE(client
                  ->ListCheckpoints(req,
                                    [&](const v1::CheckpointEntry& e) {
                                      paths.push_back(e.path());
                                      EXPECT_EQ(e.next_page_token(), "");
                                      return true;
                                    })
                  .ok());
  EXPECT_THAT(paths, ::testing::ElementsAre("m", "n"));
  // Two pages each (and GetServerInfo counts itself once): no probes.
  EXPECT_EQ(Calls(a.address()) - a0 - 1, 2);
  EXPECT_EQ(Calls(b.address()) - b0 - 1, 2);
}

TEST(RouterTargetsTest, DnsNameResolvesToItsAddresses) {
  const Roots roots = MakeRoots();
  ServerProcess a({roots.whole});
  const std::string target = absl::StrCat("dns:///localhost:", a.port());
  auto client = Connect(target);
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(client->GetCheckpoint(kCkpt).ok());
  EXPECT_TRUE(client->GetTensor(kCkpt, "lm_head.weight").ok());
}

// A long-lived client follows a rollout: the name resolves to B once A is
// gone, and the same router reaches B after the placement TTL; a resolution
// that fails keeps the endpoints it had.
TEST(RouterTargetsTest, ANameIsResolvedAgainAfterTheTtl) {
  const Roots roots = MakeRoots();
  auto a =
      std::make_unique<ServerProcess>(std::vector<std::string>{roots.whole});
  absl::Mutex mu;
  absl::StatusOr<std::vector<std::string>> answer =
      std::vector<std::string>{a->address()};
  int asked = 0;
  RouterOptions options;
  options.placement_ttl = absl::Milliseconds(100);
  options.resolver =
      [&](const std::string& host,
          const std::string& port) -> absl::StatusOr<std::vector<std::string>> {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(host, "pods");
    EXPECT_EQ(port, "7431");
    ++asked;
    return answer;
  };
  auto router = Router::Create("dns:///pods:7431", {a->address()}, {}, options);
  ASSERT_TRUE(router->GetTensor(kCkpt, "lm_head.weight", false).ok());

  a->Stop();
  ServerProcess b({roots.whole});
  {
    absl::MutexLock lock(&mu);
    answer = std::vector<std::string>{b.address()};
  }
  absl::SleepFor(absl::Milliseconds(150));
  auto t = router->GetTensor(kCkpt, "lm_head.weight", false);
  EXPECT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(router->endpoints(), ::testing::ElementsAre(b.address()));

  {
    absl::MutexLock lock(&mu);
    answer = absl::UnavailableError("Name or service not known");
  }
  absl::SleepFor(absl::Milliseconds(150));
  t = router->GetTensor(kCkpt, "lm_head.weight", false);
  EXPECT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(router->endpoints(), ::testing::ElementsAre(b.address()));
  absl::MutexLock lock(&mu);
  EXPECT_GE(asked, 2);
}

// With every endpoint gone, the failed resolution is named too.
TEST(RouterTargetsTest, AFailedResolutionIsNamedWhenNoEndpointAnswers) {
  const Roots roots = MakeRoots();
  ServerProcess a({roots.whole});
  const std::string address = a.address();
  RouterOptions options;
  options.placement_ttl = absl::Milliseconds(100);
  bool fail = false;
  absl::Mutex mu;
  options.resolver =
      [&](const std::string&,
          const std::string&) -> absl::StatusOr<std::vector<std::string>> {
    absl::MutexLock lock(&mu);
    if (fail) return absl::UnavailableError("Name or service not known");
    return std::vector<std::string>{address};
  };
  auto router = Router::Create("dns:///pods:7431", {address}, {}, options);
  ASSERT_TRUE(router->GetCheckpoint(kCkpt).ok());
  a.Stop();
  {
    absl::MutexLock lock(&mu);
    fail = true;
  }
  absl::SleepFor(absl::Milliseconds(150));
  EXPECT_THAT(router->GetCheckpoint(kCkpt),
              StatusIs(absl::StatusCode::kUnavailable,
                       "again failed: server list entry 1 'dns:///pods:7431' "
                       "does not resolve: Name or service not known"));
}

TEST(RouterTargetsTest, AnEmptyEntryIsInvalidArgumentNamingIt) {
  EXPECT_THAT(Client::Connect("127.0.0.1:1,,127.0.0.1:2"),
              StatusIs(absl::StatusCode::kInvalidArgument, "entry 2 is empty"));
  EXPECT_THAT(
      Client::Connect("127.0.0.1:1,b"),
      StatusIs(absl::StatusCode::kInvalidArgument, "entry 2 'b' has no port"));
}

// Two whole replicas each admitting one diff at a time: a diff refused
// RESOURCE_EXHAUSTED by one (before any reply) runs on the other, so two
// clients' concurrent diffs both run whichever replica each tries first; a
// third, refused by both, is RESOURCE_EXHAUSTED naming them. The two stop
// once the third was answered (a whole pass over 256 MiB twice took 190 s
// under ASan and proved nothing more).
TEST(RouterReplicaTest, ADiffABusyReplicaRefusesRunsOnTheOther) {
  // One big tensor (a sparse file: zeros, no disk) so that a diff lasts.
  const std::string root = MakeTempDir();
  std::filesystem::create_directories(root + "/big");
  const int64_t n = int64_t{1} << 26;  // 256 MiB of F32
  ::tensormorph::testing::WriteSparseSafetensors(
      root + "/big/model.safetensors",
      absl::StrCat(R"({"w":{"dtype":"F32","shape":[)", n,
                   R"(],"data_offsets":[0,)", n * 4, "]}}"),
      n * 4);
  ServerProcess a({root}, {"--max-concurrent-diffs", "1"}),
      b({root}, {"--max-concurrent-diffs", "1"});
  const std::string list = a.address() + "," + b.address();
  v1::QuantDiffRequest req;
  req.set_checkpoint("big");
  req.set_reference("big");
  // Two fresh clients (as two CLI processes), each holding a replica's one
  // slot in its first event's callback until the others were asked.
  absl::Notification asked;
  absl::Notification started[2];
  absl::Status held[2];
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; ++k) {
    if (k == 1) started[0].WaitForNotification();
    threads.emplace_back([&, k] {
      auto c = Connect(list);
      bool told = false;
      held[k] = c->QuantDiff(req, [&](const v1::QuantDiffEvent&) {
        if (!told) {
          told = true;
          started[k].Notify();
          asked.WaitForNotificationWithTimeout(absl::Seconds(60));
        }
        return false;  // admitted and running: enough
      });
      if (!told) started[k].Notify();
    });
  }
  started[1].WaitForNotification();
  // Both replicas busy: a third is refused by both, RESOURCE_EXHAUSTED
  // naming them.
  const absl::Status third = Connect(list)->QuantDiff(
      req, [](const v1::QuantDiffEvent&) { return true; });
  asked.Notify();
  for (std::thread& t : threads) t.join();
  // Each ran (its first event came) until its caller stopped it.
  EXPECT_THAT(held[0], StatusIs(absl::StatusCode::kCancelled, "by the caller"));
  EXPECT_THAT(held[1], StatusIs(absl::StatusCode::kCancelled, "by the caller"));
  EXPECT_THAT(third, StatusIs(absl::StatusCode::kResourceExhausted,
                              "max_concurrent_diffs"));
  EXPECT_THAT(std::string(third.message()),
              AllOf(HasSubstr(a.address()), HasSubstr(b.address())));
}

int64_t Streams(const std::string& address) {
  auto info = Connect(address)->GetServerInfo();
  EXPECT_TRUE(info.ok()) << info.status();
  return info.ok() ? info->counters().streams_started() : -1;
}

// Each CLI run is a fresh process: the first whole holder it tries is
// random, so that many runs spread over the replicas, not all on the first.
TEST(RouterReplicaTest, FreshCliProcessesSpreadTheirDiffs) {
  const Roots roots = MakeRoots();
  ServerProcess a({roots.whole}), b({roots.whole});
  const int64_t a0 = Streams(a.address()), b0 = Streams(b.address());
  constexpr int kRuns = 20;
  for (int i = 0; i < kRuns; ++i) {
    const CommandResult r =
        RunCommand({CliPath(), "--server", a.address() + "," + b.address(),
                    "--json", "diff", kCkpt, kCkpt});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  const int64_t da = Streams(a.address()) - a0, db = Streams(b.address()) - b0;
  // One diff stream per run; both replicas had some (all 20 on one:
  // a chance of 2 in a million).
  EXPECT_EQ(da + db, kRuns);
  EXPECT_GE(da, 1);
  EXPECT_GE(db, 1);
}

TEST(RouterTargetsTest, SpacesAroundEntriesAreIgnored) {
  const Roots roots = MakeRoots();
  ServerProcess a({roots.whole}), b({roots.whole});
  auto client = Connect(absl::StrCat(" ", a.address(), ", ", b.address(), " "));
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(client->GetTensor(kCkpt, "lm_head.weight").ok());
}

TEST(RouterTargetsTest, AnEntryWithoutAPortIsInvalidArgument) {
  EXPECT_THAT(Client::Connect("127.0.0.1"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "entry 1 '127.0.0.1' has no port"));
  EXPECT_THAT(Client::Connect("127.0.0.1:1,host"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "entry 2 'host' has no port"));
  // The CLI: a usage error (exit 1), before anything is dialed.
  for (const std::string& bad :
       {std::string("127.0.0.1"), std::string("a:1,,b:2"),
        std::string("a:1,host")}) {
    SCOPED_TRACE(bad);
    const CommandResult r = RunCommand({CliPath(), "--server", bad, "ls"});
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr("entry"));
  }
}

// An endpoint that accepts connections and never answers: the placement's
// message names the probe's own fixed deadline, not ClientOptions::timeout.
TEST(RouterFailureTest, AHungEndpointsMessageNamesTheProbeDeadline) {
  const int hung = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(hung, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(hung, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(hung, 16), 0);  // never accepted: the kernel completes
  socklen_t len = sizeof(addr);      // the handshake, nothing replies
  ASSERT_EQ(::getsockname(hung, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string hung_address =
      absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
  ServerProcess empty({MakeTempDir()});
  auto client = Connect(hung_address + "," + empty.address());
  const absl::Status s = client->GetCheckpoint(kCkpt).status();
  ::close(hung);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kUnavailable, hung_address));
  EXPECT_THAT(std::string(s.message()), HasSubstr("kProbeTimeout"));
  EXPECT_THAT(std::string(s.message()),
              ::testing::Not(HasSubstr("ClientOptions::timeout sets")));
}

}  // namespace
}  // namespace tensormorph
