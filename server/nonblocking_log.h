// The server's log, written without blocking the calls that log: lines go
// through a bounded queue to one writer thread. A reader of the log that
// stalls (a full pipe nobody drains, a paused terminal, a slow journald)
// must not stop the server: with the log written on the calling thread,
// every call blocked in write() once the pipe held 64 KiB, and the server
// answered nothing more. When the queue is full, the oldest waiting line is
// dropped and counted (LogLinesDropped, exported in /metrics). The writer
// is woken once per burst and collects lines for 2 ms before it writes
// them, not once per line: a wakeup per line put the writer's run on the
// path of the next call (issue 20's one-scalar latency, tests/bench/NOTES.md).
#ifndef TENSORMORPH_SERVER_NONBLOCKING_LOG_H_
#define TENSORMORPH_SERVER_NONBLOCKING_LOG_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace tensormorph {

// Makes spdlog's default logger `name`, writing to stderr through a queue
// of `queue_lines` lines and one writer thread; a line is written about
// 2 ms after it is logged (at once after a flush), with the time it was
// logged at. Call once, before any
// thread logs; spdlog::set_level and set_pattern apply to it as to any.
void InstallNonBlockingLog(const std::string& name, size_t queue_lines = 8192);

// Lines dropped because the queue was full, since the install (0 without
// one).
int64_t LogLinesDropped();

// Waits until every line logged before the call has been written, at most
// `limit`. False when the limit passed first (the log's reader has
// stalled), or without an install. The process may then end without
// waiting for the writer thread (which joining would mean waiting on the
// reader).
bool DrainLog(absl::Duration limit);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_NONBLOCKING_LOG_H_
