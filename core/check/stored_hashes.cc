#include "core/check/stored_hashes.h"

#include <algorithm>

#include "core/check/xxh3.h"
#include "core/io/fault_guard.h"
#include "core/util/status_macros.h"

namespace tensormorph {

struct StoredHashes::Open {
  int64_t index = 0;
  XXH3_state_t* state = nullptr;
  uint64_t at = 0;  // bytes hashed so far, from the part's first
};

StoredHashes::StoredHashes(const Checkpoint& ckpt)
    : ckpt_(ckpt),
      owner_(ckpt.stored_tensors().size(), nullptr),
      hashed_(ckpt.stored_tensors().size(), false) {
  entries_.reserve(ckpt.stored_tensors().size());
  for (const StoredTensor& t : ckpt.stored_tensors()) {
    entries_.push_back(ManifestEntryOf(ckpt, t));
    unclaimed_bytes_ += static_cast<int64_t>(t.nbytes);
  }
}

StoredHashes::~StoredHashes() {
  for (Open& o : open_) XXH3_freeState(o.state);
}

int64_t StoredHashes::IndexOf(const StoredTensor* p) const {
  const std::vector<StoredTensor>& all = ckpt_.stored_tensors();
  // Parts point into stored_tensors(); anything else is left to Finish.
  if (all.empty() || p < all.data() || p >= all.data() + all.size()) {
    return -1;
  }
  return p - all.data();
}

void StoredHashes::Claim(const LogicalTensor& t) {
  for (const StoredTensor* p : t.encoding->parts()) {
    const int64_t i = IndexOf(p);
    if (i < 0 || owner_[i] != nullptr) continue;
    owner_[i] = &t;
    unclaimed_bytes_ -= static_cast<int64_t>(p->nbytes);
  }
}

absl::Status StoredHashes::Begin(const LogicalTensor& t) {
  TM_RETURN_IF_ERROR(End());
  for (const StoredTensor* p : t.encoding->parts()) {
    const int64_t i = IndexOf(p);
    if (i < 0 || owner_[i] != &t || hashed_[i]) continue;
    Open o;
    o.index = i;
    o.state = XXH3_createState();
    if (o.state == nullptr) return absl::ResourceExhaustedError("XXH3 state");
    XXH3_64bits_reset(o.state);
    open_.push_back(o);
  }
  return absl::OkStatus();
}

absl::Status StoredHashes::HashTo(Open& o, uint64_t to,
                                  const std::atomic<bool>* cancelled) {
  // An undecodable tensor's bytes are hashed at End in one go: in pieces,
  // so that a cancelled check stops within one.
  constexpr uint64_t kPiece = uint64_t{16} << 20;
  const StoredTensor& t = ckpt_.stored_tensors()[o.index];
  to = std::min<uint64_t>(to, t.data.size());
  while (o.at < to) {
    if (cancelled != nullptr && cancelled->load()) {
      return absl::CancelledError("cancelled");
    }
    const uint64_t n = std::min(kPiece, to - o.at);
    TM_RETURN_IF_ERROR(GuardedRead([&] {
      XXH3_64bits_update(o.state, t.data.data() + o.at, n);
      return absl::OkStatus();
    }));
    o.at += n;
  }
  return absl::OkStatus();
}

void StoredHashes::Advance(int64_t done, int64_t total) {
  if (!fault_.ok() || total <= 0) return;
  for (Open& o : open_) {
    const uint64_t size = ckpt_.stored_tensors()[o.index].data.size();
    // size * done can pass 2^64 for a multi-terabyte part.
    const uint64_t to = static_cast<uint64_t>(
        static_cast<unsigned __int128>(size) * static_cast<uint64_t>(done) /
        static_cast<uint64_t>(total));
    fault_ = HashTo(o, to);
    if (!fault_.ok()) return;
  }
}

absl::Status StoredHashes::End(const std::atomic<bool>* cancelled) {
  absl::Status s = fault_;
  for (Open& o : open_) {
    if (s.ok()) {
      s = HashTo(o, ckpt_.stored_tensors()[o.index].data.size(), cancelled);
    }
    if (s.ok()) {
      entries_[o.index].hash = XXH3_64bits_digest(o.state);
      hashed_[o.index] = true;
    }
    XXH3_freeState(o.state);
  }
  open_.clear();
  fault_ = absl::OkStatus();
  return s;
}

absl::StatusOr<std::vector<ManifestEntry>> StoredHashes::Finish(
    const std::atomic<bool>* cancelled,
    const std::function<void(int64_t)>& on_bytes) {
  TM_RETURN_IF_ERROR(End(cancelled));
  const std::vector<StoredTensor>& all = ckpt_.stored_tensors();
  for (size_t i = 0; i < all.size(); ++i) {
    if (hashed_[i]) continue;
    TM_ASSIGN_OR_RETURN(entries_[i],
                        HashStoredTensor(ckpt_, all[i], cancelled, on_bytes));
    hashed_[i] = true;
  }
  return entries_;
}

}  // namespace tensormorph
