// Finding checkpoints in a directory tree without opening them: what a
// browser lists. Reads directory listings, stats, and at most a few header
// bytes per file; bounded in depth and in directory entries read, so a
// huge tree or a symlink loop cannot make it run away.
#ifndef TENSORMORPH_CORE_FORMAT_CHECKPOINT_SCAN_H_
#define TENSORMORPH_CORE_FORMAT_CHECKPOINT_SCAN_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/format/checkpoint.h"
#include "core/io/file_access.h"

namespace tensormorph {

// One checkpoint found. A checkpoint is a directory holding
// model.safetensors.index.json or .safetensors files (what
// Checkpoint::Open(dir) opens), or a .gguf file (a split set once, as its
// first split). A safetensors directory is searched further like any other:
// the .gguf files and subdirectories beside its shards are listed after it,
// each a checkpoint of its own.
struct FoundCheckpoint {
  // Below the scanned directory, '/'-separated; empty for the scanned
  // directory itself.
  std::string path;
  CheckpointFormat format = CheckpointFormat::kSafetensors;
  int64_t file_count = 0;   // tensor files: shards, splits or the one file
  int64_t total_bytes = 0;  // their sizes summed
  // Stored tensors, from GGUF headers, a safetensors index, or unindexed
  // safetensors headers of at most 1 MiB each; nullopt when not that cheap.
  std::optional<int64_t> stored_tensor_count;
  int64_t modified_unix_seconds = 0;  // newest of the files (and the index)
  // What the cheap read found broken in the first file that is (naming the
  // file where there are several): a header cut short, no magic, a header
  // or index that is not JSON, a missing split. Empty when nothing was (a
  // GGUF version not read is no broken file); a full open (check) may
  // still find more.
  std::string broken;
};

struct CheckpointScanOptions {
  // Subdirectory levels searched below the directory: 0 finds what is
  // directly in it (its GGUF files, and its subdirectories that are
  // checkpoints themselves).
  int max_depth = 4;
  // Directory entries read (beyond `after`) before the scan stops early.
  int64_t max_scanned = 100'000;
  // Checkpoints found before the scan stops (at least 1).
  size_t max_found = 100;
  // Resume: only what comes after this path (as FoundCheckpoint::path, in
  // scan order; "/" for the scanned directory itself, a safetensors
  // checkpoint with more in it) is found. Empty: from the start.
  std::string after;
  // Whether a symlink's target (its realpath) may be followed; unset: all.
  std::function<bool(const std::string& canonical)> allowed;
  // What every directory is listed and every file stat'ed and read through
  // (a server passes its roots': FileAccess::Beneath); null: anywhere.
  std::shared_ptr<const FileAccess> access = nullptr;
  // Local roots backed by storage URL prefixes, read through `remote`
  // (OpenOptions::backings): beneath one, a directory lists what the disk
  // or the backing holds, each name once, and a checkpoint partly on each
  // is one entry. The backing's names cost requests: an S3 listing per
  // directory, an open per file looked at (at once, 16 at a time). Null:
  // the disk only.
  std::shared_ptr<const RemoteFiles> remote = nullptr;
  std::shared_ptr<const RootBackings> backings = nullptr;
};

struct CheckpointScan {
  std::vector<FoundCheckpoint> found;
  // Where to resume (CheckpointScanOptions::after) when the scan stopped
  // early (max_found or max_scanned reached); empty when it finished.
  std::string resume_after;
};

// Scans `dir` (a canonical directory path) in scan order: the path
// components compared bytewise, a directory's own entry before what is in
// it. Entries whose path does not come after options.after are skipped
// without reading their subtrees.
// Errors: NOT_FOUND when `dir` cannot be listed; INVALID_ARGUMENT when it
// is not a directory.
absl::StatusOr<CheckpointScan> ScanCheckpoints(
    const std::string& dir, const CheckpointScanOptions& options);

// Whether a comes before b in scan order.
bool ScanOrderLess(const std::string& a, const std::string& b);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_FORMAT_CHECKPOINT_SCAN_H_
