#include "server/log_line.h"

#include <spdlog/details/log_msg.h>
#include <spdlog/formatter.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tensormorph {
namespace {

// Marks a message LogFields built (its source file, never printed): the
// json formatter takes such a message as fields, any other as text.
constexpr char kFieldsTag[] = "tensormorph-log-fields";

std::atomic<LogFormat> g_format{LogFormat::kText};

void AppendHex(std::string* out, unsigned char byte) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->append("\\x");
  out->push_back(kHex[byte >> 4]);
  out->push_back(kHex[byte & 0xf]);
}

// The length of the valid UTF-8 sequence at the start of `s` (RFC 3629: no
// overlong forms, no surrogates, nothing past U+10FFFF), or 0.
size_t Utf8SequenceLength(absl::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto cont = [&](size_t i, unsigned char lo = 0x80,
                        unsigned char hi = 0xbf) {
    return i < s.size() && byte(i) >= lo && byte(i) <= hi;
  };
  const unsigned char b0 = byte(0);
  if (b0 < 0x80) return 1;
  if (b0 >= 0xc2 && b0 <= 0xdf) return cont(1) ? 2 : 0;
  if (b0 >= 0xe0 && b0 <= 0xef) {
    const unsigned char lo = b0 == 0xe0 ? 0xa0 : 0x80;
    const unsigned char hi = b0 == 0xed ? 0x9f : 0xbf;
    return cont(1, lo, hi) && cont(2) ? 3 : 0;
  }
  if (b0 >= 0xf0 && b0 <= 0xf4) {
    const unsigned char lo = b0 == 0xf0 ? 0x90 : 0x80;
    const unsigned char hi = b0 == 0xf4 ? 0x8f : 0xbf;
    return cont(1, lo, hi) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

// `text` (escaped already: printable, no control characters) as a JSON
// string's content: only the quote and the backslash need escaping.
void AppendJsonString(std::string* out, absl::string_view text) {
  out->push_back('"');
  for (const char c : text) {
    if (c == '"' || c == '\\') out->push_back('\\');
    out->push_back(c);
  }
  out->push_back('"');
}

bool IsJsonNumber(absl::string_view v) {
  if (v.empty()) return false;
  size_t i = v[0] == '-' ? 1 : 0;
  if (i == v.size() || !absl::ascii_isdigit(static_cast<unsigned char>(v[i])))
    return false;
  bool dot = false;
  for (; i < v.size(); ++i) {
    if (v[i] == '.' && !dot && i + 1 < v.size()) {
      dot = true;
    } else if (!absl::ascii_isdigit(static_cast<unsigned char>(v[i]))) {
      return false;
    }
  }
  return true;
}

// {"time":...,"level":...,<fields>} for LogFields's messages, and
// {"time":...,"level":...,"msg":<escaped text>} for any other.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg,
              spdlog::memory_buf_t& dest) override {
    std::string line = "{\"time\":\"";
    // Milliseconds and a zone, as an operator's tools (jq, Loki, Elastic)
    // parse RFC 3339.
    absl::StrAppend(
        &line,
        absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromChrono(msg.time),
                         absl::UTCTimeZone()),
        "\",\"level\":\"");
    const spdlog::string_view_t level =
        spdlog::level::to_string_view(msg.level);
    line.append(level.data(), level.size());
    line.append("\",");
    const absl::string_view payload(msg.payload.data(), msg.payload.size());
    if (msg.source.filename == kFieldsTag) {
      line.append(payload.data(), payload.size());
    } else {
      line.append("\"msg\":");
      AppendJsonString(&line, EscapeLogValue(payload));
    }
    line.append("}\n");
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

// %* in the text pattern: the message, escaped unless LogFields built it
// (its fields are escaped already). Any other line may quote a client's
// bytes too (a URL path, a status message naming a tensor).
class EscapedMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const absl::string_view payload(msg.payload.data(), msg.payload.size());
    if (msg.source.filename == kFieldsTag) {
      dest.append(payload.data(), payload.data() + payload.size());
    } else {
      const std::string escaped = EscapeLogValue(payload);
      dest.append(escaped.data(), escaped.data() + escaped.size());
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<EscapedMessageFlag>();
  }
};

}  // namespace

