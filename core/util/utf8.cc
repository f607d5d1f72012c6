#include "core/util/utf8.h"

#include <cstdint>

namespace tensormorph {
namespace {

bool InRange(uint8_t b, uint8_t lo, uint8_t hi) { return b >= lo && b <= hi; }

// Length of the well-formed sequence starting at s[i], or 0 when the byte
// there does not start one (Unicode Table 3-7, row by row).
size_t WellFormedLength(absl::string_view s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<uint8_t>(s[i + k]); };
  const size_t left = s.size() - i;
  const uint8_t b0 = at(0);
  if (b0 <= 0x7F) return 1;
  uint8_t lo = 0x80, hi = 0xBF;  // the second byte's range
  size_t len;
  if (InRange(b0, 0xC2, 0xDF)) {
    len = 2;
  } else if (b0 == 0xE0) {
    len = 3, lo = 0xA0;  // shorter forms are overlong
  } else if (b0 == 0xED) {
    len = 3, hi = 0x9F;  // ED A0..BF are surrogates
  } else if (InRange(b0, 0xE1, 0xEF)) {
    len = 3;
  } else if (b0 == 0xF0) {
    len = 4, lo = 0x90;  // overlong below
  } else if (b0 == 0xF4) {
    len = 4, hi = 0x8F;  // above U+10FFFF beyond
  } else if (InRange(b0, 0xF1, 0xF3)) {
    len = 4;
  } else {
    return 0;  // 80..C1 (continuations, overlong leads), F5..FF
  }
  if (left < len || !InRange(at(1), lo, hi)) return 0;
  for (size_t k = 2; k < len; ++k) {
    if (!InRange(at(k), 0x80, 0xBF)) return 0;
  }
  return len;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool IsValidUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = WellFormedLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string EscapeUtf8(absl::string_view raw) {
  if (IsValidUtf8(raw) && raw.find('\\') == absl::string_view::npos) {
    return std::string(raw);
  }
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(raw.size() + 8);
  // Whether the character written next (at i) begins with `x` or `\`.
  const auto next_reads_as_escape = [&](size_t i) {
    return i < raw.size() &&
           (raw[i] == 'x' || raw[i] == '\\' || WellFormedLength(raw, i) == 0);
  };
  for (size_t i = 0; i < raw.size();) {
    const size_t n = WellFormedLength(raw, i);
    if (n == 0) {
      const auto b = static_cast<uint8_t>(raw[i]);
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 15];
      i += 1;
      continue;
    }
    if (raw[i] == '\\') {
      out += next_reads_as_escape(i + 1) ? "\\\\" : "\\";
    } else {
      out.append(raw.data() + i, n);
    }
    i += n;
  }
  return out;
}

std::string UnescapeUtf8(absl::string_view escaped) {
  std::string out;
  out.reserve(escaped.size());
  for (size_t i = 0; i < escaped.size(); ++i) {
    const char c = escaped[i];
    if (c == '\\' && i + 1 < escaped.size()) {
      if (escaped[i + 1] == '\\') {
        out += '\\';
        ++i;
        continue;
      }
      if (escaped[i + 1] == 'x' && i + 3 < escaped.size() &&
          HexValue(escaped[i + 2]) >= 0 && HexValue(escaped[i + 3]) >= 0) {
        out += static_cast<char>(HexValue(escaped[i + 2]) * 16 +
                                 HexValue(escaped[i + 3]));
        i += 3;
        continue;
      }
    }
    out += c;
  }
  return out;
}

}  // namespace tensormorph
