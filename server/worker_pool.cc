#include "server/worker_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "server/exception_fence.h"

namespace tensormorph {

const char* WorkerPool::LaneName(Lane lane) {
  switch (lane) {
    case Lane::kUnary:
      return "unary";
    case Lane::kStream:
      return "stream";
    case Lane::kBackground:
      return "background";
  }
  return "unknown";
}

WorkerPool::WorkerPool(int threads) {
  const int n = std::max(1, threads);
  // One worker stays out of background work; a pool of one cannot keep it,
  // and runs diffs and checks between everything else.
  background_cap_ = std::max(1, n - 1);
  for (int i = 0; i < n; ++i) {
    threads_.emplace_back([this] { Loop(); });
  }
}

WorkerPool::~WorkerPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void WorkerPool::Submit(Lane lane, std::function<void()> task) {
  const absl::Time now = absl::Now();
  absl::MutexLock lock(&mu_);
  lanes_[static_cast<int>(lane)].queue.push_back({std::move(task), now});
}

int WorkerPool::NextLaneLocked() const {
  for (int i = 0; i < kNumLanes; ++i) {
    const LaneState& l = lanes_[i];
    if (l.queue.empty()) continue;
    if (i == static_cast<int>(Lane::kBackground) &&
        l.running >= background_cap_) {
      continue;
    }
    return i;
  }
  return -1;
}

std::array<WorkerPool::LaneSnapshot, WorkerPool::kNumLanes>
WorkerPool::Snapshot() const {
  std::array<LaneSnapshot, kNumLanes> out;
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < kNumLanes; ++i) {
    const LaneState& l = lanes_[i];
    LaneSnapshot& o = out[i];
    o.lane = static_cast<Lane>(i);
    o.queued = static_cast<int64_t>(l.queue.size());
    o.running = l.running;
    int64_t sum = 0;
    for (size_t b = 0; b < l.wait_counts.size(); ++b) {
      sum += l.wait_counts[b];
      o.wait_buckets[b] = sum;
    }
    o.wait_seconds_sum = l.wait_seconds_sum;
  }
  return out;
}

void WorkerPool::ForkJoin(absl::FunctionRef<void()> first,
                          absl::FunctionRef<void()> second) {
  // Whoever claims `second` runs it. The queued task may outlive this call
  // (when this thread claimed), so it holds the claim by shared_ptr and
  // touches `second` only after winning it, while this call waits.
  // An exception from either half is rethrown here only once the other is
  // done: `second` runs on state of this frame, which unwinding would free.
  struct Claim {
    std::atomic<bool> taken{false};
    absl::Notification done;
    std::exception_ptr error;  // written before `done`
  };
  auto claim = std::make_shared<Claim>();
  SubmitUnary([claim, &second] {
    if (!claim->taken.exchange(true)) {
      try {
        second();
      } catch (...) {
        claim->error = std::current_exception();
      }
      claim->done.Notify();
    }
  });
  std::exception_ptr first_error;
  try {
    first();
  } catch (...) {
    first_error = std::current_exception();
  }
  if (!claim->taken.exchange(true)) {
    if (first_error == nullptr) second();  // else: the call fails anyway
  } else {
    claim->done.WaitForNotification();
  }
  if (first_error != nullptr) std::rethrow_exception(first_error);
  if (claim->error != nullptr) std::rethrow_exception(claim->error);
}

void WorkerPool::Loop() {
  while (true) {
    std::function<void()> task;
    int lane = -1;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WorkerPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            if (p->NextLaneLocked() >= 0) return true;
            if (!p->stopping_) return false;
            // Stopping: done once nothing is queued; background tasks
            // past the cap wait for a running one to end.
            for (const LaneState& l : p->lanes_) {
              if (!l.queue.empty()) return false;
            }
            return true;
          },
          this));
      lane = NextLaneLocked();
      if (lane < 0) return;  // stopping and drained
      LaneState& l = lanes_[lane];
      const double waited =
          absl::ToDoubleSeconds(absl::Now() - l.queue.front().queued_at);
      task = std::move(l.queue.front().task);
      l.queue.pop_front();
      ++l.running;
      l.wait_seconds_sum += waited;
      size_t b = 0;
      while (b < kWaitBounds.size() && waited > kWaitBounds[b]) ++b;
      ++l.wait_counts[b];
    }
    // The last line of the exception fence: tasks fence their own work and
    // end their calls; one that still throws is logged, and the worker
    // lives on.
    Fenced({"worker task"}, task).IgnoreError();
    task = nullptr;  // what it captured goes before the lane frees its place
    absl::MutexLock lock(&mu_);
    --lanes_[lane].running;
  }
}

}  // namespace tensormorph
