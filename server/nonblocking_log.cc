#include "server/nonblocking_log.h"

#include <spdlog/async.h>
#include <spdlog/async_logger.h>
#include <spdlog/sinks/sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <memory>
#include <thread>
#include <utility>

#include "absl/time/clock.h"

namespace tensormorph {
namespace {

// A sink that counts the flushes it has done. The writer thread takes the
// queue in order, so once a flush posted after some lines is counted, those
// lines are written.
class FlushCountingSink final : public spdlog::sinks::sink {
 public:
  explicit FlushCountingSink(std::shared_ptr<spdlog::sinks::sink> inner)
      : inner_(std::move(inner)) {}

  void log(const spdlog::details::log_msg& msg) override { inner_->log(msg); }
  void flush() override {
    inner_->flush();
    flushes_.fetch_add(1, std::memory_order_release);
  }
  void set_pattern(const std::string& pattern) override {
    inner_->set_pattern(pattern);
  }
  void set_formatter(std::unique_ptr<spdlog::formatter> f) override {
    inner_->set_formatter(std::move(f));
  }

  int64_t flushes() const { return flushes_.load(std::memory_order_acquire); }

 private:
  std::shared_ptr<spdlog::sinks::sink> inner_;
  std::atomic<int64_t> flushes_{0};
};

// Set once by InstallNonBlockingLog; the logger keeps both alive.
std::atomic<FlushCountingSink*> g_sink{nullptr};
std::shared_ptr<spdlog::details::thread_pool>* g_pool = nullptr;

}  // namespace

void InstallNonBlockingLog(const std::string& name, size_t queue_lines) {
  // Leaked on purpose: threads may log until the process ends, and the
  // pool's destructor would wait on a stalled reader.
  g_pool = new std::shared_ptr<spdlog::details::thread_pool>(
      std::make_shared<spdlog::details::thread_pool>(queue_lines, 1));
  auto sink = std::make_shared<FlushCountingSink>(
      std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  g_sink.store(sink.get());
  auto logger = std::make_shared<spdlog::async_logger>(
      name, std::move(sink), *g_pool,
      spdlog::async_overflow_policy::overrun_oldest);
  spdlog::set_default_logger(std::move(logger));
}

int64_t LogLinesDropped() {
  if (g_pool == nullptr) return 0;
  return static_cast<int64_t>((*g_pool)->overrun_counter());
}

bool DrainLog(absl::Duration limit) {
  FlushCountingSink* sink = g_sink.load();
  if (sink == nullptr) return false;
  const int64_t before = sink->flushes();
  const absl::Time end = absl::Now() + limit;
  // A flush marker may itself be dropped by a full queue: post again while
  // waiting.
  while (absl::Now() < end) {
    spdlog::default_logger()->flush();
    for (int i = 0; i < 20; ++i) {
      if (sink->flushes() > before) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return sink->flushes() > before;
}

}  // namespace tensormorph
