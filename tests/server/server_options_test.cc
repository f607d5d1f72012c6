// tensormorphd's options that reach gRPC as numbers: a value gRPC cannot
// take is refused at start, never turned into a server that listens and
// accepts nothing.
#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::ServerProcess;
using ::tensormorph::testing::TensormorphdPath;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(ServerOptionsTest, AConnectionAgePastGrpcsIntIsRefusedAtStart) {
  // 30 days in milliseconds wraps an int: the server used to print
  // "listening on" and then accept no connection at all.
  const auto r =
      RunCommand({TensormorphdPath(), "--root", MakeTempDir(), "--listen",
                  "127.0.0.1:0", "--max-connection-age", "2592000"});
  EXPECT_NE(r.exit_code, 0) << r.err;  // CLI11 usage error
  // tensormorphd's start-up refusal is a line for a person (no status to
  // carry a reason): it names the flag, the value and the range's end.
  for (const char* named : {"--max-connection-age", "2592000", "2147483"}) {
    EXPECT_THAT(r.err, HasSubstr(named));
  }
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("listening")));
}

TEST(ServerOptionsTest, TheLibraryRefusesItToo) {
  ServerOptions options;
  options.roots = {MakeTempDir()};
  options.listen = "127.0.0.1:0";
  options.max_connection_age_seconds = kMaxConnectionAgeSeconds + 1;
  EXPECT_THAT(TensormorphServer::StartInProcess(options).status(),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("2147483"), MessageNames("2147484")));
  options.max_connection_age_seconds = kMaxConnectionAgeSeconds;
  EXPECT_TRUE(TensormorphServer::StartInProcess(options).ok());
}

TEST(ServerOptionsTest, AGracePastGrpcsIntIsRefusedAndZeroIsNoLimit) {
  const auto r =
      RunCommand({TensormorphdPath(), "--root", MakeTempDir(), "--listen",
                  "127.0.0.1:0", "--max-connection-age-grace", "2592000"});
  EXPECT_NE(r.exit_code, 0) << r.err;
  for (const char* named :
       {"--max-connection-age-grace", "2592000", "2147483"}) {
    EXPECT_THAT(r.err, HasSubstr(named));
  }
  ServerOptions options;
  options.roots = {MakeTempDir()};
  options.listen = "127.0.0.1:0";
  options.max_connection_age_grace_seconds = -1;
  EXPECT_THAT(
      TensormorphServer::StartInProcess(options).status(),
      AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames("-1")));
  // No limit (the default) and the largest finite grace both start.
  options.max_connection_age_grace_seconds = 0;
  EXPECT_TRUE(TensormorphServer::StartInProcess(options).ok());
  options.max_connection_age_grace_seconds = kMaxConnectionAgeSeconds;
  EXPECT_TRUE(TensormorphServer::StartInProcess(options).ok());
  EXPECT_EQ(ServerOptions().max_connection_age_grace_seconds, 0);
}

TEST(ServerOptionsTest, ATlsFileThatIsNoPemIsRefusedNamingIt) {
  // Both used to end as "cannot listen ...: is the port free?".
  const std::string dir = MakeTempDir();
  const std::string empty = dir + "/empty.pem";
  testing::WriteFile(empty, "");
  for (const auto& [cert, named] :
       {std::pair{dir, "is a directory"}, std::pair{empty, "no PEM block"}}) {
    const auto r =
        RunCommand({TensormorphdPath(), "--root", MakeTempDir(), "--listen",
                    "127.0.0.1:0", "--tls-cert", cert, "--tls-key", cert});
    EXPECT_NE(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.err, AllOf(HasSubstr("TLS certificate '" + cert + "'"),
                             HasSubstr(named)));
    EXPECT_THAT(r.out, ::testing::Not(HasSubstr("listening")));
  }
}

TEST(ServerOptionsTest, ASecondServerOnTakenPortsFailsInsteadOfSharingThem) {
  // With SO_REUSEPORT (gRPC's and cpp-httplib's default), a second server,
  // say one started without --token-file, bound beside the first and the
  // kernel gave it half the connections. `timeout` ends a second server
  // that starts anyway, failing the test instead of hanging it.
  ServerProcess first({MakeTempDir()}, {"--http-listen", "127.0.0.1:0"});
  const auto grpc_taken =
      RunCommand({"/usr/bin/timeout", "20", TensormorphdPath(), "--root",
                  MakeTempDir(), "--listen", first.address()});
  EXPECT_NE(grpc_taken.exit_code, 0);
  EXPECT_NE(grpc_taken.exit_code, 124) << "the second server started";
  EXPECT_THAT(grpc_taken.err, HasSubstr("cannot listen"));
  const auto http_taken =
      RunCommand({"/usr/bin/timeout", "20", TensormorphdPath(), "--root",
                  MakeTempDir(), "--listen", "127.0.0.1:0", "--http-listen",
                  "127.0.0.1:" + std::to_string(first.http_port())});
  EXPECT_NE(http_taken.exit_code, 0);
  EXPECT_NE(http_taken.exit_code, 124) << "the second server started";
  EXPECT_THAT(http_taken.err, HasSubstr("cannot listen for HTTP"));
}

}  // namespace
}  // namespace tensormorph
