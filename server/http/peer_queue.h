// Which HTTP connections are let in: each client address has at most its
// share open at once, and its further connections wait their turn in a
// line of their own.
//
// Why: without a share, 300 connections from one address held everything
// the port had for them (first its threads, and descriptors always) and a
// bystander's /healthz waited 14.5 s. With it, one client can delay only
// its own connections.
#ifndef TENSORMORPH_SERVER_HTTP_PEER_QUEUE_H_
#define TENSORMORPH_SERVER_HTTP_PEER_QUEUE_H_

#include <sys/socket.h>

#include <deque>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"

namespace tensormorph {

// The address a connection's share is counted by: an IPv4 address, or the
// /64 of an IPv6 one (a host is given a /64 and may use any address in it;
// an IPv4-mapped address counts as its IPv4 one). "" for other families.
std::string PeerShareKey(const sockaddr_storage& address);

// Thread safety: every method may be called from any thread.
class PeerQueue {
 public:
  // `share`: connections one key may have served at once (>= 1);
  // `waiting`: connections one key may have waiting beyond that (>= 0).
  PeerQueue(int share, int waiting);
  // Closes the descriptors still waiting (the gateway stopped first).
  ~PeerQueue();
  PeerQueue(const PeerQueue&) = delete;
  PeerQueue& operator=(const PeerQueue&) = delete;

  enum class Verdict {
    kServe,   // a slot was free and is now the connection's
    kWait,    // the queue holds `fd` until a slot of its key frees
    kRefuse,  // the key's line is full: the caller closes `fd`
  };
  // A new connection `fd` whose share is counted by `key`. `unshared`
  // (a trusted proxy, whose connections are many clients') is always served.
  Verdict Arrive(const std::string& key, int fd, bool unshared = false);

  // A served connection of `key` ended. Returns the next connection of the
  // key that was waiting, which now holds the slot (the caller serves it and
  // calls Release again), or -1 with the slot freed.
  int Release(const std::string& key);

  int share() const { return share_; }
  int waiting() const { return waiting_; }

 private:
  struct Peer {
    int served = 0;
    std::deque<int> waiting;
  };
  const int share_, waiting_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, Peer> peers_;  // keys with a connection
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_HTTP_PEER_QUEUE_H_
