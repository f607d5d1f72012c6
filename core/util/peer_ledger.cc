#include "core/util/peer_ledger.h"

#include "absl/strings/ascii.h"

namespace tensormorph {

std::string PeerHost(absl::string_view peer) {
  // Only a trailing ":<digits>" is a port: "unix:/path" and "unix:" keep
  // everything, and the colons inside "[::1]" are never last.
  const size_t colon = peer.rfind(':');
  if (colon == absl::string_view::npos || colon + 1 == peer.size()) {
    return std::string(peer);
  }
  for (char c : peer.substr(colon + 1)) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return std::string(peer);
    }
  }
  // "ipv4:1.2.3.4:80" has a scheme colon before the port's; a bare
  // "host:80" has none, and its host is all the same.
  return std::string(peer.substr(0, colon));
}

PeerLedger::Refusal PeerLedger::TryTake(absl::string_view peer, int64_t amount,
                                        bool one_always) {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(peer);
  const int64_t mine = it == held_.end() ? 0 : it->second;
  if (peer_cap_ > 0 && mine + amount > peer_cap_ &&
      !(one_always && mine == 0)) {
    return Refusal::kPeer;
  }
  if (total_cap_ > 0 && total_ + amount > total_cap_ &&
      !(one_always && total_ == 0)) {
    return Refusal::kTotal;
  }
  if (amount == 0) return Refusal::kNone;
  total_ += amount;
  if (it == held_.end()) {
    held_.emplace(std::string(peer), amount);
  } else {
    it->second += amount;
  }
  return Refusal::kNone;
}

PeerLedger::Refusal PeerLedger::Full(absl::string_view peer) const {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(peer);
  const int64_t mine = it == held_.end() ? 0 : it->second;
  if (peer_cap_ > 0 && mine >= peer_cap_) return Refusal::kPeer;
  if (total_cap_ > 0 && total_ >= total_cap_) return Refusal::kTotal;
  return Refusal::kNone;
}

void PeerLedger::Take(absl::string_view peer, int64_t amount) {
  if (amount == 0) return;
  absl::MutexLock lock(&mu_);
  total_ += amount;
  held_[peer] += amount;
}

void PeerLedger::Give(absl::string_view peer, int64_t amount) {
  if (amount == 0) return;
  absl::MutexLock lock(&mu_);
  total_ -= amount;
  auto it = held_.find(peer);
  if (it == held_.end()) return;  // REQUIRES broken: nothing to forget
  it->second -= amount;
  if (it->second <= 0) held_.erase(it);
}

int64_t PeerLedger::total() const {
  absl::MutexLock lock(&mu_);
  return total_;
}

int64_t PeerLedger::held_by(absl::string_view peer) const {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(peer);
  return it == held_.end() ? 0 : it->second;
}

int64_t PeerLedger::peers() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(held_.size());
}

}  // namespace tensormorph
