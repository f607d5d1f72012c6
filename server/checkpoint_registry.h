// Opens each checkpoint once and shares it between calls.
#ifndef TENSORMORPH_SERVER_CHECKPOINT_REGISTRY_H_
#define TENSORMORPH_SERVER_CHECKPOINT_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "core/format/checkpoint.h"
#include "server/change_watch.h"
#include "server/path_sandbox.h"

namespace tensormorph {

// Caches open checkpoints by canonical path. A cached checkpoint is reopened
// when anything it was opened from changed on disk: a mapped file, the
// index or a config file (device, inode, size, mtime or ctime, so a chmod
// too: the reopen checks access again), a config file that appeared or
// vanished, or the checkpoint names in its directory. Past `max_open` the
// least recently used one is closed, never refused (calls that still hold
// it keep it alive until they finish).
// Cost: an Acquire of a local checkpoint reads the server's inotify queue
// (ChangeWatch: one non-blocking read) and stats nothing more than the
// sandbox's resolution of its path while no event touched the directories
// of its files; after an event, and at least every kLocalRecheck whatever
// the events say (file systems that queue none), it stats every file once
// (and reads a directory checkpoint's listing once), outside the lock.
// Without inotify, every Acquire stats every file. Mixed bytes are never
// served either way: each reply checks the files it read at its end
// (Checkpoint::CheckUnchanged).
// Every file is opened through the sandbox's FileAccess (beneath a root's
// fd). Calls that ask for a checkpoint being opened wait for that open
// instead of parsing it again; an open that failed for what the files hold
// (DATA_LOSS, UNIMPLEMENTED, INVALID_ARGUMENT) is remembered with the
// identities of the files it was made from (the path and its directory's
// checkpoint names), and reused while they are unchanged: a corrupt 100 MB
// header is parsed once, not once per call. A pool task that can run again
// from the start waits for another call's open without a worker
// (ParkingScope).
// Thread safety: all methods are thread-safe; checks and opens happen
// outside the lock so a slow file system does not stall other calls.
class CheckpointRegistry {
  struct Opening;  // an open in progress, below

 public:
  // Checkpoints open with `open`, beneath the sandbox's roots and with its
  // backings (OpenOptions::access, ::backings: set here). A checkpoint
  // beneath a backed root is rechecked as a remote one is (at most every
  // kRemoteRecheck), since any of its files may be read from the backing.
  CheckpointRegistry(PathSandbox sandbox, size_t max_open,
                     OpenOptions open = {});

  // Lets the pool task on this thread give its worker back while another
  // call opens the checkpoint it asks for, instead of blocking the worker
  // until that open is done: six calls on a corrupt 100 MB header must not
  // hold every worker for the length of its one parse while a bystander's
  // calls queue behind them. Inside a scope, an Acquire that would wait
  // returns UNAVAILABLE at once and marks the scope parked(); the task then
  // unwinds without answering and hands ResumeWhenOpened the way to run it
  // again from the start, which runs once the open is done. So only a task
  // that can run again from the start (it has answered nothing and holds
  // nothing it would take twice) opens a scope. One scope per thread at a
  // time; Acquires of other registries and on other threads are not in it.
  class ParkingScope {
   public:
    explicit ParkingScope(CheckpointRegistry& registry);
    ~ParkingScope();
    ParkingScope(const ParkingScope&) = delete;
    ParkingScope& operator=(const ParkingScope&) = delete;

    // Whether an Acquire in the scope returned instead of waiting.
    bool parked() const { return opening_ != nullptr; }
    // When parked(): runs `resume` once the open waited for is done, on the
    // thread that finished it, or here at once if it is done already.
    // `resume` must be brief (queue the task again, not run it).
    void ResumeWhenOpened(absl::AnyInvocable<void()> resume);

   private:
    friend class CheckpointRegistry;
    CheckpointRegistry& registry_;
    ParkingScope* const outer_;
    std::shared_ptr<Opening> opening_;
  };

  // Resolves `requested` through the sandbox and returns the checkpoint.
  // Errors: those of PathSandbox::Resolve and Checkpoint::Open;
  // PERMISSION_DENIED when a file of the checkpoint (a shard) resolves
  // outside the roots; INTERNAL (logged) when opening threw; UNAVAILABLE,
  // inside a ParkingScope only, when it parked instead of waiting.
  absl::StatusOr<std::shared_ptr<const Checkpoint>> Acquire(
      absl::string_view requested);

  // For CheckCheckpoint, which reports what a strict open refuses: the
  // cached checkpoint when `requested` opens as Acquire opens it; when that
  // open fails with DATA_LOSS, UNIMPLEMENTED or INVALID_ARGUMENT (a missing
  // or corrupt shard, an index that disagrees with its shards, a config that
  // contradicts the tensors, a shard that is no regular file),
  // a lenient open of it (OpenOptions::lenient, its problems() the
  // findings), inside the same roots, that is never cached: no other call
  // ever sees a checkpoint opened so.
  // Errors: those of Acquire, and of the lenient open.
  absl::StatusOr<std::shared_ptr<const Checkpoint>> AcquireForCheck(
      absl::string_view requested);
  const OpenOptions& open_options() const { return open_options_; }

