// Each client address gets its share of the HTTP port's serving threads; its
// further connections wait in its own line, in arrival order, and pass to a
// thread only as one of its own connections ends.
#include "server/http/peer_queue.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <string>

#include "gtest/gtest.h"

namespace tensormorph {
namespace {

using Verdict = PeerQueue::Verdict;

sockaddr_storage Address(int family, const char* text) {
  sockaddr_storage a{};
  a.ss_family = static_cast<sa_family_t>(family);
  void* where =
      family == AF_INET
          ? static_cast<void*>(&reinterpret_cast<sockaddr_in&>(a).sin_addr)
          : static_cast<void*>(&reinterpret_cast<sockaddr_in6&>(a).sin6_addr);
  EXPECT_EQ(inet_pton(family, text, where), 1) << text;
  return a;
}

TEST(PeerQueueTest, APeerBeyondItsShareWaitsAndIsServedAsItsOwnConnectionsEnd) {
  PeerQueue q(/*share=*/2, /*waiting=*/2);
  EXPECT_EQ(q.Arrive("a", 10), Verdict::kServe);
  EXPECT_EQ(q.Arrive("a", 11), Verdict::kServe);
  EXPECT_EQ(q.Arrive("a", 12), Verdict::kWait);
  EXPECT_EQ(q.Arrive("a", 13), Verdict::kWait);
  EXPECT_EQ(q.Arrive("a", 14), Verdict::kRefuse);
  // Another peer is not counted against "a".
  EXPECT_EQ(q.Arrive("b", 20), Verdict::kServe);
  // As "a"'s connections end, its waiting ones take their slots in order.
  EXPECT_EQ(q.Release("a"), 12);
  EXPECT_EQ(q.Release("a"), 13);
  EXPECT_EQ(q.Arrive("a", 15), Verdict::kWait);
  EXPECT_EQ(q.Release("a"), 15);
  EXPECT_EQ(q.Release("a"), -1);
  EXPECT_EQ(q.Release("a"), -1);
  // Its slots are free again.
  EXPECT_EQ(q.Arrive("a", 16), Verdict::kServe);
  EXPECT_EQ(q.Arrive("a", 17), Verdict::kServe);
  EXPECT_EQ(q.Arrive("a", 18), Verdict::kWait);
}

TEST(PeerQueueTest, AnUnsharedPeerIsAlwaysServed) {
  PeerQueue q(/*share=*/1, /*waiting=*/0);
  for (int fd = 0; fd < 100; ++fd) {
    EXPECT_EQ(q.Arrive("proxy", fd, /*unshared=*/true), Verdict::kServe);
  }
  EXPECT_EQ(q.Arrive("client", 200), Verdict::kServe);
  EXPECT_EQ(q.Arrive("client", 201), Verdict::kRefuse);
}

TEST(PeerQueueTest, AReleaseOfAKeyNeverAdmittedChangesNothing) {
  PeerQueue q(/*share=*/1, /*waiting=*/1);
  EXPECT_EQ(q.Release("stranger"), -1);
  EXPECT_EQ(q.Arrive("stranger", 3), Verdict::kServe);
  EXPECT_EQ(q.Arrive("stranger", 4), Verdict::kWait);
}

TEST(PeerShareKeyTest, IPv4IsItsAddressAndIPv6ItsSlash64) {
  EXPECT_EQ(PeerShareKey(Address(AF_INET, "10.0.0.7")), "10.0.0.7");
  // A host may use any address of its /64: they share one share.
  EXPECT_EQ(PeerShareKey(Address(AF_INET6, "2001:db8:1:2::7")),
            "2001:db8:1:2::/64");
  EXPECT_EQ(PeerShareKey(Address(AF_INET6, "2001:db8:1:2:aaaa:bbbb:cccc:dddd")),
            "2001:db8:1:2::/64");
  EXPECT_NE(PeerShareKey(Address(AF_INET6, "2001:db8:1:3::7")),
            "2001:db8:1:2::/64");
  // An IPv4 client on a dual-stack socket counts as its IPv4 address.
  EXPECT_EQ(PeerShareKey(Address(AF_INET6, "::ffff:10.0.0.7")), "10.0.0.7");
  sockaddr_storage unix_socket{};
  unix_socket.ss_family = AF_UNIX;
  EXPECT_EQ(PeerShareKey(unix_socket), "");
}

}  // namespace
}  // namespace tensormorph
