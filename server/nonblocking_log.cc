#include "server/nonblocking_log.h"

#include <spdlog/details/log_msg_buffer.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace tensormorph {
namespace {

// How long the writer collects lines after the first one wakes it. Woken
// per line (spdlog's async queue notifies per message), the writer ran
// right after every logging call: on this 2-vCPU machine it then delayed
// the next call (a unary ping measured 4-6 us slower interleaved with
// scalar calls than with the log written behind) and, when the scheduler
// packed the threads on one vCPU, the reply itself (scalar p50 1.5-2x a
// ping in a fifth to a third of runs). Woken once per window, a busy server
// pays one wakeup per this many milliseconds, and a line appears this late.
constexpr auto kWriteBehind = std::chrono::milliseconds(2);

// The queue and its writer thread. Leaked on purpose (the sink only points
// at it): threads may log until the process ends, and a writer blocked on
// a stalled reader must never be joined.
class WriteBehindQueue {
 public:
  WriteBehindQueue(std::shared_ptr<spdlog::sinks::sink> out, size_t capacity)
      : out_(std::move(out)), capacity_(capacity > 0 ? capacity : 1) {
    std::thread([this] { Write(); }).detach();
  }

  void Push(const spdlog::details::log_msg& msg) {
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.size() >= capacity_) {
        queue_.pop_front();
        ++dropped_;
      }
      queue_.emplace_back(msg);
      ++pushed_;
      // Only an idle writer is woken, once; and a writer still in its
      // window once the queue is half full, so a burst is not dropped.
      wake = (idle_ && !woken_) || queue_.size() == capacity_ / 2 + 1;
      if (wake) woken_ = true;
    }
    if (wake) work_.notify_one();
  }

  // Asks the writer to write what is queued now, without its window.
  void RequestFlush() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      flush_ = true;
    }
    work_.notify_one();
  }

  // Waits until every line pushed before the call is written or dropped.
  bool Drain(absl::Duration limit) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t target = pushed_;
    flush_ = true;
    work_.notify_one();
    // A year stands for "no limit" (a chrono deadline cannot be infinite).
    const absl::Duration bounded = std::min(limit, absl::Hours(24 * 365));
    return written_.wait_for(lock, absl::ToChronoNanoseconds(bounded),
                             [&] { return done_ >= target; });
  }

  int64_t dropped() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(dropped_);
  }

  spdlog::sinks::sink& out() { return *out_; }

 private:
  void Write() {
    std::vector<spdlog::details::log_msg_buffer> batch;
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      idle_ = true;
      work_.wait(lock, [&] { return !queue_.empty() || flush_; });
      idle_ = false;
      // Collects what the next few milliseconds log, unless asked to
      // write now.
      work_.wait_for(lock, kWriteBehind,
                     [&] { return flush_ || queue_.size() > capacity_ / 2; });
      flush_ = false;
      woken_ = false;
      batch.assign(std::make_move_iterator(queue_.begin()),
                   std::make_move_iterator(queue_.end()));
      queue_.clear();
      // Everything pushed so far is now in `batch` or was dropped.
      const uint64_t through = pushed_;
      lock.unlock();
      // Nothing a sink throws may end the process from this thread: a
      // line that cannot be written is lost, as a dropped one is.
      for (const auto& msg : batch) {
        try {
          out_->log(msg);
        } catch (...) {
        }
      }
      try {
        out_->flush();
      } catch (...) {
      }
      batch.clear();
      lock.lock();
      done_ = through;
      written_.notify_all();
    }
  }

  const std::shared_ptr<spdlog::sinks::sink> out_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable work_, written_;
  std::deque<spdlog::details::log_msg_buffer> queue_;
  uint64_t pushed_ = 0, done_ = 0, dropped_ = 0;
  bool idle_ = false, woken_ = false, flush_ = false;
};

// The logger's sink: queues each line (with its time and thread, taken by
// the caller) for the writer, which formats and writes it through `out`.
class WriteBehindSink final : public spdlog::sinks::sink {
 public:
  explicit WriteBehindSink(WriteBehindQueue* queue) : queue_(queue) {}
  void log(const spdlog::details::log_msg& msg) override { queue_->Push(msg); }
  void flush() override { queue_->RequestFlush(); }
  void set_pattern(const std::string& pattern) override {
    queue_->out().set_pattern(pattern);
  }
  void set_formatter(std::unique_ptr<spdlog::formatter> f) override {
    queue_->out().set_formatter(std::move(f));
  }

 private:
  WriteBehindQueue* queue_;
};

// Set once by InstallNonBlockingLog.
std::atomic<WriteBehindQueue*> g_queue{nullptr};

}  // namespace

void InstallNonBlockingLog(const std::string& name, size_t queue_lines) {
  auto* queue = new WriteBehindQueue(
      std::make_shared<spdlog::sinks::stderr_color_sink_mt>(), queue_lines);
  g_queue.store(queue);
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      name, std::make_shared<WriteBehindSink>(queue)));
}

int64_t LogLinesDropped() {
  WriteBehindQueue* queue = g_queue.load();
  return queue == nullptr ? 0 : queue->dropped();
}

bool DrainLog(absl::Duration limit) {
  WriteBehindQueue* queue = g_queue.load();
  return queue != nullptr && queue->Drain(limit);
}

}  // namespace tensormorph
