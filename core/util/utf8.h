// UTF-8 validation, and the one escaping that turns any bytes into valid
// UTF-8 without losing them. Every string read from a file that may reach a
// protobuf `string` field (which must be valid UTF-8) goes through
// EscapeUtf8 first.
//
// The escaping, precisely:
//  - A well-formed UTF-8 sequence (RFC 3629 / Unicode Table 3-7: no overlong
//    forms, no surrogates U+D800..U+DFFF, nothing above U+10FFFF) is copied.
//  - Every other byte is written as `\xHH`, two upper-case hex digits, one
//    escape per byte: a truncated sequence `E3 81` then 'A' is `\xE3\x81A`.
//  - A backslash is written `\\` when the character written after it is
//    `x` or `\` (so it cannot read as the start of an escape); any other
//    backslash is copied as is.
// So valid UTF-8 without `\x` or `\\` in it is unchanged ("blk.0.weight",
// a chat template's `'\n'`), the result is always valid UTF-8, and
// UnescapeUtf8 recovers the input exactly: two different inputs never
// escape to the same string.
#ifndef TENSORMORPH_CORE_UTIL_UTF8_H_
#define TENSORMORPH_CORE_UTIL_UTF8_H_

#include <string>

#include "absl/strings/string_view.h"

namespace tensormorph {

// True when `s` is entirely well-formed UTF-8 (as above; NUL is valid).
bool IsValidUtf8(absl::string_view s);

// `raw` escaped as described above.
std::string EscapeUtf8(absl::string_view raw);

// The inverse of EscapeUtf8: `\\` is a backslash, `\x` and two upper-case
// hex digits a byte, and any other backslash itself. For every s,
// UnescapeUtf8(EscapeUtf8(s)) == s.
std::string UnescapeUtf8(absl::string_view escaped);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_UTIL_UTF8_H_
