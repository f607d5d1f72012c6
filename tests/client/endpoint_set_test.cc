// Parsing `--server a,b,dns:///name:port` into endpoints.
#include "client/endpoint_set.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;

TEST(EndpointSetTest, OnePlainTargetIsNotAList) {
  EXPECT_FALSE(IsEndpointList("gpu:7431"));
  EXPECT_TRUE(IsEndpointList("a:1,b:2"));
  EXPECT_TRUE(IsEndpointList("dns:///svc:7431"));
}

TEST(EndpointSetTest, HostPortEntriesKeepTheirOrderOnce) {
  auto e = ResolveEndpoints("b:2,a:1,b:2,[::1]:3");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(*e, ElementsAre("b:2", "a:1", "[::1]:3"));
}

TEST(EndpointSetTest, DnsNameResolvesToEveryAddress) {
  auto e = ResolveEndpoints("dns:///localhost:7431");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(*e, Contains("127.0.0.1:7431"));
}

// The resolver is a seam: tests answer for it.
TEST(EndpointSetTest, DnsNamesGoToTheResolverGiven) {
  auto e = ResolveEndpoints(
      "a:1, dns:///pods:2",
      [](const std::string& host,
         const std::string& port) -> absl::StatusOr<std::vector<std::string>> {
        EXPECT_EQ(host, "pods");
        return std::vector<std::string>{"10.0.0.7:" + port, "a:1"};
      });
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(*e, ElementsAre("a:1", "10.0.0.7:2"));
  EXPECT_THAT(ResolveEndpoints("dns:///pods:2",
                               [](const std::string&, const std::string&)
                                   -> absl::StatusOr<std::vector<std::string>> {
                                 return absl::UnavailableError("no such name");
                               }),
              AllOf(HasReason(ErrorReason::kUnavailable),
                    MessageNames("entry 1 'dns:///pods:2'"),
                    MessageNames("no such name")));
  EXPECT_TRUE(HasDnsName("a:1, dns:///pods:2"));
  EXPECT_FALSE(HasDnsName("a:1,b:2"));
}

TEST(EndpointSetTest, BadEntriesAreNamed) {
  EXPECT_THAT(
      ResolveEndpoints("a:1,,b:2"),
      AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames("entry 2")));
  EXPECT_THAT(ResolveEndpoints("a:1,b"),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("entry 2 'b'")));
  EXPECT_THAT(ResolveEndpoints("a:1,b:99999"),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("'b:99999'")));
  EXPECT_THAT(ResolveEndpoints("dns://8.8.8.8/x:1"),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("dns://8.8.8.8/x:1")));
  EXPECT_THAT(ResolveEndpoints("dns:///no-such-host.invalid:1"),
              AllOf(HasReason(ErrorReason::kUnavailable),
                    MessageNames("no-such-host.invalid")));
}

TEST(EndpointSetTest, SpacesAroundEntriesAreIgnored) {
  auto e = ResolveEndpoints(" a:1, b:2 ,c:3 ");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(*e, ElementsAre("a:1", "b:2", "c:3"));
  EXPECT_TRUE(IsEndpointList(" a:1"));
  EXPECT_TRUE(CheckServerList(" a:1, dns:///svc:7431").ok());
}

// One address with a port that is no number is named at once, not dialed
// as a host name that does not resolve; gRPC's own URI forms pass as they
// are.
TEST(EndpointSetTest, ASinglePortThatIsNoNumberIsNamed) {
  EXPECT_THAT(CheckServerList("nohost:abc"),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("'nohost:abc' is not host:port")));
  EXPECT_THAT(CheckServerList("gpu:70000"),
              HasReason(ErrorReason::kRequestInvalid));
  for (const char* ok :
       {"gpu:7431", "[::1]:7431", "unix:/run/tm.sock", "ipv4:127.0.0.1:7431",
        "unix-abstract:tm", "xds:///tensormorph"}) {
    EXPECT_TRUE(CheckServerList(ok).ok()) << ok;
  }
}

// gRPC would dial a bare host at a default port: a list names its ports.
TEST(EndpointSetTest, AnEntryWithoutAPortIsNamed) {
  EXPECT_THAT(ResolveEndpoints("127.0.0.1,a:1"),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("entry 1 '127.0.0.1'")));
  EXPECT_THAT(ResolveEndpoints("a:1,[::1]"),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("entry 2 '[::1]'")));
  EXPECT_THAT(CheckServerList("127.0.0.1"),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("entry 1 '127.0.0.1'")));
  EXPECT_THAT(CheckServerList("host"),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("entry 1 'host'")));
  EXPECT_THAT(CheckServerList("a:1, host"),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("entry 2 'host'")));
  EXPECT_THAT(CheckServerList(" "), HasReason(ErrorReason::kRequestInvalid));
  // Checked without resolving: a name that does not resolve passes here.
  EXPECT_TRUE(CheckServerList("dns:///no-such-host.invalid:1,a:2").ok());
  // Other gRPC targets, one alone, pass as they always dialed.
  EXPECT_TRUE(CheckServerList("unix:/tmp/tm.sock").ok());
  EXPECT_TRUE(CheckServerList("gpu:7431").ok());
}

// What Client::Connect dials, one channel each: the entries as written,
// dns:/// names left to gRPC's resolver.
TEST(EndpointSetTest, EntriesAreKeptAsWrittenOnceNothingResolved) {
  auto e = ServerListEntries(" b:2, dns:///no-such-host.invalid:1,b:2 ,a:1");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(*e, ElementsAre("b:2", "dns:///no-such-host.invalid:1", "a:1"));
  EXPECT_THAT(ServerListEntries("a:1,dns:///pods").status(),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("entry 2 'pods'")));
}

}  // namespace
}  // namespace tensormorph
