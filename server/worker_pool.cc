#include "server/worker_pool.h"

#include <sys/resource.h>
#include <unistd.h>

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
  background_cap_ = std::max(1, n - 1);
  general_threads_ = n;
  for (int i = 0; i < n; ++i) {
    threads_.emplace_back([this] { Loop(/*background=*/false); });
  }
  for (int i = 0; i < background_cap_; ++i) {
    threads_.emplace_back([this] {
      // Below the other threads, so that the scheduler runs an interactive
      // call's threads (gRPC's, the general workers, the client's on this
      // box) as soon as they wake: on two cores a diff at the same nice
      // still made them wait a time slice (p99 4-5x idle). Raising one's
      // own nice needs no privilege; failing to, the lane cap still holds.
      ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()),
                    kBackgroundNice);
      Loop(/*background=*/true);
    });
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

int WorkerPool::NextLaneLocked(bool background) const {
  if (background) {
    return lanes_[static_cast<int>(Lane::kBackground)].queue.empty()
               ? -1
               : static_cast<int>(Lane::kBackground);
  }
  for (Lane lane : {Lane::kUnary, Lane::kStream}) {
    if (!lanes_[static_cast<int>(lane)].queue.empty()) {
      return static_cast<int>(lane);
    }
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

void WorkerPool::Loop(bool background) {
  struct Wake {
    WorkerPool* pool;
    bool background;
  } wake{this, background};
  while (true) {
    std::function<void()> task;
    int lane = -1;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Wake* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            // Stopping: a thread leaves once its own lanes are drained.
            return w->pool->NextLaneLocked(w->background) >= 0 ||
                   w->pool->stopping_;
          },
          &wake));
      lane = NextLaneLocked(background);
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