  // As Acquire, but never opens: the checkpoint when it is cached and
  // unchanged on disk, else null (not opened yet, changed, or `requested`
  // does not resolve: Acquire then says why). For work done on a gRPC
  // thread, which must not parse a file. Cost: Acquire's stats.
  std::shared_ptr<const Checkpoint> AcquireIfOpen(absl::string_view requested);

  size_t open_count() const;
  // The sizes of the files of the checkpoints cached now, summed: what the
  // registry keeps mapped (a checkpoint already closed here but still held
  // by a call is mapped too, and not counted). Cost: one pass over the
  // cached checkpoints' files, under the lock.
  uint64_t mapped_bytes() const;
  size_t max_open() const { return max_open_; }
  int64_t opens() const;
  // Calls answered from a remembered failed open instead of a new parse.
  int64_t failed_opens_reused() const;
  // Times a call parked to wait for another call's open (ParkingScope).
  int64_t parked_calls() const;
  // Times a cached local checkpoint was checked in full (every file
  // stat'ed) rather than by the inotify shortcut.
  int64_t full_checks() const;
  const PathSandbox& sandbox() const { return sandbox_; }

 private:
  struct Entry {
    std::shared_ptr<const Checkpoint> checkpoint;
    std::list<std::string>::iterator lru;
    absl::Time checked;  // when last found unchanged by a full check
    // Local checkpoints: the directories of its files, watched since just
    // before that check (null: no shortcut, check in full).
    std::shared_ptr<const ChangeWatch::Watched> watched;
  };
  // A local checkpoint with no event since its last full check is checked
  // in full again once this is past: the backstop for file systems that
  // queue no events (network mounts) and writes through shared mappings.
  static constexpr absl::Duration kLocalRecheck = absl::Seconds(1);
  // A remote checkpoint's reads are conditional on each object's version at
  // open, so a cached open never mixes versions; a replaced object fails
  // the read that meets it (ABORTED), and is noticed here at most this long
  // after the last check, which costs a request per file.
  static constexpr absl::Duration kRemoteRecheck = absl::Seconds(10);
  // Unchanged for a checkpoint opened from URLs: each object's version, the
  // read files' presence and versions, and the directory's names.
  bool RemoteUnchanged(const Checkpoint& c) const;
  // Whether every file of `c` is still the one it mapped. `resolved` is
  // the checkpoint's path as the sandbox just resolved and stat'ed it: the
  // file at that path (a single-file checkpoint's one file) is judged by
  // that stat instead of a second one.
  static bool Unchanged(const Checkpoint& c,
                        const PathSandbox::Resolved& resolved);
  // Whether a cached local checkpoint is still the one on disk: the
  // shortcut (no event, checked recently, the resolved path's own stat
  // agrees), else a full Unchanged; a full check that passes re-arms
  // `entry_watched` (the watch taken before it), so that an event between
  // the check and the next call is never lost.
  bool LocalUnchanged(
      const Checkpoint& c, const PathSandbox::Resolved& resolved,
      absl::Time checked,
      const std::shared_ptr<const ChangeWatch::Watched>& watched,
      absl::Time now, std::shared_ptr<const ChangeWatch::Watched>* rearmed);
  // The directories holding `c`'s files, read files and listing, each once.
  static std::vector<std::string> DirectoriesOf(const Checkpoint& c);
  // Null (OK) when !may_open and the checkpoint would have to be opened.
  absl::StatusOr<std::shared_ptr<const Checkpoint>> AcquireUnfenced(
      absl::string_view requested, bool may_open);
  // Opens `path` (resolved) with `options` beneath the roots.
  absl::StatusOr<std::shared_ptr<const Checkpoint>> OpenInside(
      const std::string& path, const OpenOptions& options) const;
  // OpenInside with open_options_, once for all the calls that ask at the
  // same time, and not again while a remembered failure's inputs hold.
  absl::StatusOr<std::shared_ptr<const Checkpoint>> OpenOnce(
      const PathSandbox::Resolved& resolved);
  // What an open of `resolved` is made from, as identities.
  static std::vector<std::pair<std::string, FileIdentity>> InputsOf(
      const PathSandbox::Resolved& resolved, const FileAccess& access);

  static constexpr size_t kMaxRememberedFailures = 1024;
  struct Opening {
    absl::Notification done;
    absl::StatusOr<std::shared_ptr<const Checkpoint>> result =
        absl::UnknownError("not opened yet");
    // Guarded by the registry's mu_: set when result is final, and the
    // parked calls' resumptions to run then.
    bool finished = false;
    std::vector<absl::AnyInvocable<void()>> parked;
  };
  struct Failure {
    absl::Status status;
    std::vector<std::pair<std::string, FileIdentity>> inputs;
  };

  const PathSandbox sandbox_;
  const size_t max_open_;
  const OpenOptions open_options_;
  const std::shared_ptr<ChangeWatch> watch_;  // null: no inotify
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);  // front = most recent
  int64_t opens_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failed_opens_reused_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t parked_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> full_checks_{0};
  absl::flat_hash_map<std::string, std::shared_ptr<Opening>> opening_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Failure> failed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_CHECKPOINT_REGISTRY_H_
