// WorkerPool::ForkJoin runs both halves exactly once and never waits on a
// busy pool's queue: with every worker blocked, the caller runs both. Unary
// work is taken before bulk work queued earlier. Background work (diffs,
// checks) never takes the last worker: unary work finds it free.
#include "server/worker_pool.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace tensormorph {
namespace {

TEST(WorkerPoolTest, ForkJoinRunsBothHalvesOnce) {
  WorkerPool pool(2);
  for (int round = 0; round < 200; ++round) {
    std::atomic<int> first{0}, second{0};
    pool.ForkJoin([&] { ++first; }, [&] { ++second; });
    ASSERT_EQ(first.load(), 1);
    ASSERT_EQ(second.load(), 1);
  }
}

TEST(WorkerPoolTest, ForkJoinOnABusyPoolRunsTheSecondHalfHere) {
  WorkerPool pool(1);
  absl::Notification release, blocked;
  pool.Submit([&] {
    blocked.Notify();
    release.WaitForNotification();
  });
  blocked.WaitForNotification();
  std::thread::id ran_on;
  pool.ForkJoin([] {}, [&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  release.Notify();  // the queued half, already claimed, then does nothing
}

TEST(WorkerPoolTest, ForkJoinUsesAnIdleWorker) {
  WorkerPool pool(1);
  // The first half waits until the second has started: only a worker can
  // have started it.
  absl::Notification second_started;
  std::thread::id ran_on;
  pool.ForkJoin([&] { second_started.WaitForNotification(); },
                [&] {
                  ran_on = std::this_thread::get_id();
                  second_started.Notify();
                });
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(WorkerPoolTest, UnaryWorkRunsBeforeQueuedBulkWork) {
  WorkerPool pool(1);
  absl::Notification release, blocked;
  pool.Submit([&] {
    blocked.Notify();
    release.WaitForNotification();
  });
  blocked.WaitForNotification();
  // With the one worker held, two bulk tasks and then two unary ones queue;
  // the unary ones run first, each lane in its own order.
  absl::Mutex mu;
  std::vector<std::string> order;
  auto record = [&](std::string name) {
    return [&, name] {
      absl::MutexLock lock(&mu);
      order.push_back(name);
    };
  };
  pool.Submit(record("bulk 1"));
  pool.Submit(record("bulk 2"));
  pool.SubmitUnary(record("unary 1"));
  pool.SubmitUnary(record("unary 2"));
  release.Notify();
  absl::Notification drained;
  pool.Submit([&] { drained.Notify(); });
  drained.WaitForNotification();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(order, (std::vector<std::string>{"unary 1", "unary 2", "bulk 1",
                                             "bulk 2"}));
}

TEST(WorkerPoolTest, TheDestructorRunsBothLanesQueuedWork) {
  std::atomic<int> ran{0};
  {
    WorkerPool pool(1);
    for (int i = 0; i < 50; ++i) {
      pool.Submit([&] { ++ran; });
      pool.SubmitUnary([&] { ++ran; });
    }
  }
  EXPECT_EQ(ran.load(), 100);
}

TEST(WorkerPoolTest, BackgroundWorkLeavesOneWorkerForUnaryWork) {
  WorkerPool pool(3);
  ASSERT_EQ(pool.background_threads(), 2);
  // Four long background tasks (a diff's tensors): two run, two wait.
  absl::Notification release;
  absl::Mutex mu;
  int started = 0;
  for (int i = 0; i < 4; ++i) {
    pool.SubmitBackground([&] {
      {
        absl::MutexLock lock(&mu);
        ++started;
      }
      release.WaitForNotification();
    });
  }
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](int* n) { return *n == 2; }, &started));
  }
  // The unary task runs while every background task still holds on: only
  // the worker kept free can run it.
  absl::Notification unary_ran;
  pool.SubmitUnary([&] { unary_ran.Notify(); });
  unary_ran.WaitForNotification();
  // So does a stream's chunk.
  absl::Notification chunk_ran;
  pool.Submit([&] { chunk_ran.Notify(); });
  chunk_ran.WaitForNotification();
  {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(started, 2);
  }
  const auto lanes = pool.Snapshot();
  const auto& background =
      lanes[static_cast<int>(WorkerPool::Lane::kBackground)];
  EXPECT_EQ(background.running, 2);
  EXPECT_EQ(background.queued, 2);
  const auto& unary = lanes[static_cast<int>(WorkerPool::Lane::kUnary)];
  EXPECT_EQ(unary.wait_buckets.back(), 1);  // one unary task started
  release.Notify();
}

TEST(WorkerPoolTest, APoolOfOneStillRunsBackgroundWork) {
  WorkerPool pool(1);
  EXPECT_EQ(pool.background_threads(), 1);
  absl::Notification ran;
  pool.SubmitBackground([&] { ran.Notify(); });
  ran.WaitForNotification();
}

TEST(WorkerPoolTest, SnapshotCountsEachLanesWaits) {
  WorkerPool pool(2);
  absl::Notification a, b, c;
  pool.SubmitUnary([&] { a.Notify(); });
  pool.Submit([&] { b.Notify(); });
  pool.SubmitBackground([&] { c.Notify(); });
  a.WaitForNotification();
  b.WaitForNotification();
  c.WaitForNotification();
  for (const WorkerPool::LaneSnapshot& l : pool.Snapshot()) {
    EXPECT_EQ(l.wait_buckets.back(), 1) << WorkerPool::LaneName(l.lane);
    EXPECT_EQ(l.queued, 0) << WorkerPool::LaneName(l.lane);
    EXPECT_GE(l.wait_seconds_sum, 0) << WorkerPool::LaneName(l.lane);
    for (size_t i = 1; i < l.wait_buckets.size(); ++i) {
      EXPECT_LE(l.wait_buckets[i - 1], l.wait_buckets[i]);  // cumulative
    }
  }
}

TEST(WorkerPoolTest, TheDestructorRunsBackgroundWorkPastTheCap) {
  std::atomic<int> ran{0};
  {
    WorkerPool pool(2);  // one background task at a time
    for (int i = 0; i < 20; ++i) pool.SubmitBackground([&] { ++ran; });
  }
  EXPECT_EQ(ran.load(), 20);
}

}  // namespace
}  // namespace tensormorph
