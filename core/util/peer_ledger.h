// Shares of one resource (stream slots, bytes of replies in flight) counted
// per peer and in all, each with its cap, so that one client cannot take
// what the others need: a peer past its cap is refused while the others
// still get theirs.
#ifndef TENSORMORPH_CORE_UTIL_PEER_LEDGER_H_
#define TENSORMORPH_CORE_UTIL_PEER_LEDGER_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace tensormorph {

// The peer a call's share is counted under: gRPC's peer string
// ("ipv4:10.0.0.7:53122", "ipv6:[::1]:4410", "unix:/run/s") without the
// port, so that a client opening many connections from one host is one
// peer. A call's share is counted under SharePeer (call_log.h), which
// gives this the HTTP client's address for the gateway's calls.
std::string PeerHost(absl::string_view peer);

// Thread safety: every method is thread-safe.
class PeerLedger {
 public:
  // Which cap refused an amount.
  enum class Refusal { kNone, kTotal, kPeer };

  // A cap <= 0 means no cap.
  PeerLedger(int64_t total_cap, int64_t peer_cap)
      : total_cap_(total_cap), peer_cap_(peer_cap) {}
  PeerLedger(const PeerLedger&) = delete;
  PeerLedger& operator=(const PeerLedger&) = delete;

  // Takes `amount` (>= 0) for `peer` when, after it, both the peer's and
  // the total held stay within their caps; else takes nothing and says
  // which cap refused (the peer's first). With `one_always`, an amount is
  // also taken when the holder has nothing yet (peer: nothing held; total:
  // nothing held by anyone), so a single reply bigger than a cap is still
  // served, one at a time: what is held never passes max(cap, the largest
  // single amount).
  Refusal TryTake(absl::string_view peer, int64_t amount,
                  bool one_always = false);
  // Refusal when `peer` or the total already holds its whole cap (nothing
  // more could be taken): the check before work whose size is not yet
  // known.
  Refusal Full(absl::string_view peer) const;
  // Takes `amount` whatever the caps: for what an admitted call must hold
  // to go on (a stream's next chunk), still counted against new calls.
  void Take(absl::string_view peer, int64_t amount);
  // Gives back `amount` taken for `peer` (REQUIRES: it holds that much).
  void Give(absl::string_view peer, int64_t amount);

  int64_t total() const;
  int64_t held_by(absl::string_view peer) const;
  // Peers holding anything (a peer that gave everything back is forgotten,
  // so the map never grows with the number of clients ever seen).
  int64_t peers() const;
  int64_t total_cap() const { return total_cap_; }
  int64_t peer_cap() const { return peer_cap_; }

 private:
  const int64_t total_cap_;
  const int64_t peer_cap_;
  mutable absl::Mutex mu_;
  int64_t total_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, int64_t> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_UTIL_PEER_LEDGER_H_
