#include "server/stream_watchdog.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/util/error_reason.h"

namespace tensormorph {
namespace {

// Checks often enough that a limit is kept to within a tenth of it (and
// 250 ms), and rarely enough that an idle server does not notice.
absl::Duration TickFor(absl::Duration max_call, absl::Duration idle) {
  absl::Duration shortest = max_call;
  if (idle > absl::ZeroDuration()) shortest = std::min(shortest, idle);
  return std::clamp(shortest / 10, absl::Milliseconds(5),
                    absl::Milliseconds(250));
}

}  // namespace

StreamWatchdog::StreamWatchdog(absl::Duration max_call,
                               absl::Duration max_idle_write)
    : max_call_(max_call),
      max_idle_write_(max_idle_write),
      tick_(TickFor(max_call, max_idle_write)),
      thread_([this] { Loop(); }) {}

StreamWatchdog::~StreamWatchdog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  thread_.join();
}

StreamWatchdog::Watch* StreamWatchdog::Add(Callback stop, Callback cancel) {
  Watch* w =
      new Watch(absl::Now() + max_call_, std::move(stop), std::move(cancel));
  absl::MutexLock lock(&mu_);
  w->it = watches_.insert(watches_.end(), w);
  return w;
}

void StreamWatchdog::WriteStarted(Watch* w) {
  w->write_since_ns.store(absl::GetCurrentTimeNanos(),
                          std::memory_order_relaxed);
}

void StreamWatchdog::WriteDone(Watch* w) {
  w->write_since_ns.store(0, std::memory_order_relaxed);
}

void StreamWatchdog::Remove(Watch* w) {
  {
    absl::MutexLock lock(&mu_);
    // A callback may end the call on the watchdog's own thread and so call
    // Remove from inside itself: only another thread waits for it.
    if (std::this_thread::get_id() != thread_.get_id()) {
      while (firing_ == w) cv_.Wait(&mu_);
    }
    watches_.erase(w->it);
  }
  delete w;
}

int StreamWatchdog::CancelAll(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (Watch* w : watches_) {
    if (w->cancelled || w->cancel_asked) continue;
    w->cancel_asked = why;
    ++n;
  }
  cv_.SignalAll();
  return n;
}

bool StreamWatchdog::WaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this] { return watches_.empty(); };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

absl::Status StreamWatchdog::CallLimitStatus() const {
  return LimitExceededError(
      absl::StrCat("the call ran past the limit max_call_seconds (",
                   absl::ToDoubleSeconds(max_call_), ")"),
      "max_call_seconds", absl::ToInt64Seconds(max_call_),
      absl::ToInt64Seconds(max_call_) + 1);
}

absl::Status StreamWatchdog::IdleLimitStatus() const {
  return LimitExceededError(
      absl::StrCat("the client took no data for ",
                   absl::ToDoubleSeconds(max_idle_write_),
                   " seconds, the limit max_idle_write_seconds"),
      "max_idle_write_seconds", absl::ToInt64Seconds(max_idle_write_),
      absl::ToInt64Seconds(max_idle_write_));
}

void StreamWatchdog::RunAfter(absl::Duration delay, std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  later_.emplace_back(absl::Now() + delay, std::move(fn));
}

void StreamWatchdog::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Time now = absl::Now();
    Watch* due = nullptr;
    bool cancel = false;
    absl::Status why;
    for (Watch* w : watches_) {
      if (w->cancelled) continue;
      const int64_t since = w->write_since_ns.load(std::memory_order_relaxed);
      if (w->cancel_asked) {
        cancel = true;
        why = *w->cancel_asked;
      } else if (max_idle_write_ > absl::ZeroDuration() && since != 0 &&
                 now - absl::FromUnixNanos(since) >= max_idle_write_) {
        cancel = true;
        why = IdleLimitStatus();
      } else if (!w->stopped && now >= w->deadline) {
        why = CallLimitStatus();
      } else if (w->stopped && now >= w->deadline + kCancelGrace) {
        cancel = true;
        why = CallLimitStatus();
      } else {
        continue;
      }
      due = w;
      break;
    }
    if (due == nullptr) {
      std::vector<std::function<void()>> ready;
      for (auto it = later_.begin(); it != later_.end();) {
        if (it->first > now) {
          ++it;
          continue;
        }
        ready.push_back(std::move(it->second));
        it = later_.erase(it);
      }
      if (!ready.empty()) {
        mu_.Unlock();
        for (std::function<void()>& fn : ready) fn();
        mu_.Lock();
        continue;
      }
      cv_.WaitWithTimeout(&mu_, tick_);
      continue;
    }
    (cancel ? due->cancelled : due->stopped) = true;
    // A copy: the callback may end the call, whose OnDone removes (frees)
    // the watch on this thread.
    Callback callback = cancel ? due->cancel : due->stop;
    firing_ = due;
    mu_.Unlock();
    callback(why);
    mu_.Lock();
    firing_ = nullptr;
    cv_.SignalAll();
  }
}

}  // namespace tensormorph
