// The last QuantDiff report per request, kept so that a page restores a
// diff's results after a reload or from a shared link (GetDiffReport).
#ifndef TENSORMORPH_SERVER_DIFF_REPORT_STORE_H_
#define TENSORMORPH_SERVER_DIFF_REPORT_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/format/checkpoint.h"
#include "server/kept_results.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

using DiffInputs = KeptInputs;
inline DiffInputs DiffInputsOf(const Checkpoint& quant, const Checkpoint& ref) {
  return InputsOf(quant, ref);
}

// The key of `req`'s report: both checkpoints' canonical paths (so two
// spellings of one path find one report), the filter, the tensors as a
// sorted set, top_k and worst_groups as the diff applies them (unset = 10
// and 5), fail_on in order, the part (count 0 = none) and the imatrix path
// as given, when set. Unambiguous:
// every field is length-prefixed.
std::string DiffReportKey(const v1::QuantDiffRequest& req,
                          const Checkpoint& quant, const Checkpoint& ref);

// Reports by key (KeptResults), bounded by entries and by the serialized
// bytes of the kept responses.
// Thread safety: all methods are thread-safe.
class DiffReportStore {
 public:
  // `max_entries` 0 keeps nothing.
  DiffReportStore(int64_t max_entries, int64_t max_bytes)
      : kept_("diff report", "run the diff", max_entries, max_bytes) {}

  // Whether a report of `bytes` can be kept at all: a diff stops
  // collecting its events once they pass this.
  bool Fits(int64_t bytes) const { return kept_.Fits(bytes); }

  // Keeps `report` (its age_seconds is set by Find) as `key`'s last,
  // replacing the one before; when it does not fit, drops the one before
  // (it is no longer the last) and keeps nothing.
  void Keep(const std::string& key, DiffInputs inputs,
            v1::GetDiffReportResponse report);

  // Forgets `key`'s report (a later diff of it was too big to keep).
  void Drop(const std::string& key) { kept_.Drop(key); }

  // `key`'s report when its inputs are `now`. NOT_FOUND when none is kept,
  // or (dropping it) when a file changed: the message names the file.
  absl::StatusOr<v1::GetDiffReportResponse> Find(const std::string& key,
                                                 const DiffInputs& now);

  size_t size() const { return kept_.size(); }
  int64_t bytes() const { return kept_.bytes(); }
  int64_t evictions() const { return kept_.evictions(); }

 private:
  KeptResults<v1::GetDiffReportResponse> kept_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_DIFF_REPORT_STORE_H_
