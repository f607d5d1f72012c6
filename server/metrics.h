// Counters the server keeps about its own work; GetServerInfo reports them.
#ifndef TENSORMORPH_SERVER_METRICS_H_
#define TENSORMORPH_SERVER_METRICS_H_

#include <atomic>
#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tensormorph {

// Thread safety: all members are safe to use from any thread.
class Metrics {
 public:
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> streams_started{0};
  std::atomic<int64_t> streams_cancelled{0};
  std::atomic<int64_t> chunks_sent{0};
  std::atomic<int64_t> bytes_sent{0};

  void StreamStarted() {
    streams_started.fetch_add(1);
    absl::MutexLock lock(&mu_);
    ++active_streams_;
  }
  // Returns true when this was the last active stream.
  bool StreamEnded() {
    absl::MutexLock lock(&mu_);
    return --active_streams_ == 0;
  }
  int64_t active_streams() const {
    absl::MutexLock lock(&mu_);
    return active_streams_;
  }
  // Blocks until no stream is active or `timeout` passes; true when idle.
  bool WaitForIdle(absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(
        absl::Condition(
            +[](const int64_t* n) { return *n == 0; }, &active_streams_),
        timeout);
  }

 private:
  mutable absl::Mutex mu_;
  int64_t active_streams_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_METRICS_H_