std::string EscapeLogValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size();) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    const size_t n = Utf8SequenceLength(value.substr(i));
    if (n == 0) {  // not UTF-8: the byte itself
      AppendHex(&out, c);
      ++i;
      continue;
    }
    if (n == 1) {
      switch (c) {
        case '\\':
          out += "\\\\";
          break;
        case '"':
          out += "\\\"";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          if (c < 0x20 || c == 0x7f) {
            AppendHex(&out, c);
          } else {
            out.push_back(static_cast<char>(c));
          }
      }
    } else if (n == 2 && c == 0xc2 &&
               static_cast<unsigned char>(value[i + 1]) < 0xa0) {
      // U+0080..U+009F: C1 controls (U+009B is a one-byte CSI).
      AppendHex(&out, c);
      AppendHex(&out, static_cast<unsigned char>(value[i + 1]));
    } else {
      absl::StrAppend(&out, value.substr(i, n));
    }
    i += n;
  }
  return out;
}

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(absl::StrCat(
      "log format '", EscapeLogValue(name), "': expected text or json"));
}

void UseLogFormat(LogFormat format) {
  g_format.store(format);
  if (format == LogFormat::kJson) {
    spdlog::set_formatter(std::make_unique<JsonFormatter>());
  } else {
    auto formatter = std::make_unique<spdlog::pattern_formatter>(
        spdlog::pattern_time_type::utc);
    formatter->add_flag<EscapedMessageFlag>('*').set_pattern(
        "%Y-%m-%dT%H:%M:%S.%eZ %^%l%$ %*");
    spdlog::set_formatter(std::move(formatter));
  }
}

LogFormat CurrentLogFormat() { return g_format.load(); }

namespace {

// A supplied string as logged: whole up to kMaxLoggedValueBytes, else its
// first bytes to there (cut before a UTF-8 continuation byte, so no
// character is split into escapes) and how many more there were.
std::string LoggedValue(absl::string_view value) {
  if (value.size() <= kMaxLoggedValueBytes) return EscapeLogValue(value);
  size_t cut = kMaxLoggedValueBytes;
  while (cut > 0 && (static_cast<uint8_t>(value[cut]) & 0xc0) == 0x80) --cut;
  return absl::StrCat(EscapeLogValue(value.substr(0, cut)), "...(",
                      value.size() - cut, " more bytes)");
}

}  // namespace

void LogFields(spdlog::level::level_enum level, absl::string_view event,
               absl::Span<const LogField> fields) {
  spdlog::logger* logger = spdlog::default_logger_raw();
  if (!logger->should_log(level)) return;
  std::string line;
  if (CurrentLogFormat() == LogFormat::kJson) {
    line = "\"method\":";
    AppendJsonString(&line, EscapeLogValue(event));
    for (const LogField& f : fields) {
      line.push_back(',');
      AppendJsonString(&line, f.key);
      line.push_back(':');
      if (f.kind == LogField::kToken && IsJsonNumber(f.value)) {
        absl::StrAppend(&line, f.value);
      } else if (f.kind == LogField::kToken) {
        AppendJsonString(&line, EscapeLogValue(f.value));
      } else {
        AppendJsonString(&line, LoggedValue(f.value));
      }
    }
  } else {
    line = EscapeLogValue(event);
    for (const LogField& f : fields) {
      absl::StrAppend(&line, " ", f.key, "=");
      if (f.kind == LogField::kToken) {
        line.append(EscapeLogValue(f.value));
      } else {
        absl::StrAppend(&line, "\"", LoggedValue(f.value), "\"");
      }
    }
  }
  // Line 0: a source spdlog's patterns take for none and never print.
  logger->log(spdlog::source_loc{kFieldsTag, 0, ""}, level,
              spdlog::string_view_t(line.data(), line.size()));
}

}  // namespace tensormorph
