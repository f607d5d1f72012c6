// The duplicate-tensor rule: stored tensors whose bytes are the same.
//
// Two tensors can only be duplicates when their stored sizes are equal, so
// only tensors that share a size are compared, and first by a sampled
// fingerprint (XXH3-64 of a few fixed windows of their bytes): a check
// without --manifest or --verify then reads at most 64 KiB of a tensor
// that shares its size with another instead of hashing every stored byte
// in a pass of its own. Only tensors whose fingerprints still collide are
// hashed in full and compared byte for byte.
#ifndef TENSORMORPH_CORE_CHECK_DUPLICATES_H_
#define TENSORMORPH_CORE_CHECK_DUPLICATES_H_

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/check/finding.h"
#include "core/check/manifest.h"
#include "core/format/checkpoint.h"

namespace tensormorph {

// The windows (offset, length) of a tensor of `size` bytes that its
// fingerprint reads, in order: the whole tensor up to kFingerprintWhole
// bytes; beyond, kFingerprintWindows windows of kFingerprintWindow bytes,
// the first at 0, the last ending at `size`, the others evenly spaced.
inline constexpr uint64_t kFingerprintWindow = 4096;
inline constexpr uint64_t kFingerprintWindows = 16;
inline constexpr uint64_t kFingerprintWhole =
    kFingerprintWindow * kFingerprintWindows;
std::vector<std::pair<uint64_t, uint64_t>> FingerprintWindows(uint64_t size);

// XXH3-64 of `bytes`' windows, read one after the other. For a tensor of at
// most kFingerprintWhole bytes it is the XXH3-64 of all of them (its
// manifest hash). The caller guards the read (GuardedRead).
uint64_t SampledFingerprint(absl::Span<const uint8_t> bytes);

// duplicate-tensor findings, one per set of stored tensors (two or more,
// not empty) holding the same bytes, ordered by their XXH3-64 hash and
// size; the finding names them sorted, and says their xxh3-64.
// `hashes`, when given, holds every stored tensor's manifest entry in
// ckpt.stored_tensors() order (a check that hashed every tensor anyway);
// without, tensors are grouped by size and sampled fingerprint, and only
// those whose fingerprints collide are hashed. Either way a hash match is
// confirmed byte for byte, so a collision is never reported, and the
// findings are the same.
// Errors: CANCELLED; those of GuardedRead (a file that shrank under the
// read).
absl::Status FindDuplicateTensors(const Checkpoint& ckpt,
                                  const std::vector<ManifestEntry>* hashes,
                                  const std::atomic<bool>* cancelled,
                                  std::vector<Finding>* out);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_CHECK_DUPLICATES_H_
