#include "server/worker_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>

#include "absl/synchronization/notification.h"
#include "server/exception_fence.h"

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
  bulk_.push_back(std::move(task));
}

void WorkerPool::SubmitUnary(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  unary_.push_back(std::move(task));
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
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WorkerPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || !p->unary_.empty() || !p->bulk_.empty();
          },
          this));
      std::deque<std::function<void()>>& queue =
          !unary_.empty() ? unary_ : bulk_;
      if (queue.empty()) return;  // stopping and drained
      task = std::move(queue.front());
      queue.pop_front();
    }
    // The last line of the exception fence: tasks fence their own work and
    // end their calls; one that still throws is logged, and the worker
    // lives on.
    Fenced({"worker task"}, task).IgnoreError();
  }
}

}  // namespace tensormorph
