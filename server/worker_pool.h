// A fixed set of threads that run the server's heavy work (opening files,
// decoding), so that gRPC's own threads never block on it. Two queues: unary
// calls' work is taken before streams' chunks, so that a small call waits at
// most for the chunks already being produced, never for those queued.
#ifndef TENSORMORPH_SERVER_WORKER_POOL_H_
#define TENSORMORPH_SERVER_WORKER_POOL_H_

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace tensormorph {

// Thread safety: Submit may be called from any thread. The destructor runs
// the tasks already queued, then joins. A task that throws is logged and
// dropped (exception_fence.h); the worker lives on.
class WorkerPool {
 public:
  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task` behind every task queued before it: streams' chunks and
  // other bulk work.
  void Submit(std::function<void()> task);
  // Queues `task` ahead of every task queued with Submit (behind those queued
  // with SubmitUnary): a unary call's work, which a client waits on whole.
  void SubmitUnary(std::function<void()> task);

  // Runs `first` on this thread and `second` on a worker, if one takes it up
  // before `first` is done; otherwise runs `second` here too. So a call on a
  // busy pool never waits in the queue: it only waits for a `second` that is
  // already running. An exception from either is rethrown here, after both
  // are done (`second` never outlives the call). `second` is queued as
  // unary work (SubmitUnary): a call waits on it.
  void ForkJoin(absl::FunctionRef<void()> first,
                absl::FunctionRef<void()> second);
  int size() const { return static_cast<int>(threads_.size()); }

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> unary_ ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void()>> bulk_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_WORKER_POOL_H_
