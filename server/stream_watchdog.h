// Ends streams that hold a slot too long: the whole-call limit holds whether
// or not the client reads (a stalled client's write never completes, so a
// check made when the next chunk is produced would never run), and a write
// the client has not taken for the idle-write limit ends the call too.
#ifndef TENSORMORPH_SERVER_STREAM_WATCHDOG_H_
#define TENSORMORPH_SERVER_STREAM_WATCHDOG_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tensormorph {

// One thread for all streams. A stream registers a Watch with two
// callbacks, both run on the watchdog's thread:
//  - `stop(why)`: the call is past max_call; end it at the next boundary
//    with `why` (RESOURCE_EXHAUSTED naming the limit). A client that reads
//    gets that status.
//  - `cancel(why)`: the call must end now (ctx->TryCancel()): its write has
//    waited `max_idle_write`, or it is still running `kCancelGrace` after
//    `stop`, or CancelAll was called. A stalled client sees CANCELLED (its
//    pending data is never flushed); `why` is for the server's log.
// Each callback runs at most once per watch and never after Remove returned.
// Thread safety: all methods are thread-safe.
class StreamWatchdog {
 public:
  using Callback = std::function<void(const absl::Status& why)>;
  class Watch;

  // How long a stopped call may take to deliver its last write.
  static constexpr absl::Duration kCancelGrace = absl::Seconds(1);

  StreamWatchdog(absl::Duration max_call, absl::Duration max_idle_write);
  ~StreamWatchdog();  // REQUIRES: every watch removed
  StreamWatchdog(const StreamWatchdog&) = delete;
  StreamWatchdog& operator=(const StreamWatchdog&) = delete;

  // A zero max_idle_write turns the idle-write limit off.
  // Starts watching a call that began now.
  Watch* Add(Callback stop, Callback cancel);
  // A write started / completed: the idle-write clock runs between them.
  void WriteStarted(Watch* w);
  void WriteDone(Watch* w);
  // Stops watching and frees `w`; waits for a callback of `w` running on
  // another thread (call it without locks a callback takes: from OnDone).
  void Remove(Watch* w);
  // Cancels every call watched now (a second signal during the drain).
  // Returns how many.
  int CancelAll(const absl::Status& why);
  // Waits up to `timeout` for every watch to be removed (no stream left
  // running). True when none is left.
  bool WaitIdle(absl::Duration timeout);

  // Runs `fn` on the watchdog's thread at its first tick after `delay`
  // (the tick is at most 250 ms): for brief work that must wait until gRPC
  // has let go of something, with no thread of its own. Work still pending
  // when the watchdog goes is dropped.
  void RunAfter(absl::Duration delay, std::function<void()> fn);

 private:
  void Loop();
  absl::Status CallLimitStatus() const;
  absl::Status IdleLimitStatus() const;

  const absl::Duration max_call_;
  const absl::Duration max_idle_write_;  // zero: no idle-write limit
  const absl::Duration tick_;            // how often the watches are checked
  absl::Mutex mu_;
  absl::CondVar cv_;  // a callback returned, a cancellation asked, stopping
  std::list<Watch*> watches_ ABSL_GUARDED_BY(mu_);
  std::list<std::pair<absl::Time, std::function<void()>>> later_
      ABSL_GUARDED_BY(mu_);                       // RunAfter's
  Watch* firing_ ABSL_GUARDED_BY(mu_) = nullptr;  // its callback runs
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

class StreamWatchdog::Watch {
 private:
  friend class StreamWatchdog;
  Watch(absl::Time deadline, Callback stop, Callback cancel)
      : deadline(deadline), stop(std::move(stop)), cancel(std::move(cancel)) {}
  const absl::Time deadline;
  Callback stop, cancel;
  std::list<Watch*>::iterator it;
  std::atomic<int64_t> write_since_ns{0};  // 0: no write pending
  // Under the watchdog's mu_:
  bool stopped = false;
  bool cancelled = false;
  std::optional<absl::Status> cancel_asked;  // by CancelAll
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_STREAM_WATCHDOG_H_
