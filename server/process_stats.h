// What the kernel says about this process, for the standard Prometheus
// process metrics (process_resident_memory_bytes and the rest).
#ifndef TENSORMORPH_SERVER_PROCESS_STATS_H_
#define TENSORMORPH_SERVER_PROCESS_STATS_H_

#include <cstdint>
#include <optional>

namespace tensormorph {

// Each field is unset when its source could not be read (no /proc: not
// Linux, or a sandbox without it): a scrape reports what it can.
struct ProcessStats {
  std::optional<uint64_t> resident_bytes;  // /proc/self/statm × page size
  std::optional<uint64_t> virtual_bytes;   // /proc/self/statm × page size
  // Since the Unix epoch: /proc/stat's boot time plus the process's start
  // in /proc/self/stat (clock ticks after boot).
  std::optional<double> start_time_seconds;
  std::optional<double> cpu_seconds;  // user + system, getrusage
  std::optional<int64_t> open_fds;    // entries of /proc/self/fd
  std::optional<int64_t> max_fds;     // RLIMIT_NOFILE's soft limit
};

// Reads them now. Cost: a few small /proc reads and one directory listing
// (of this process's descriptors); no allocation that grows with the
// process. Thread-safe.
ProcessStats ReadProcessStats();

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_PROCESS_STATS_H_
