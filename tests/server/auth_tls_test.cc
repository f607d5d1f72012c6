// Authentication and transport against the real tensormorphd: bearer tokens
// (right, wrong, none, reloaded on SIGHUP), TLS, and mutual TLS with and
// without a client certificate. Certificates come from a throwaway CA made
// with openssl for this test.
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <signal.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/cli_error.h"
#include "tests/support/process.h"
#include "tests/support/reflection_call.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_ca.h"
#include "tests/support/test_paths.h"

namespace tensormorph::auth_tls_test {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::ReadFileBytes;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::ServerProcess;
using ::tensormorph::testing::TestCaFile;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string Root() {
  static const std::string* dir = [] {
    auto* d = new std::string(MakeTempDir());
    WriteFile(*d + "/m.safetensors",
              BuildSafetensors({{"w", "I8", {2}, "ab"}}));
    return d;
  }();
  return *dir;
}

// grpc.health.v1.Health/Check for the whole server, with no credentials, over
// a generic stub (the health proto is not part of our API). Returns the
// serialized HealthCheckResponse: "\x08\x01" is SERVING.
absl::StatusOr<std::string> HealthCheck(const std::string& target) {
  auto channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice empty("", 0);  // an empty HealthCheckRequest
  grpc::ByteBuffer request(&empty, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response,
                 [&](grpc::Status s) { done.set_value(std::move(s)); });
  const grpc::Status s = done.get_future().get();
  if (!s.ok()) return absl::UnknownError(s.error_message());
  std::vector<grpc::Slice> slices;
  (void)response.Dump(&slices);
  std::string bytes;
  for (const grpc::Slice& sl : slices) {
    bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  return bytes;
}

// Reflection asked to list the services, with `authorization` metadata
// unless empty: the serialized ServerReflectionResponse, or the call's
// status.
absl::StatusOr<std::string> ListServicesByReflection(
    const std::string& target, const std::string& authorization) {
  testing::ReflectionCall call =
      testing::ListServicesByReflection(target, authorization);
  if (!call.status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(call.status.error_code()),
                        call.status.error_message());
  }
  return call.response;
}

// GetServerInfo with exactly this `authorization` metadata.
absl::Status ServerInfoWith(const std::string& target,
                            const std::string& authorization) {
  auto stub = v1::Tensormorph::NewStub(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ctx.AddMetadata("authorization", authorization);
  v1::GetServerInfoRequest req;
  v1::GetServerInfoResponse info;
  const grpc::Status s = stub->GetServerInfo(&ctx, req, &info);
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

absl::Status Call(const std::string& target, const ClientOptions& o) {
  auto c = Client::Connect(target, o);
  if (!c.ok()) return c.status();
  return (*c)->GetCheckpoint("m.safetensors").status();
}

TEST(AuthTest, BearerTokensRightWrongMissingAndReloaded) {
  const std::string tokens = MakeTempDir() + "/tokens";
  WriteFile(tokens, "# comment\nsecret-one\n");
  ServerProcess s({Root()}, {"--token-file", tokens});
  ClientOptions o;
  o.token = "secret-one";
  EXPECT_TRUE(Call(s.address(), o).ok());
  o.token = "secret-two";
  EXPECT_THAT(Call(s.address(), o), HasReason(ErrorReason::kUnauthenticated));
  o.token.clear();
  EXPECT_EQ(Call(s.address(), o).code(), absl::StatusCode::kUnauthenticated);
  // Health checks need no token: load balancers and orchestrators probe
  // without one.
  auto health = HealthCheck(s.address());
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, std::string("\x08\x01")) << "SERVING";
  // SIGHUP reloads the file.
  WriteFile(tokens, "secret-two\n");
  ::kill(s.pid(), SIGHUP);
  o.token = "secret-two";
  absl::Status after = absl::UnknownError("not tried");
  // The signal is handled asynchronously: poll, bounded (2 s at most).
  for (int i = 0; i < 200 && !after.ok(); ++i) {
    after = Call(s.address(), o);
    if (!after.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(after.ok()) << after;
  // The CLI takes --token-file and reports UNAUTHENTICATED with exit 2.
  CommandResult cli =
      RunCommand({CliPath(), "--server", s.address(), "--token-file", tokens,
                  "ls", "m.safetensors"});
  EXPECT_EQ(cli.exit_code, 0) << cli.err;
  CommandResult none =
      RunCommand({CliPath(), "--server", s.address(), "ls", "m.safetensors"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(CliErrorOf(none.err), HasReason(ErrorReason::kUnauthenticated));
}

// Reflection describes the whole API: with tokens on it needs one like every
// method but health.
TEST(AuthTest, ReflectionNeedsTheTokenWhenTokensAreOn) {
  const std::string tokens = MakeTempDir() + "/tokens";
  WriteFile(tokens, "secret-one\n");
  ServerProcess s({Root()}, {"--token-file", tokens});
  auto none = ListServicesByReflection(s.address(), "");
  EXPECT_THAT(none, HasReason(ErrorReason::kUnauthenticated));
  auto wrong = ListServicesByReflection(s.address(), "Bearer secret-two");
  EXPECT_THAT(wrong, HasReason(ErrorReason::kUnauthenticated));
  auto right = ListServicesByReflection(s.address(), "Bearer secret-one");
  ASSERT_TRUE(right.ok()) << right.status();
  EXPECT_THAT(*right, HasSubstr("tensormorph.v1.Tensormorph"));
  // The server is alive and serves its API afterwards.
  EXPECT_TRUE(ServerInfoWith(s.address(), "Bearer secret-one").ok());
  // Without tokens, reflection stays open.
  ServerProcess open({Root()});
  auto listed = ListServicesByReflection(open.address(), "");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(*listed, HasSubstr("tensormorph.v1.Tensormorph"));
}

// One interceptor guards every method: each refuses a call without the
// token with UNAUTHENTICATED, and the refused call does no work (opens no
// checkpoint, starts no stream), although gRPC still runs its handler.
TEST(AuthTest, EveryMethodRefusesACallWithoutTheTokenBeforeAnyWork) {
  const std::string tokens = MakeTempDir() + "/tokens";
  WriteFile(tokens, "secret-one\n");
  ServerProcess s({Root()}, {"--token-file", tokens});
  auto c = Client::Connect(s.address());
  ASSERT_TRUE(c.ok()) << c.status();
  Client& none = **c;
  std::vector<std::pair<const char*, absl::Status>> calls;
  calls.emplace_back("GetServerInfo", none.GetServerInfo().status());
  calls.emplace_back("GetCheckpoint",
                     none.GetCheckpoint("m.safetensors").status());
  calls.emplace_back("ListTensors", none.ListTensors("m.safetensors").status());
  calls.emplace_back("GetTensor",
                     none.GetTensor("m.safetensors", "w").status());
  v1::ListCheckpointsRequest list;
  calls.emplace_back("ListCheckpoints",
                     none.ListCheckpoints(list, [](const v1::CheckpointEntry&) {
                       return true;
                     }));
  v1::ReadSliceRequest read;
  read.set_checkpoint("m.safetensors");
  read.set_tensor("w");
  calls.emplace_back("ReadSlice", none.ReadSliceAll(read).status());
  v1::InspectScalarsRequest scalars;
  scalars.set_checkpoint("m.safetensors");
  scalars.set_tensor("w");
  scalars.add_flat_indices(0);
  calls.emplace_back("InspectScalars", none.InspectScalars(scalars).status());
  v1::ComputeStatsRequest stats;
  stats.set_checkpoint("m.safetensors");
  stats.set_tensor("w");
  calls.emplace_back("ComputeStats", none.ComputeStats(stats).status());
  v1::GetHeatmapRequest heatmap;
  heatmap.set_checkpoint("m.safetensors");
  heatmap.set_tensor("w");
  calls.emplace_back("GetHeatmap", none.GetHeatmap(heatmap).status());
  calls.emplace_back("GetArchitecture",
                     none.GetArchitecture("m.safetensors").status());
  v1::QuantDiffRequest diff;
  diff.set_checkpoint("m.safetensors");
  diff.set_reference("m.safetensors");
  calls.emplace_back(
      "QuantDiff",
      none.QuantDiff(diff, [](const v1::QuantDiffEvent&) { return true; }));
  for (const auto& [method, status] : calls) {
    EXPECT_THAT(status, HasReason(ErrorReason::kUnauthenticated)) << method;
  }
  ClientOptions o;
  o.token = "secret-one";
  auto right = Client::Connect(s.address(), o);
  ASSERT_TRUE(right.ok()) << right.status();
  auto info = (*right)->GetServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->counters().checkpoint_opens(), 0);
  EXPECT_EQ(info->counters().streams_started(), 0);
}

// Authentication schemes are case-insensitive (RFC 9110, section 11.1).
TEST(AuthTest, BearerSchemeIsCaseInsensitive) {
  const std::string tokens = MakeTempDir() + "/tokens";
  WriteFile(tokens, "secret-one\n");
  ServerProcess s({Root()}, {"--token-file", tokens});
  for (const char* scheme : {"Bearer", "bearer", "BEARER", "bEaReR"}) {
    SCOPED_TRACE(scheme);
    EXPECT_TRUE(
        ServerInfoWith(s.address(), std::string(scheme) + " secret-one").ok());
  }
  EXPECT_EQ(ServerInfoWith(s.address(), "bearer secret-two").code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(ServerInfoWith(s.address(), "Basic secret-one").code(),
            absl::StatusCode::kUnauthenticated);
}

class TlsTest : public ::testing::Test {
 protected:
  static std::string F(const std::string& name) { return TestCaFile(name); }
};

TEST_F(TlsTest, TlsServesClientsThatTrustTheCa) {
  ServerProcess s(
      {Root()}, {"--tls-cert", F("server.pem"), "--tls-key", F("server.key")});
  const std::string target = "localhost:" + std::to_string(s.port());
  ClientOptions o;
  o.tls_root_ca = ReadFileBytes(F("ca.pem"));
  o.timeout = absl::Seconds(10);
  EXPECT_TRUE(Call(target, o).ok());
  ClientOptions plain;
  plain.timeout = absl::Seconds(5);
  EXPECT_FALSE(Call(target, plain).ok());  // plaintext to a TLS port
  CommandResult cli = RunCommand({CliPath(), "--server", target, "--tls-ca",
                                  F("ca.pem"), "ls", "m.safetensors"});
  EXPECT_EQ(cli.exit_code, 0) << cli.err;
}

TEST_F(TlsTest, MutualTlsRequiresAClientCertificate) {
  ServerProcess s({Root()}, {"--tls-cert", F("server.pem"), "--tls-key",
                             F("server.key"), "--tls-client-ca", F("ca.pem")});
  const std::string target = "localhost:" + std::to_string(s.port());
  ClientOptions o;
  o.tls_root_ca = ReadFileBytes(F("ca.pem"));
  o.timeout = absl::Seconds(10);
  EXPECT_FALSE(Call(target, o).ok());  // no client certificate
  o.tls_client_cert = ReadFileBytes(F("client.pem"));
  o.tls_client_key = ReadFileBytes(F("client.key"));
  EXPECT_TRUE(Call(target, o).ok());
}

TEST(LimitsTest, LimitsAnswerResourceExhaustedNamingTheLimit) {
  // Two I8 elements read as float32 are 8 bytes; one is 4.
  ServerProcess s({Root()},
                  {"--max-slice-bytes", "4", "--max-scalars-per-call", "1"});
  auto c = Client::Connect(s.address());
  v1::ReadSliceRequest r;
  r.set_checkpoint("m.safetensors");
  r.set_tensor("w");
  auto big = (*c)->ReadSliceAll(r);
  EXPECT_THAT(big, AllOf(HasReason(ErrorReason::kLimitExceeded),
                         HasMetadata("limit", "max_slice_bytes"),
                         HasMetadata("limit_value", "4")));
  v1::InspectScalarsRequest q;
  q.set_checkpoint("m.safetensors");
  q.set_tensor("w");
  q.add_flat_indices(0);
  q.add_flat_indices(1);
  auto many = (*c)->InspectScalars(q);
  EXPECT_THAT(
      many, AllOf(HasReason(ErrorReason::kLimitExceeded),
                  HasMetadata("limit", "max_scalars_per_call"),
                  HasMetadata("limit_value", "1"), HasMetadata("asked", "2")));
  r.set_slice("0:1");
  EXPECT_TRUE((*c)->ReadSliceAll(r).ok());  // within the limit
}

}  // namespace
}  // namespace tensormorph::auth_tls_test
