// The INI dialect of the AWS shared files (~/.aws/credentials,
// ~/.aws/config): a parser of untrusted text, since anyone who can write a
// user's home can write these.
#ifndef TENSORMORPH_CORE_IO_INI_FILE_H_
#define TENSORMORPH_CORE_IO_INI_FILE_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensormorph {

// section -> key -> value.
using IniSections = std::map<std::string, std::map<std::string, std::string>>;

inline constexpr uint64_t kMaxIniBytes = uint64_t{1} << 20;
inline constexpr size_t kMaxIniSections = 10000;

// Rules: lines end at '\n' ('\r' before it is dropped); blank lines and
// lines whose first non-blank character is '#' or ';' are comments;
// "[name]" opens a section (name trimmed, non-empty); "key = value" (or
// "key: value") sets a key of the open section, both trimmed, the key
// lower-cased; an indented line after a key with an empty value belongs to
// that key's nested block (as "s3 =" in config) and is skipped. A key
// repeated in a section, or a section repeated, takes the last value.
// Errors: INVALID_ARGUMENT naming `name` and the line number, never the
// line (it may hold a secret): more than kMaxIniBytes or kMaxIniSections;
// a NUL byte; a section header without ']' or with text after it, or
// empty; a key outside any section; a line that is none of these; an empty
// key.
absl::StatusOr<IniSections> ParseIni(absl::string_view name,
                                     absl::string_view text);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_INI_FILE_H_
