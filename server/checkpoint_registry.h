// Opens each checkpoint once and shares it between calls.
#ifndef TENSORMORPH_SERVER_CHECKPOINT_REGISTRY_H_
#define TENSORMORPH_SERVER_CHECKPOINT_REGISTRY_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/format/checkpoint.h"
#include "server/path_sandbox.h"

namespace tensormorph {

// Caches open checkpoints by canonical path. A cached checkpoint is reopened
// when any of its files changed on disk (device, inode, size or mtime), and
// the least recently used ones are closed past `max_open` (calls that still
// hold one keep it alive until they finish).
// Thread safety: all methods are thread-safe; opening happens outside the
// lock so a slow open does not stall other calls.
class CheckpointRegistry {
 public:
  CheckpointRegistry(PathSandbox sandbox, size_t max_open);

  // Resolves `requested` through the sandbox and returns the checkpoint.
  // Errors: those of PathSandbox::Resolve and Checkpoint::Open;
  // PERMISSION_DENIED when a file of the checkpoint (a shard) resolves
  // outside the roots; INTERNAL (logged) when opening threw.
  absl::StatusOr<std::shared_ptr<const Checkpoint>> Acquire(
      absl::string_view requested);

  size_t open_count() const;
  size_t max_open() const { return max_open_; }
  int64_t opens() const;
  const PathSandbox& sandbox() const { return sandbox_; }

 private:
  struct Entry {
    std::shared_ptr<const Checkpoint> checkpoint;
    std::list<std::string>::iterator lru;
  };
  static bool Unchanged(const Checkpoint& c);
  absl::StatusOr<std::shared_ptr<const Checkpoint>> AcquireUnfenced(
      absl::string_view requested);

  const PathSandbox sandbox_;
  const size_t max_open_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  int64_t opens_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_CHECKPOINT_REGISTRY_H_
