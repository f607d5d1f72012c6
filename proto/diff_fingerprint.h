// The fingerprint of a diff plan (DiffPartInfo.plan_fingerprint): parts of
// one plan carry the same one, so a merge refuses parts of different plans
// (another checkpoint, filter, gate set or part count).
#ifndef TENSORMORPH_PROTO_DIFF_FINGERPRINT_H_
#define TENSORMORPH_PROTO_DIFF_FINGERPRINT_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "proto/diff_partition.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// FNV-1a 64 (offset basis 0xcbf29ce484222325, prime 0x100000001b3) of
// `bytes` continuing from `hash`: stable across machines and runs, unlike
// absl::Hash (seeded per process). Not for anything adversarial.
inline constexpr uint64_t kFnv1a64Basis = 0xcbf29ce484222325ull;
uint64_t Fnv1a64(absl::string_view bytes, uint64_t hash = kFnv1a64Basis);

// 16 lower-case hex digits over, each length-prefixed so that no two
// different plans feed the same bytes: the request's checkpoint and
// reference (as paths: "q", "q/" and "./q" are one), filter, `top_k` and
// `worst_groups` (as applied: the defaults for unset), fail_on in order,
// `count`, then every plan item's name, reference name, shape and bytes in
// plan order. Not the bytes' content: a checkpoint rewritten in place at the
// same sizes between parts goes unnoticed (run a batch's parts together).
std::string DiffPlanFingerprint(const v1::QuantDiffRequest& request,
                                int32_t top_k, int32_t worst_groups,
                                int32_t count,
                                absl::Span<const DiffPlanItem> plan);

}  // namespace tensormorph

#endif  // TENSORMORPH_PROTO_DIFF_FINGERPRINT_H_
