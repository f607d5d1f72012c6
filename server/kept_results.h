// Results kept per key with the inputs they were computed from, bounded by
// entries and bytes, evicted least recently kept or found first, and
// dropped when an input changed: the server's diff reports (a page restores
// a diff after a reload) and error grids (an error heatmap's zooms and pans
// reduce from one grid rather than decode the tensors again).
#ifndef TENSORMORPH_SERVER_KEPT_RESULTS_H_
#define TENSORMORPH_SERVER_KEPT_RESULTS_H_

#include <algorithm>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/format/checkpoint.h"

namespace tensormorph {

// What a kept result was computed from: every file of its checkpoints
// (mapped files and the files read at open, with no identity for one that
// was absent), in the checkpoints' own order.
using KeptInputs =
    std::vector<std::pair<std::string, std::optional<FileIdentity>>>;
KeptInputs InputsOf(const Checkpoint& a, const Checkpoint& b);

// Thread safety: all methods are thread-safe; kept values are immutable
// and shared, so a value found stays valid while its holder uses it, even
// when it is evicted meanwhile.
template <typename Value>
class KeptResults {
 public:
  struct Found {
    std::shared_ptr<const Value> value;
    absl::Time kept;
  };

  // `what` names a result in NOT_FOUND messages ("diff report"), and
  // `remedy` says what to do then ("run the diff"); a `max_entries` of 0
  // keeps nothing.
  KeptResults(std::string what, std::string remedy, int64_t max_entries,
              int64_t max_bytes)
      : what_(std::move(what)),
        remedy_(std::move(remedy)),
        max_entries_(max_entries),
        max_bytes_(max_bytes) {}

  // Whether a result of `bytes` can be kept at all.
  bool Fits(int64_t bytes) const {
    return max_entries_ > 0 && bytes <= max_bytes_;
  }

  // Keeps `value` of `bytes` as `key`'s, replacing the one before; when it
  // does not fit, drops the one before and keeps nothing.
  void Keep(const std::string& key, KeptInputs inputs,
            std::shared_ptr<const Value> value, int64_t bytes) {
    absl::MutexLock lock(&mu_);
    EraseLocked(key);
    if (!Fits(bytes)) return;
    while (!lru_.empty() &&
           (static_cast<int64_t>(entries_.size()) >= max_entries_ ||
            bytes_ + bytes > max_bytes_)) {
      EraseLocked(lru_.back());
      ++evictions_;
    }
    lru_.push_front(key);
    Entry& e = entries_[key];
    e.inputs = std::move(inputs);
    e.value = std::move(value);
    e.bytes = bytes;
    e.kept = absl::Now();
    e.lru = lru_.begin();
    bytes_ += bytes;
  }

  void Drop(const std::string& key) {
    absl::MutexLock lock(&mu_);
    EraseLocked(key);
  }

  // `key`'s result when its inputs are `now`. NOT_FOUND when none is kept,
  // or (dropping it) when a file changed: the message names the file.
  absl::StatusOr<Found> Find(const std::string& key, const KeptInputs& now) {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      return absl::NotFoundError(absl::StrCat(
          "no ", what_,
          " kept for this request (none was made since the server started, "
          "or it was evicted); ",
          remedy_));
    }
    Entry& e = it->second;
    if (e.inputs != now) {
      // Which file: the first that differs, or one added or gone.
      std::string file = "a file";
      for (size_t i = 0; i < std::max(e.inputs.size(), now.size()); ++i) {
        if (i >= e.inputs.size() || i >= now.size() || e.inputs[i] != now[i]) {
          file = i < now.size() ? now[i].first : e.inputs[i].first;
          break;
        }
      }
      EraseLocked(key);
      return absl::NotFoundError(
          absl::StrCat("the kept ", what_, " is stale and was dropped: '", file,
                       "' changed since; ", remedy_));
    }
    lru_.splice(lru_.begin(), lru_, e.lru);
    ++hits_;
    return Found{e.value, e.kept};
  }

  size_t size() const {
    absl::MutexLock lock(&mu_);
    return entries_.size();
  }
  int64_t bytes() const {
    absl::MutexLock lock(&mu_);
    return bytes_;
  }
  int64_t evictions() const {
    absl::MutexLock lock(&mu_);
    return evictions_;
  }
  int64_t hits() const {
    absl::MutexLock lock(&mu_);
    return hits_;
  }

 private:
  struct Entry {
    KeptInputs inputs;
    std::shared_ptr<const Value> value;
    int64_t bytes = 0;
    absl::Time kept;
    std::list<std::string>::iterator lru;
  };
  void EraseLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    bytes_ -= it->second.bytes;
    lru_.erase(it->second.lru);
    entries_.erase(it);
  }

  const std::string what_, remedy_;
  const int64_t max_entries_;
  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_KEPT_RESULTS_H_
