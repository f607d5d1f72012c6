// PeerLedger: each peer's share and the total stay within their caps, a
// refusal says which cap, what is given back can be taken again, and a
// peer holding nothing is forgotten. PeerHost: one peer per host, whatever
// the port.
#include "core/util/peer_ledger.h"

#include "gtest/gtest.h"

namespace tensormorph {
namespace {

using Refusal = PeerLedger::Refusal;

TEST(PeerHostTest, DropsThePortOnly) {
  EXPECT_EQ(PeerHost("ipv4:127.0.0.1:53122"), "ipv4:127.0.0.1");
  EXPECT_EQ(PeerHost("ipv6:[::1]:4410"), "ipv6:[::1]");
  EXPECT_EQ(PeerHost("ipv6:%5B::1%5D:4410"), "ipv6:%5B::1%5D");
  EXPECT_EQ(PeerHost("unix:/run/tensormorph.sock"),
            "unix:/run/tensormorph.sock");
  EXPECT_EQ(PeerHost("unix:"), "unix:");
  EXPECT_EQ(PeerHost(""), "");
}

TEST(PeerHostTest, TwoConnectionsFromOneHostAreOnePeer) {
  EXPECT_EQ(PeerHost("ipv4:10.0.0.7:40000"), PeerHost("ipv4:10.0.0.7:40001"));
  EXPECT_NE(PeerHost("ipv4:10.0.0.7:40000"), PeerHost("ipv4:10.0.0.8:40000"));
}

TEST(PeerLedgerTest, RefusesThePeerPastItsCapWhileOthersStillTake) {
  PeerLedger ledger(/*total_cap=*/10, /*peer_cap=*/3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ledger.TryTake("a", 1), Refusal::kNone);
  EXPECT_EQ(ledger.TryTake("a", 1), Refusal::kPeer);
  EXPECT_EQ(ledger.Full("a"), Refusal::kPeer);
  EXPECT_EQ(ledger.TryTake("b", 1), Refusal::kNone);
  EXPECT_EQ(ledger.held_by("a"), 3);
  EXPECT_EQ(ledger.total(), 4);
}

TEST(PeerLedgerTest, RefusesEveryoneAtTheTotalCap) {
  PeerLedger ledger(/*total_cap=*/4, /*peer_cap=*/3);
  EXPECT_EQ(ledger.TryTake("a", 3), Refusal::kNone);
  EXPECT_EQ(ledger.TryTake("b", 1), Refusal::kNone);
  EXPECT_EQ(ledger.TryTake("c", 1), Refusal::kTotal);
  EXPECT_EQ(ledger.Full("c"), Refusal::kTotal);
  EXPECT_EQ(ledger.peers(), 2);
}

TEST(PeerLedgerTest, ARefusalTakesNothing) {
  PeerLedger ledger(/*total_cap=*/100, /*peer_cap=*/10);
  EXPECT_EQ(ledger.TryTake("a", 8), Refusal::kNone);
  EXPECT_EQ(ledger.TryTake("a", 3), Refusal::kPeer);
  EXPECT_EQ(ledger.held_by("a"), 8);
  EXPECT_EQ(ledger.total(), 8);
  EXPECT_EQ(ledger.Full("a"), Refusal::kNone);  // 2 left
}

TEST(PeerLedgerTest, OneAmountBiggerThanTheCapPassesOnlyWhenNothingIsHeld) {
  PeerLedger ledger(/*total_cap=*/100, /*peer_cap=*/10);
  EXPECT_EQ(ledger.TryTake("a", 15), Refusal::kPeer);
  EXPECT_EQ(ledger.TryTake("a", 15, /*one_always=*/true), Refusal::kNone);
  EXPECT_EQ(ledger.TryTake("a", 1, /*one_always=*/true), Refusal::kPeer);
  ledger.Give("a", 15);
  EXPECT_EQ(ledger.TryTake("a", 1, /*one_always=*/true), Refusal::kNone);
}

TEST(PeerLedgerTest, OneAmountBiggerThanTheTotalPassesOnlyWhenNoneIsHeld) {
  PeerLedger ledger(/*total_cap=*/10, /*peer_cap=*/0);
  EXPECT_EQ(ledger.TryTake("a", 1), Refusal::kNone);
  EXPECT_EQ(ledger.TryTake("b", 20, /*one_always=*/true), Refusal::kTotal);
  ledger.Give("a", 1);
  EXPECT_EQ(ledger.TryTake("b", 20, /*one_always=*/true), Refusal::kNone);
}

TEST(PeerLedgerTest, GivenBackCanBeTakenAgainAndAnEmptyPeerIsForgotten) {
  PeerLedger ledger(/*total_cap=*/2, /*peer_cap=*/2);
  EXPECT_EQ(ledger.TryTake("a", 2), Refusal::kNone);
  EXPECT_EQ(ledger.TryTake("b", 1), Refusal::kTotal);
  ledger.Give("a", 2);
  EXPECT_EQ(ledger.peers(), 0);
  EXPECT_EQ(ledger.total(), 0);
  EXPECT_EQ(ledger.TryTake("b", 2), Refusal::kNone);
}

TEST(PeerLedgerTest, TakeIgnoresTheCapsButCountsAgainstNewCalls) {
  PeerLedger ledger(/*total_cap=*/10, /*peer_cap=*/4);
  ledger.Take("a", 6);
  EXPECT_EQ(ledger.held_by("a"), 6);
  EXPECT_EQ(ledger.Full("a"), Refusal::kPeer);
  EXPECT_EQ(ledger.TryTake("a", 0), Refusal::kPeer);
  ledger.Give("a", 6);
  EXPECT_EQ(ledger.Full("a"), Refusal::kNone);
}

TEST(PeerLedgerTest, NoCapMeansNoRefusal) {
  PeerLedger ledger(/*total_cap=*/0, /*peer_cap=*/0);
  EXPECT_EQ(ledger.TryTake("a", int64_t{1} << 50), Refusal::kNone);
  EXPECT_EQ(ledger.Full("a"), Refusal::kNone);
}

TEST(PeerLedgerTest, TakingNothingLeavesNoEntry) {
  PeerLedger ledger(/*total_cap=*/10, /*peer_cap=*/4);
  EXPECT_EQ(ledger.TryTake("a", 0), Refusal::kNone);
  ledger.Take("b", 0);
  EXPECT_EQ(ledger.peers(), 0);
}

}  // namespace
}  // namespace tensormorph
