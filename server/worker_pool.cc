#include "server/worker_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>

#include "absl/synchronization/notification.h"

namespace tensormorph {

WorkerPool::WorkerPool(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) {
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

void WorkerPool::Submit(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(task));
}

void WorkerPool::ForkJoin(absl::FunctionRef<void()> first,
                          absl::FunctionRef<void()> second) {
  // Whoever claims `second` runs it. The queued task may outlive this call
  // (when this thread claimed), so it holds the claim by shared_ptr and
  // touches `second` only after winning it, while this call waits.
  struct Claim {
    std::atomic<bool> taken{false};
    absl::Notification done;
  };
  auto claim = std::make_shared<Claim>();
  Submit([claim, &second] {
    if (!claim->taken.exchange(true)) {
      second();
      claim->done.Notify();
    }
  });
  first();
  if (!claim->taken.exchange(true)) {
    second();
  } else {
    claim->done.WaitForNotification();
  }
}

void WorkerPool::Loop() {
  while (true) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WorkerPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || !p->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace tensormorph
