// `tensormorph health`, as a container's HEALTHCHECK and a script waiting
// for a server run it: exit 0 only when the server says SERVING, exit 2
// naming the endpoint and the reason otherwise, and a deadline that holds
// against a peer that never answers.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/cli_error.h"
#include "tests/support/process.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::MessageOmits;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::ServerProcess;
using ::testing::AllOf;
using ::testing::HasSubstr;

CommandResult Cli(std::vector<std::string> args) {
  args.insert(args.begin(), CliPath());
  return RunCommand(args);
}

// A loopback port nothing listens on: a server's, once it has stopped.
std::string DeadAddress() {
  ServerProcess server({MakeTempDir()});
  const std::string address = server.address();
  server.Stop();
  return address;
}

// A socket that accepts connections (the kernel completes the handshake)
// but never speaks HTTP/2: a hung server.
class SilentListener {
 public:
  SilentListener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(fd_, 8) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot open a listening socket";
    }
    port_ = ntohs(addr.sin_port);
  }
  ~SilentListener() { close(fd_); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(HealthCli, ARunningServerIsServingAndExitsZero) {
  ServerProcess server({MakeTempDir()});
  CommandResult r = Cli({"health", "--server", server.address()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, server.address() + ": SERVING\n");
  EXPECT_EQ(r.err, "");
}

TEST(HealthCli, JsonIsOneObjectPerEndpointNamingServerServiceAndStatus) {
  ServerProcess server({MakeTempDir()});
  CommandResult r = Cli({"--json", "health", "--server", server.address()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["server"], server.address());
  EXPECT_EQ(j["service"], "");
  EXPECT_EQ(j["status"], "SERVING");
  EXPECT_FALSE(j.contains("error"));
}

TEST(HealthCli, AnUnreachablePortExitsTwoNamingTheEndpointAndUnavailable) {
  const std::string dead = DeadAddress();
  CommandResult r = Cli({"health", "--server", dead});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(CliErrorOf(r.err),
              AllOf(HasReason(ErrorReason::kUnavailable), MessageNames(dead)));
}

TEST(HealthCli, AnUnreachablePortInJsonCarriesTheErrorAndStatusUnknown) {
  const std::string dead = DeadAddress();
  CommandResult r = Cli({"health", "--server", dead, "--json"});
  EXPECT_EQ(r.exit_code, 2);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["server"], dead);
  EXPECT_EQ(j["status"], "UNKNOWN");
  EXPECT_EQ(j["error"]["code"], "UNAVAILABLE");
  EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
}

TEST(HealthCli, EachEndpointOfAListIsAskedAndTheDownOneNamed) {
  ServerProcess server({MakeTempDir()});
  const std::string dead = DeadAddress();
  CommandResult r =
      Cli({"--json", "health", "--server", server.address() + "," + dead});
  EXPECT_EQ(r.exit_code, 2);
  std::vector<nlohmann::json> lines;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    lines.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[0]["status"], "SERVING");
  EXPECT_EQ(lines[1]["server"], dead);
  EXPECT_EQ(lines[1]["error"]["code"], "UNAVAILABLE");
  EXPECT_THAT(CliErrorOf(r.err),
              AllOf(HasReason(ErrorReason::kUnavailable), MessageNames(dead),
                    MessageOmits(server.address())));
}

TEST(HealthCli, AServerThatNeverAnswersFailsAtTheDeadline) {
  SilentListener hung;
  CommandResult r =
      Cli({"--timeout", "0.5", "health", "--server", hung.address()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(CliErrorOf(r.err),
              AllOf(HasReason(ErrorReason::kDeadlineExceeded),
                    MessageNames(hung.address()), MessageNames("500ms")));
}

TEST(HealthCli, HealthNeedsNoTokenOnAServerThatRequiresOne) {
  const std::string dir = MakeTempDir();
  std::ofstream(dir + "/tokens") << "s3cret\n";
  ServerProcess server({dir}, {"--token-file", dir + "/tokens"});
  CommandResult r = Cli({"health", "--server", server.address()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The same server refuses a call that is not a health check.
  CommandResult ls = Cli({"--server", server.address(), "ls"});
  EXPECT_EQ(ls.exit_code, 2);
  EXPECT_THAT(CliErrorOf(ls.err), HasReason(ErrorReason::kUnauthenticated));
}

TEST(HealthCli, AServiceTheServerDoesNotKnowIsNotFoundExitTwo) {
  ServerProcess server({MakeTempDir()});
  CommandResult r =
      Cli({"health", "--server", server.address(), "--service", "no.such.Svc"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(CliErrorOf(r.err), AllOf(HasReason(ErrorReason::kNotFound),
                                       MessageNames("'no.such.Svc'")));
}

TEST(HealthCli, TheServiceByItsOwnNameIsServing) {
  ServerProcess server({MakeTempDir()});
  CommandResult r = Cli({"health", "--server", server.address(), "--service",
                         "tensormorph.v1.Tensormorph"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("SERVING"));
}

TEST(HealthCli, EmbeddedAsksTheInProcessServer) {
  CommandResult r = Cli({"health"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "embedded: SERVING\n");
}

TEST(HealthCli, AnEmptyAddressInTheListIsAUsageError) {
  CommandResult r = Cli({"health", "--server", "127.0.0.1:1,"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(CliErrorOf(r.err), AllOf(HasReason(ErrorReason::kRequestInvalid),
                                       MessageNames("entry 2")));
}

TEST(HealthCli, ADnsNameIsEveryAddressItResolvesTo) {
  ServerProcess server({MakeTempDir()});
  const std::string port =
      server.address().substr(server.address().rfind(':') + 1);
  // localhost may resolve to ::1 too, where nothing listens: each address is
  // reported on its own line, the IPv4 one SERVING.
  CommandResult r =
      Cli({"health", "--server", absl::StrCat(" dns:///localhost:", port)});
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("127.0.0.1:", port, ": SERVING")));
}

TEST(HealthCli, AnAddressWithoutAPortIsAUsageError) {
  CommandResult r = Cli({"health", "--server", "127.0.0.1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(CliErrorOf(r.err), AllOf(HasReason(ErrorReason::kRequestInvalid),
                                       MessageNames("'127.0.0.1'")));
}

}  // namespace
}  // namespace tensormorph
