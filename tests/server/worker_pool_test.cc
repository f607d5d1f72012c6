// WorkerPool::ForkJoin runs both halves exactly once and never waits on a
// busy pool's queue: with every worker blocked, the caller runs both.
#include "server/worker_pool.h"

#include <atomic>
#include <thread>

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

}  // namespace
}  // namespace tensormorph
