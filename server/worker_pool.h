// A fixed set of threads that run the server's heavy work (opening files,
// decoding), so that gRPC's own threads never block on it. Three lanes,
// taken in this order:
//  - unary: a unary call's work, which a client waits on whole;
//  - stream: streams' chunks and listings, each brief;
//  - background: diffs and checks, whose tasks each read a whole tensor or
//    checkpoint (seconds). They run on threads of their own, size() - 1 of
//    them (1 on a pool of one), at a lower CPU priority (nice
//    kBackgroundNice), never on the size() general threads: an interactive
//    call (info, scalars, stats, heatmap, listing) never waits behind them,
//    for a worker or for a CPU. A diff still runs size() - 1 tensors at a
//    time.
#ifndef TENSORMORPH_SERVER_WORKER_POOL_H_
#define TENSORMORPH_SERVER_WORKER_POOL_H_

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tensormorph {

// Thread safety: every method may be called from any thread. The destructor
// runs the tasks already queued, then joins. A task that throws is logged
// and dropped (exception_fence.h); the worker lives on.
class WorkerPool {
 public:
  enum class Lane { kUnary = 0, kStream = 1, kBackground = 2 };
  static constexpr int kNumLanes = 3;
  static const char* LaneName(Lane lane);  // "unary", "stream", "background"

  // Upper bounds (seconds) of the queue-wait histogram's buckets; a last
  // bucket, +Inf, follows them.
  static constexpr std::array<double, 12> kWaitBounds = {
      0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30};

  // What one lane has done and holds now (for /metrics).
  struct LaneSnapshot {
    Lane lane;
    int64_t queued = 0;   // tasks waiting
    int64_t running = 0;  // tasks on a worker
    // Cumulative: buckets[i] counts tasks that waited <= kWaitBounds[i];
    // the last (+Inf) is every task started.
    std::array<int64_t, kWaitBounds.size() + 1> wait_buckets{};
    double wait_seconds_sum = 0;
  };

  explicit WorkerPool(int threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task` in the stream lane: streams' chunks and other brief bulk
  // work.
  void Submit(std::function<void()> task) {
    Submit(Lane::kStream, std::move(task));
  }
  // Queues `task` in the unary lane, ahead of every other lane's.
  void SubmitUnary(std::function<void()> task) {
    Submit(Lane::kUnary, std::move(task));
  }
  // Queues `task` in the background lane: long work (a diff's tensor, a
  // check), run on at most background_threads() workers at a time.
  void SubmitBackground(std::function<void()> task) {
    Submit(Lane::kBackground, std::move(task));
  }
  void Submit(Lane lane, std::function<void()> task);

  // Runs `first` on this thread and `second` on a worker, if one takes it up
  // before `first` is done; otherwise runs `second` here too. So a call on a
  // busy pool never waits in the queue: it only waits for a `second` that is
  // already running. An exception from either is rethrown here, after both
  // are done (`second` never outlives the call). `second` is queued as
  // unary work (SubmitUnary): a call waits on it.
  void ForkJoin(absl::FunctionRef<void()> first,
                absl::FunctionRef<void()> second);
  // The general threads (unary and stream lanes), as asked for.
  int size() const { return general_threads_; }
  // The background lane's threads: size() - 1, at least 1.
  int background_threads() const { return background_cap_; }
  // The nice value of the background threads (the general ones keep the
  // process's).
  static constexpr int kBackgroundNice = 10;

  std::array<LaneSnapshot, kNumLanes> Snapshot() const;

 private:
  struct Queued {
    std::function<void()> task;
    absl::Time queued_at;
  };
  struct LaneState {
    std::deque<Queued> queue;
    int64_t running = 0;
    std::array<int64_t, kWaitBounds.size() + 1> wait_counts{};  // per bucket
    double wait_seconds_sum = 0;
  };

  void Loop(bool background);
  // The lane whose front task a free thread of that kind (general or
  // background) takes next; -1 when none.
  int NextLaneLocked(bool background) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  int general_threads_ = 1;
  int background_cap_ = 1;
  mutable absl::Mutex mu_;
  std::array<LaneState, kNumLanes> lanes_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_WORKER_POOL_H_
