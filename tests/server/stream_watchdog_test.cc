// StreamWatchdog::RunAfter: work deferred onto the watchdog's thread runs
// once, not before its delay, and work still pending when the watchdog goes
// is dropped, never run on a half-destroyed owner. WaitIdle: what a drain
// waits on before gRPC's shutdown.
#include "server/stream_watchdog.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tensormorph {
namespace {

TEST(StreamWatchdogTest, RunAfterRunsOnceOnTheWatchdogsThreadAfterTheDelay) {
  StreamWatchdog watchdog(absl::Seconds(10), absl::Seconds(1));
  absl::Notification ran;
  std::atomic<int> runs{0};
  std::thread::id ran_on;
  const absl::Time asked = absl::Now();
  absl::Time at;
  watchdog.RunAfter(absl::Milliseconds(50), [&] {
    ran_on = std::this_thread::get_id();
    at = absl::Now();
    ++runs;
    ran.Notify();
  });
  ran.WaitForNotification();
  EXPECT_GE(at - asked, absl::Milliseconds(50));
  EXPECT_NE(ran_on, std::this_thread::get_id());
  // A second deferred task runs too, and the first never again.
  absl::Notification second;
  watchdog.RunAfter(absl::ZeroDuration(), [&] { second.Notify(); });
  second.WaitForNotification();
  EXPECT_EQ(runs.load(), 1);
}

TEST(StreamWatchdogTest, WorkPendingWhenTheWatchdogGoesIsDropped) {
  std::atomic<bool> ran{false};
  {
    StreamWatchdog watchdog(absl::Seconds(10), absl::Seconds(1));
    watchdog.RunAfter(absl::Hours(1), [&] { ran.store(true); });
  }
  EXPECT_FALSE(ran.load());
}

TEST(StreamWatchdogTest, WaitIdleReturnsWhenTheLastStreamIsRemoved) {
  StreamWatchdog watchdog(absl::Seconds(10), absl::Seconds(1));
  EXPECT_TRUE(watchdog.WaitIdle(absl::ZeroDuration()));
  auto none = [](const absl::Status&) {};
  StreamWatchdog::Watch* a = watchdog.Add(none, none);
  StreamWatchdog::Watch* b = watchdog.Add(none, none);
  EXPECT_FALSE(watchdog.WaitIdle(absl::Milliseconds(20)));
  watchdog.Remove(a);
  EXPECT_FALSE(watchdog.WaitIdle(absl::Milliseconds(20)));
  // A waiter is woken by the removal, not by its timeout.
  std::thread last([&] {
    absl::SleepFor(absl::Milliseconds(50));
    watchdog.Remove(b);
  });
  const absl::Time asked = absl::Now();
  EXPECT_TRUE(watchdog.WaitIdle(absl::Seconds(60)));
  EXPECT_LT(absl::Now() - asked, absl::Seconds(30));
  last.join();
}

}  // namespace
}  // namespace tensormorph
