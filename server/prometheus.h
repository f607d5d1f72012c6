// The server's metrics in the Prometheus text exposition format 0.0.4: what
// tensormorphd's GET /metrics serves (Content-Type:
// text/plain; version=0.0.4; charset=utf-8).
#ifndef TENSORMORPH_SERVER_PROMETHEUS_H_
#define TENSORMORPH_SERVER_PROMETHEUS_H_

#include <string>

#include "absl/strings/string_view.h"
#include "server/service.h"

namespace tensormorph {

// Every family with its HELP and TYPE lines, read from `state` now:
//  - tensormorph_calls_total{method,code} (counter): calls ended, by short
//    method name and the gRPC status code the client was told
//    (call_metrics_interceptor.h), refused and cancelled calls included;
//  - tensormorph_call_duration_seconds{method} (histogram, 100 us to 60 s);
//  - tensormorph_refused_calls_total{reason} (counter): gRPC calls and HTTP
//    requests refused, by refusals.h's reason (process-wide);
//  - tensormorph_stream_bytes_total, tensormorph_stream_chunks_total,
//    tensormorph_streams_started_total, tensormorph_streams_cancelled_total
//    (counters), tensormorph_streams_active (gauge);
//  - tensormorph_open_checkpoints, tensormorph_mapped_bytes (gauges),
//    tensormorph_checkpoint_opens_total (counter);
//  - process_resident_memory_bytes, process_virtual_memory_bytes,
//    process_start_time_seconds, process_open_fds, process_max_fds (gauges),
//    process_cpu_seconds_total (counter): each left out when the system
//    cannot tell it (process_stats.h);
//  - tensormorph_build_info{version} 1 (gauge).
// A series appears once it is non-zero for labelled families (a method with
// no call has no histogram); unlabelled ones always.
// Cost: a pass over the methods called and the cached checkpoints' files,
// and a few /proc reads. Thread-safe.
std::string PrometheusText(const ServiceState& state);

// A label value as the text format writes it between quotes: backslash,
// double quote and line feed escaped (\\, \", \n); everything else as is.
std::string EscapeLabelValue(absl::string_view value);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_PROMETHEUS_H_
