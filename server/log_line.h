// The server's log lines, in one of two formats (tensormorphd --log-format):
//  - text: `2026-12-02T05:15:43.123Z info GetTensor peer=ipv4:... k="v" ...`
//  - json: one object per line, `{"time":"2026-12-02T05:15:43.123Z",
//    "level":"info","method":"GetTensor","peer":...}`; a line not written
//    with LogFields has its text as "msg".
// Times are UTC with their zone in both, so lines from hosts in different
// zones sort and compare as written.
//
// Every string a client or a file supplied (a tensor name, a checkpoint
// path, an error message that quotes one, a forwarded address) goes through
// EscapeLogValue: a line is then one line, and what an operator reads is what
// the server did. Before this, a tensor name holding a newline wrote a whole
// forged call line of its own (with status=OK), and ESC sequences in a name
// re-coloured or cleared the operator's terminal.
#ifndef TENSORMORPH_SERVER_LOG_LINE_H_
#define TENSORMORPH_SERVER_LOG_LINE_H_

#include <spdlog/common.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tensormorph {

// `value` as printable text that reads back unambiguously: backslash and
// double quote as \\ and \"; line feed, carriage return and tab as \n, \r,
// \t; every other control character (C0, DEL, and C1 U+0080..U+009F, which
// some terminals obey as ESC sequences) and every byte that is not part of
// valid UTF-8 as \xNN (the bytes). Valid UTF-8 otherwise passes unchanged.
std::string EscapeLogValue(absl::string_view value);

enum class LogFormat { kText, kJson };

// "text" or "json". Errors: INVALID_ARGUMENT naming the value.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name);

// Makes the default spdlog logger write `format` and LogFields build lines
// for it; in either format a line not built by LogFields is escaped whole
// (EscapeLogValue), so no line of the log can hold a raw control byte.
// Call once at start, before calls are served; until then LogFields builds
// text lines and the logger keeps its own pattern.
void UseLogFormat(LogFormat format);
LogFormat CurrentLogFormat();

// The most bytes of one supplied string (LogField::kString) a line holds:
// past it the value is cut, and the line says how many bytes more it had. A
// client may send a 4 MiB tensor name, and every call would log it whole:
// behind a stalled log reader, the queue of lines grew to gigabytes.
inline constexpr size_t kMaxLoggedValueBytes = 1024;

// One field of a structured line.
struct LogField {
  enum Kind {
    kToken,   // our own word or number (a status code, a byte count): as is
    kString,  // supplied by a client or a file: escaped, quoted in text
  };
  absl::string_view key;
  absl::string_view value;  // valid for the LogFields call
  Kind kind = kString;
};

// Logs one line at `level`: the event's name, then `fields`. Text:
// `event key=value key="escaped" ...`; json: {"method": event, key: value,
// ...} (kToken values that are numbers as JSON numbers). Thread-safe.
void LogFields(spdlog::level::level_enum level, absl::string_view event,
               absl::Span<const LogField> fields);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_LOG_LINE_H_
