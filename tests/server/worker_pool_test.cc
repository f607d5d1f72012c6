// WorkerPool::ForkJoin runs both halves exactly once and never waits on a
// busy pool's queue: with every worker blocked, the caller runs both. Unary
// work is taken before bulk work queued earlier.
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

}  // namespace
}  // namespace tensormorph
