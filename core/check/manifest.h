// Integrity manifests: a content hash of every stored tensor's bytes, so a
// copy of a checkpoint (another disk, a download, a repack) can be checked
// tensor by tensor against the original.
//
// The manifest is JSON:
//   {"format": "tensormorph-manifest", "version": 1, "hash": "xxh3-64",
//    "tensors": [{"name": "w", "file": "model.safetensors", "offset": 80,
//                 "size": 4096, "dtype": "F16", "hash": "0123456789abcdef"},
//                ...]}
// `file` is the file's name without its directory (a copy lives elsewhere),
// `offset` the absolute byte offset in it, `hash` XXH3-64 of the tensor's
// stored bytes as 16 lower-case hex digits.
#ifndef TENSORMORPH_CORE_CHECK_MANIFEST_H_
#define TENSORMORPH_CORE_CHECK_MANIFEST_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/check/finding.h"
#include "core/format/checkpoint.h"

namespace tensormorph {

inline constexpr absl::string_view kManifestFormat = "tensormorph-manifest";
inline constexpr absl::string_view kManifestHash = "xxh3-64";
// A manifest larger than this is refused (a million tensors take ~150 MB).
inline constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;

struct ManifestEntry {
  std::string name;
  std::string file;  // base name
  uint64_t offset = 0;
  uint64_t size = 0;
  std::string dtype;  // as DTypeName
  uint64_t hash = 0;
};

// `t`'s entry but for its hash (0): name, file's base name, offset, size,
// dtype.
ManifestEntry ManifestEntryOf(const Checkpoint& ckpt, const StoredTensor& t);

// XXH3-64 of `t`'s stored bytes in a pass of their own: the reference the
// hashes a check takes in its value pass (stored_hashes.h) are held to. Read
// in pieces so that `cancelled` is
// polled and `on_bytes(n)` told of every piece.
// Errors: CANCELLED; FAILED_PRECONDITION / DATA_LOSS when the mapping faults
// (the file shrank under the read; see GuardedRead).
absl::StatusOr<ManifestEntry> HashStoredTensor(
    const Checkpoint& ckpt, const StoredTensor& t,
    const std::atomic<bool>* cancelled = nullptr,
    const std::function<void(int64_t)>& on_bytes = {});

// "0123456789abcdef".
std::string HashHex(uint64_t hash);

// The manifest's JSON text for `entries` (in their order), one entry a line.
std::string ManifestJson(const std::vector<ManifestEntry>& entries);

// Parses a manifest, checking every field: the format, version and hash
// names; each entry an object with a non-empty string name (unique), a
// string file, non-negative integer offset and size, a string dtype and 16
// hex digits of hash.
// Errors: INVALID_ARGUMENT naming the field path ("tensors[3].size") and
// expected vs actual; for text that is not JSON, the position.
absl::StatusOr<std::vector<ManifestEntry>> ParseManifest(
    absl::string_view text);

// manifest-mismatch findings: every tensor of `expected` whose hash, size or
// dtype differs in `actual`, is missing from it, and every tensor of
// `actual` the manifest does not list. Ordered by name.
std::vector<Finding> CompareManifest(const std::vector<ManifestEntry>& expected,
                                     const std::vector<ManifestEntry>& actual);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_CHECK_MANIFEST_H_
