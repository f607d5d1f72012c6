// Whole inputs a user names (an option's file, standard input), read into
// memory: bounded, and with every failure a status, never an exception
// (read() turns a stream buffer's read error into badbit, where a
// character-at-a-time read let it escape).
#ifndef TENSORMORPH_CORE_UTIL_READ_WHOLE_H_
#define TENSORMORPH_CORE_UTIL_READ_WHOLE_H_

#include <cstddef>
#include <istream>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensormorph {

// The whole of `in` (called `name` in messages, e.g. "--indices-file -
// (stdin)"), refused past `limit` bytes before it holds more; `size_hint`
// (its size where known, 0 if not) is reserved at once.
// Errors: INVALID_ARGUMENT naming `name`: over `limit` (naming the limit),
// or unreadable to its end.
absl::StatusOr<std::string> ReadWhole(std::istream& in, absl::string_view name,
                                      size_t limit, size_t size_hint = 0);

// The whole of the file at `path`, as ReadWhole, sized from its status.
// Errors: INVALID_ARGUMENT naming `name`: a directory (which opens, and
// fails only when read), missing or unreadable, over `limit`.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                          absl::string_view name, size_t limit);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_UTIL_READ_WHOLE_H_
