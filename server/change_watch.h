// Tells whether anything changed in a set of directories since a moment,
// from the kernel's inotify events, so the checkpoint registry need not stat
// every file of a 280-shard checkpoint on every call.
#ifndef TENSORMORPH_SERVER_CHANGE_WATCH_H_
#define TENSORMORPH_SERVER_CHANGE_WATCH_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace tensormorph {

// One inotify instance, its watches shared by everyone who watches the same
// directory. An event is queued by the kernel inside the system call that
// causes it (a write, rename, unlink, chmod, truncate), so a Changed() that
// runs after that call has returned always sees it: Changed() reads what is
// queued (one non-blocking read) before it answers.
// What it cannot see: changes made by another host to a network file
// system, and stores through a shared writable mapping (no event is
// queued for them). The registry therefore still stats everything at least
// once per short interval, and every reply checks its own tensor's file at
// its end (Checkpoint::CheckUnchanged) whatever this says.
// Thread safety: all methods are thread-safe.
class ChangeWatch {
 public:
  // What Watch returns: the watches taken and their generations then.
  // Destroying it gives the watches back.
  class Watched {
   public:
    ~Watched();
    Watched(const Watched&) = delete;
    Watched& operator=(const Watched&) = delete;

   private:
    friend class ChangeWatch;
    explicit Watched(std::shared_ptr<ChangeWatch> owner)
        : owner_(std::move(owner)) {}
    std::shared_ptr<ChangeWatch> owner_;
    std::vector<std::pair<int, uint64_t>> watches_;  // wd, generation
    uint64_t overflows_ = 0;
  };

  // Null when inotify is unavailable (no instance left: the registry then
  // stats on every call, as it would without it).
  static std::shared_ptr<ChangeWatch> Create();
  ~ChangeWatch();
  ChangeWatch(const ChangeWatch&) = delete;
  ChangeWatch& operator=(const ChangeWatch&) = delete;

  // Watches `directories` (each a directory's path; duplicates are fine)
  // from now on. Null when a watch cannot be taken (a path that is gone or
  // not a directory, the user's watch limit): the caller then has no
  // shortcut, never a wrong one.
  std::unique_ptr<Watched> Watch(absl::Span<const std::string> directories);

  // Whether any event touched a watched directory (a file in it or the
  // directory itself) since `w` was taken, or the kernel's queue
  // overflowed meanwhile (events were lost: everything counts as changed).
  bool Changed(const Watched& w);

  // Events read so far (for tests and metrics).
  uint64_t events_read() const;

 private:
  explicit ChangeWatch(int fd) : fd_(fd) {}
  // Reads every queued event; the caller holds mu_.
  void DrainLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Release(const Watched& w);
  void ReleaseLocked(const Watched& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Dir {
    uint64_t generation = 0;  // events seen for this wd
    int users = 0;
    bool gone = false;  // the kernel dropped the watch (IN_IGNORED)
  };
  const int fd_;
  std::weak_ptr<ChangeWatch> self_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, Dir> dirs_ ABSL_GUARDED_BY(mu_);
  uint64_t overflows_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t events_read_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_CHANGE_WATCH_H_
