#include "server/prometheus.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/call_stats.h"
#include "server/nonblocking_log.h"
#include "server/process_stats.h"
#include "server/refusals.h"

namespace tensormorph {
namespace {

constexpr char kVersion[] = TENSORMORPH_VERSION;

// The shortest text that reads back as `v`, in plain notation from 1e-4 to
// 1e21 ("0.0001", "0.00025", "60") as Prometheus's own clients write bucket
// bounds (le values are compared as text when series are joined), in
// exponent notation past them; and the format's spellings of the infinities
// and NaN.
std::string FormatDouble(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  const double magnitude = std::fabs(v);
  const std::chars_format format =
      v == 0 || (magnitude >= 1e-4 && magnitude < 1e21)
          ? std::chars_format::fixed
          : std::chars_format::scientific;
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, format);
  return std::string(buf, ec == std::errc() ? end : buf);
}

// HELP text escapes only backslash and line feed.
std::string EscapeHelp(absl::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

using Labels = std::vector<std::pair<absl::string_view, std::string>>;

// Writes families one after the other: each one's HELP and TYPE lines, then
// its samples (the format wants a family's lines together).
class Exposition {
 public:
  void Family(absl::string_view name, absl::string_view type,
              absl::string_view help) {
    absl::StrAppend(&out_, "# HELP ", name, " ", EscapeHelp(help), "\n",
                    "# TYPE ", name, " ", type, "\n");
  }
  void Sample(absl::string_view name, const Labels& labels,
              absl::string_view value) {
    absl::StrAppend(&out_, name);
    if (!labels.empty()) {
      out_ += '{';
      for (size_t i = 0; i < labels.size(); ++i) {
        absl::StrAppend(&out_, i == 0 ? "" : ",", labels[i].first, "=\"",
                        EscapeLabelValue(labels[i].second), "\"");
      }
      out_ += '}';
    }
    absl::StrAppend(&out_, " ", value, "\n");
  }
  void Sample(absl::string_view name, const Labels& labels, int64_t value) {
    Sample(name, labels, absl::StrCat(value));
  }
  void Sample(absl::string_view name, const Labels& labels, uint64_t value) {
    Sample(name, labels, absl::StrCat(value));
  }
  void Sample(absl::string_view name, const Labels& labels, double value) {
    Sample(name, labels, FormatDouble(value));
  }
  // A family of one unlabelled sample.
  template <typename T>
  void Single(absl::string_view name, absl::string_view type,
              absl::string_view help, T value) {
    Family(name, type, help);
    Sample(name, {}, value);
  }

  std::string Take() && { return std::move(out_); }

 private:
  std::string out_;
};

void WriteCalls(Exposition& e, const CallStats& stats) {
  const std::vector<CallStats::MethodSnapshot> methods = stats.Snapshot();
  e.Family("tensormorph_calls_total", "counter",
           "Calls ended, by method and the gRPC status code the client was "
           "told (refused and cancelled calls included).");
  for (const CallStats::MethodSnapshot& m : methods) {
    for (int code = 0; code < CallStats::kNumCodes; ++code) {
      if (m.calls[code] == 0) continue;
      e.Sample("tensormorph_calls_total",
               {{"method", m.method},
                {"code", std::string(CallStats::CodeName(code))}},
               m.calls[code]);
    }
  }
  e.Family("tensormorph_call_duration_seconds", "histogram",
           "Time from a call's arrival to its end, by method.");
  for (const CallStats::MethodSnapshot& m : methods) {
    const auto& buckets = m.cumulative_buckets;
    for (size_t b = 0; b < buckets.size(); ++b) {
      const std::string le = b < CallStats::kDurationBounds.size()
                                 ? FormatDouble(CallStats::kDurationBounds[b])
                                 : "+Inf";
      e.Sample("tensormorph_call_duration_seconds_bucket",
               {{"method", m.method}, {"le", le}}, buckets[b]);
    }
    e.Sample("tensormorph_call_duration_seconds_sum", {{"method", m.method}},
             m.sum_seconds);
    // The +Inf bucket is the count: the two always agree.
    e.Sample("tensormorph_call_duration_seconds_count", {{"method", m.method}},
             buckets.back());
  }
}

void WriteStreams(Exposition& e, const Metrics& m) {
  e.Single("tensormorph_stream_bytes_total", "counter",
           "Bytes of stream messages sent (ReadSlice, ListTensors, QuantDiff).",
           m.bytes_sent.load());
  e.Single("tensormorph_stream_chunks_total", "counter",
           "Stream messages sent.", m.chunks_sent.load());
  e.Single("tensormorph_streams_started_total", "counter", "Streams started.",
           m.streams_started.load());
  e.Single("tensormorph_streams_cancelled_total", "counter",
           "Streams that ended cancelled (by the client, a deadline or a "
           "limit).",
           m.streams_cancelled.load());
  e.Single("tensormorph_streams_active", "gauge", "Streams under way.",
           m.active_streams());
}

void WriteCheckpoints(Exposition& e, const CheckpointRegistry& registry) {
  e.Single("tensormorph_open_checkpoints", "gauge",
           "Checkpoints the registry keeps open.",
           static_cast<uint64_t>(registry.open_count()));
  e.Single("tensormorph_mapped_bytes", "gauge",
           "Bytes of the files of the checkpoints the registry keeps open "
           "(mapped, resident only as read).",
           registry.mapped_bytes());
  e.Single("tensormorph_checkpoint_opens_total", "counter",
           "Checkpoints opened (first use, a change on disk, or after being "
           "closed as least recently used).",
           registry.opens());
  e.Single("tensormorph_failed_opens_reused_total", "counter",
           "Calls answered from a remembered failed open of unchanged files "
           "instead of parsing them again.",
           registry.failed_opens_reused());
  e.Single("tensormorph_parked_calls_total", "counter",
           "Calls that waited for another call's open of their checkpoint "
           "without holding a worker.",
           registry.parked_calls());
}

// What the server keeps of results: error heatmaps' grids.
void WriteKept(Exposition& e, const ServiceState& state) {
  e.Single("tensormorph_error_grid_bytes", "gauge",
           "Bytes of the error grids kept for error heatmaps' zooms and "
           "pans (--error-grids-bytes).",
           state.error_grids.bytes());
  e.Single("tensormorph_error_grid_hits_total", "counter",
           "Error heatmaps reduced from a kept grid, with no decode.",
           state.error_grids.hits());
}

void WriteProcess(Exposition& e, const ProcessStats& p) {
  if (p.resident_bytes.has_value()) {
    e.Single("process_resident_memory_bytes", "gauge",
             "Resident memory size in bytes.", *p.resident_bytes);
  }
  if (p.virtual_bytes.has_value()) {
    e.Single("process_virtual_memory_bytes", "gauge",
             "Virtual memory size in bytes.", *p.virtual_bytes);
  }
  if (p.start_time_seconds.has_value()) {
    e.Single("process_start_time_seconds", "gauge",
             "Start time of the process since unix epoch in seconds.",
             *p.start_time_seconds);
  }
  if (p.cpu_seconds.has_value()) {
    e.Single("process_cpu_seconds_total", "counter",
             "Total user and system CPU time spent in seconds.",
             *p.cpu_seconds);
  }
  if (p.open_fds.has_value()) {
    e.Single("process_open_fds", "gauge", "Number of open file descriptors.",
             *p.open_fds);
  }
  if (p.max_fds.has_value()) {
    e.Single("process_max_fds", "gauge",
             "Maximum number of open file descriptors.", *p.max_fds);
  }
}

// The shares of issue 28: the worker pool's lanes (is interactive work
// waiting?) and what the per-peer ledgers hold and refused.
void WriteFairShares(Exposition& e, const ServiceState& state) {
  const auto lanes = state.pool.Snapshot();
  e.Family("tensormorph_worker_queue_depth", "gauge",
           "Tasks waiting for a worker, by lane (unary: interactive calls; "
           "stream: chunks and listings; background: diffs and checks).");
  for (const WorkerPool::LaneSnapshot& l : lanes) {
    e.Sample("tensormorph_worker_queue_depth",
             {{"lane", WorkerPool::LaneName(l.lane)}}, l.queued);
  }
  e.Family("tensormorph_worker_running", "gauge",
           "Tasks on a worker now, by lane (background at most workers - 1).");
  for (const WorkerPool::LaneSnapshot& l : lanes) {
    e.Sample("tensormorph_worker_running",
             {{"lane", WorkerPool::LaneName(l.lane)}}, l.running);
  }
  e.Family("tensormorph_worker_queue_wait_seconds", "histogram",
           "Time a task waited in its lane before a worker took it up.");
  for (const WorkerPool::LaneSnapshot& l : lanes) {
    const std::string lane = WorkerPool::LaneName(l.lane);
    for (size_t b = 0; b < l.wait_buckets.size(); ++b) {
      const std::string le = b < WorkerPool::kWaitBounds.size()
                                 ? FormatDouble(WorkerPool::kWaitBounds[b])
                                 : "+Inf";
      e.Sample("tensormorph_worker_queue_wait_seconds_bucket",
               {{"lane", lane}, {"le", le}}, l.wait_buckets[b]);
    }
    e.Sample("tensormorph_worker_queue_wait_seconds_sum", {{"lane", lane}},
             l.wait_seconds_sum);
    e.Sample("tensormorph_worker_queue_wait_seconds_count", {{"lane", lane}},
             l.wait_buckets.back());
  }
  e.Single("tensormorph_reply_bytes_in_flight", "gauge",
           "Bytes of replies built and not yet sent (unary replies, stream "
           "chunks), counted against --max-reply-bytes-in-flight.",
           state.reply_bytes.total());
  e.Single("tensormorph_reply_bytes_peers", "gauge",
           "Client addresses with replies not yet sent.",
           state.reply_bytes.peers());
  e.Single("tensormorph_stream_slots_held", "gauge",
           "Stream slots held, of --max-concurrent-streams.",
           state.stream_slots.total());
  e.Family("tensormorph_fair_share_refusals_total", "counter",
           "Calls refused RESOURCE_EXHAUSTED by a shared limit, by the "
           "limit named.");
  const std::pair<const char*, const std::atomic<int64_t>*> refusals[] = {
      {"max_concurrent_streams", &state.refused_streams_total},
      {"max_streams_per_peer", &state.refused_streams_per_peer},
      {"max_reply_bytes_in_flight", &state.refused_reply_bytes_total},
      {"max_reply_bytes_per_peer", &state.refused_reply_bytes_per_peer},
  };
  for (const auto& [limit, count] : refusals) {
    e.Sample("tensormorph_fair_share_refusals_total", {{"limit", limit}},
             count->load());
  }
}

}  // namespace

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string PrometheusText(const ServiceState& state) {
  Exposition e;
  WriteCalls(e, state.call_stats);
  WriteStreams(e, state.metrics);
  WriteCheckpoints(e, state.registry);
  WriteKept(e, state);
  WriteFairShares(e, state);
  WriteProcess(e, ReadProcessStats());
  e.Family("tensormorph_refused_calls_total", "counter",
           "Calls and HTTP requests refused, by reason (server/refusals.h): "
           "auth, forbidden, limit, bad_request, unimplemented, draining, "
           "host, framing.");
  for (const auto& [reason, n] : RefusalCounts()) {
    e.Sample("tensormorph_refused_calls_total", {{"reason", reason}}, n);
  }
  e.Single("tensormorph_log_lines_dropped_total", "counter",
           "Log lines dropped because the log's reader fell behind (the "
           "server never waits for it).",
           LogLinesDropped());
  e.Family("tensormorph_build_info", "gauge",
           "Always 1; the version of tensormorphd as a label.");
  e.Sample("tensormorph_build_info", {{"version", kVersion}}, int64_t{1});
  return std::move(e).Take();
}

}  // namespace tensormorph
