// The last QuantDiff report per request, kept so that a page restores a
// diff's results after a reload or from a shared link (GetDiffReport).
#ifndef TENSORMORPH_SERVER_DIFF_REPORT_STORE_H_
#define TENSORMORPH_SERVER_DIFF_REPORT_STORE_H_

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/format/checkpoint.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// What a kept report was computed from: every file of both checkpoints
// (mapped files and the files read at open, with no identity for one that
// was absent), in the checkpoints' own order.
using DiffInputs =
    std::vector<std::pair<std::string, std::optional<FileIdentity>>>;
DiffInputs DiffInputsOf(const Checkpoint& quant, const Checkpoint& ref);

// The key of `req`'s report: both checkpoints' canonical paths (so two
// spellings of one path find one report), the filter, the tensors as a
// sorted set, top_k and worst_groups as the diff applies them (unset = 10
// and 5), fail_on in order, and the part (count 0 = none). Unambiguous:
// every field is length-prefixed.
std::string DiffReportKey(const v1::QuantDiffRequest& req,
                          const Checkpoint& quant, const Checkpoint& ref);

// Reports by key, each with the inputs it was computed from, bounded by
// entries and by the serialized bytes of the kept responses, the least
// recently kept or found evicted first.
// Thread safety: all methods are thread-safe.
class DiffReportStore {
 public:
  // `max_entries` 0 keeps nothing.
  DiffReportStore(int64_t max_entries, int64_t max_bytes)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

  // Whether a report of `bytes` can be kept at all: a diff stops
  // collecting its events once they pass this.
  bool Fits(int64_t bytes) const {
    return max_entries_ > 0 && bytes <= max_bytes_;
  }

  // Keeps `report` (its age_seconds is set by Find) as `key`'s last,
  // replacing the one before; when it does not fit, drops the one before
  // (it is no longer the last) and keeps nothing.
  void Keep(const std::string& key, DiffInputs inputs,
            v1::GetDiffReportResponse report);

  // Forgets `key`'s report (a later diff of it was too big to keep).
  void Drop(const std::string& key);

  // `key`'s report when its inputs are `now`. NOT_FOUND when none is kept,
  // or (dropping it) when a file changed: the message names the file.
  absl::StatusOr<v1::GetDiffReportResponse> Find(const std::string& key,
                                                 const DiffInputs& now);

  size_t size() const;
  int64_t bytes() const;
  int64_t evictions() const;

 private:
  struct Entry {
    DiffInputs inputs;
    v1::GetDiffReportResponse report;
    int64_t bytes = 0;
    absl::Time kept;
    std::list<std::string>::iterator lru;
  };
  void EraseLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t max_entries_;
  const int64_t max_bytes_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_DIFF_REPORT_STORE_H_
