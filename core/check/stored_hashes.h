// The manifest's hashes taken in the value pass of `tensormorph check`: each
// stored tensor that is a part of a logical tensor the value pass reads is
// hashed piece by piece right after the value rules read that piece, while
// its bytes are still in cache, instead of in a pass of its own over the
// whole checkpoint. XXH3-64 is streamed in stored order, so every digest is
// the one HashStoredTensor (manifest.h, the reference) takes of the whole
// range; tests hold the two to byte-for-byte equal manifests.
//
// Use: Claim every logical tensor the value pass will read, in its order;
// then for each, Begin, Advance after every piece, End; last, Finish hashes
// whatever no value pass read (parts of tensors not decoded, stored tensors
// no logical tensor holds) and returns every entry.
#ifndef TENSORMORPH_CORE_CHECK_STORED_HASHES_H_
#define TENSORMORPH_CORE_CHECK_STORED_HASHES_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/check/manifest.h"
#include "core/format/checkpoint.h"

namespace tensormorph {

class StoredHashes {
 public:
  // REQUIRES: `ckpt` outlives this object.
  explicit StoredHashes(const Checkpoint& ckpt);
  ~StoredHashes();
  StoredHashes(const StoredHashes&) = delete;
  StoredHashes& operator=(const StoredHashes&) = delete;

  // `t`'s parts no earlier Claim took are hashed in `t`'s value pass (a part
  // two logical tensors share is hashed once, by the first).
  void Claim(const LogicalTensor& t);
  // The stored bytes no claimed part holds: what Finish hashes alone.
  int64_t unclaimed_bytes() const { return unclaimed_bytes_; }

  // Starts the hashes of the parts Claim(t) took.
  // Errors: RESOURCE_EXHAUSTED (no memory for an XXH3 state).
  absl::Status Begin(const LogicalTensor& t);
  // After the value pass went through `done` of `total` elements of the
  // tensor Begin started: each of its parts hashed up to the same fraction
  // of its bytes (the bytes that pass just read, for a part laid out in the
  // elements' order). A read fault is kept for End (the value pass's
  // callback cannot fail).
  void Advance(int64_t done, int64_t total);
  // Hashes the rest of the parts Begin started (all of them when the value
  // pass stopped early: an undecodable tensor's bytes are still hashed) and
  // takes their digests, polling `cancelled` between 16 MiB pieces.
  // Errors: CANCELLED; those of GuardedRead (a file that shrank under the
  // read).
  absl::Status End(const std::atomic<bool>* cancelled = nullptr);

  // Hashes every stored tensor no value pass hashed (HashStoredTensor,
  // `on_bytes` told of each piece) and returns every stored tensor's entry
  // in ckpt.stored_tensors() order.
  // Errors: CANCELLED; those of GuardedRead.
  absl::StatusOr<std::vector<ManifestEntry>> Finish(
      const std::atomic<bool>* cancelled,
      const std::function<void(int64_t)>& on_bytes);

 private:
  struct Open;  // a part being hashed: its index, XXH3 state, bytes hashed

  // The index of `p` in ckpt.stored_tensors(), or -1.
  int64_t IndexOf(const StoredTensor* p) const;
  // Hashes `o` up to `to` bytes, in pieces of at most 16 MiB between which
  // `cancelled` is polled.
  absl::Status HashTo(Open& o, uint64_t to,
                      const std::atomic<bool>* cancelled = nullptr);

  const Checkpoint& ckpt_;
  std::vector<ManifestEntry> entries_;       // in stored order
  std::vector<const LogicalTensor*> owner_;  // who hashes each, or nullptr
  std::vector<bool> hashed_;
  int64_t unclaimed_bytes_ = 0;
  std::vector<Open> open_;
  absl::Status fault_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_CHECK_STORED_HASHES_H_
