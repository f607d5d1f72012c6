// The fingerprint of a diff plan (DiffPartInfo.plan_fingerprint): parts of
// one plan carry the same one, so a merge refuses parts of different plans
// (another checkpoint, filter, gate set or part count).
#ifndef TENSORMORPH_CORE_DIFF_PARTS_FINGERPRINT_H_
#define TENSORMORPH_CORE_DIFF_PARTS_FINGERPRINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/diff_parts/partition.h"

namespace tensormorph {

// FNV-1a 64 (offset basis 0xcbf29ce484222325, prime 0x100000001b3) of
// `bytes` continuing from `hash`: stable across machines and runs, unlike
// absl::Hash (seeded per process). Not for anything adversarial.
inline constexpr uint64_t kFnv1a64Basis = 0xcbf29ce484222325ull;
uint64_t Fnv1a64(absl::string_view bytes, uint64_t hash = kFnv1a64Basis);

// What a diff plan is asked with, as a QuantDiffRequest carries it.
struct DiffPlanKey {
  std::string checkpoint, reference;  // as paths: "q", "q/", "./q" are one
  std::string filter;
  int32_t top_k = 0;         // as applied: the server's default for unset
  int32_t worst_groups = 0;  // likewise
  std::vector<std::string> fail_on;  // in order
  int32_t count = 0;                 // the part count
  std::string imatrix;               // as a path; empty: none
};

// 16 lower-case hex digits over, each length-prefixed so that no two
// different plans feed the same bytes: `key`'s checkpoint and reference
// (as paths), filter, top_k, worst_groups, fail_on in order and count, the
// imatrix's path when set, then
// every plan item's name, reference name, shape and bytes in plan order.
// Not the bytes' content: a checkpoint rewritten in place at the same sizes
// between parts goes unnoticed (run a batch's parts together).
std::string DiffPlanFingerprint(const DiffPlanKey& key,
                                absl::Span<const DiffPlanItem> plan);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_DIFF_PARTS_FINGERPRINT_H_
