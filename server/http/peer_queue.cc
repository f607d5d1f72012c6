#include "server/http/peer_queue.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tensormorph {

std::string PeerShareKey(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    if (inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text) == nullptr) {
      return "";
    }
    return text;
  }
  if (address.ss_family != AF_INET6) return "";
  const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
  if (IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr)) {
    in_addr v4{};
    std::memcpy(&v4, v6.sin6_addr.s6_addr + 12, sizeof v4);
    if (inet_ntop(AF_INET, &v4, text, sizeof text) == nullptr) return "";
    return text;
  }
  in6_addr prefix{};
  std::memcpy(prefix.s6_addr, v6.sin6_addr.s6_addr, 8);  // the /64
  if (inet_ntop(AF_INET6, &prefix, text, sizeof text) == nullptr) return "";
  return absl::StrCat(text, "/64");
}

PeerQueue::PeerQueue(int share, int waiting)
    : share_(std::max(share, 1)), waiting_(std::max(waiting, 0)) {}

PeerQueue::~PeerQueue() {
  for (auto& [key, peer] : peers_) {
    for (const int fd : peer.waiting) ::close(fd);
  }
}

PeerQueue::Verdict PeerQueue::Arrive(const std::string& key, int fd,
                                     bool unshared) {
  std::lock_guard<std::mutex> lock(mu_);
  Peer& peer = peers_[key];
  if (unshared || peer.served < share_) {
    ++peer.served;
    return Verdict::kServe;
  }
  if (static_cast<int>(peer.waiting.size()) < waiting_) {
    peer.waiting.push_back(fd);
    return Verdict::kWait;
  }
  return Verdict::kRefuse;
}

int PeerQueue::Release(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = peers_.find(key);
  if (it == peers_.end()) return -1;  // not one of Arrive's: nothing held
  Peer& peer = it->second;
  if (!peer.waiting.empty()) {
    const int next = peer.waiting.front();
    peer.waiting.pop_front();
    return next;  // the slot passes to it
  }
  if (--peer.served <= 0) peers_.erase(it);
  return -1;
}

}  // namespace tensormorph
