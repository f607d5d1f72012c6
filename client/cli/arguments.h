// Command-line arguments checked before any call: indices, slices and sizes
// (output paths: output_file.h). A malformed argument is a usage error (exit
// 1) whatever the command, found here rather than by the server, so that
// every command reports it the same way; what needs the data (an index past
// the end) is still the server's to report.
#ifndef TENSORMORPH_CLIENT_CLI_ARGUMENTS_H_
#define TENSORMORPH_CLIENT_CLI_ARGUMENTS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tensormorph {

// One index argument: comma-separated integer coordinates, negative ones
// counting from the end ("3,17", "-1,0"). "()" is the index of a rank-0
// tensor's one element (numpy's empty tuple).
// Errors: INVALID_ARGUMENT naming the argument: empty, an empty coordinate
// ("3,,17"), or a coordinate that is not a 64-bit integer.
absl::StatusOr<std::vector<int64_t>> ParseIndex(absl::string_view text);
// As ParseIndex, into `index` (cleared first), whose memory is reused.
absl::Status ParseIndexInto(absl::string_view text,
                            std::vector<int64_t>* index);

// Receives each index of an --indices-file in order: its 1-based line, its
// text as written (comment and spaces stripped) and its coordinates, valid
// during the call. An error stops the reading and is returned as is.
using IndexLineVisitor = absl::FunctionRef<absl::Status(
    int line, absl::string_view text, absl::Span<const int64_t> index)>;

// The most a file named by an option may hold (a token, a certificate, a
// manifest of --verify): past it an error, not memory exhausted.
inline constexpr size_t kMaxOptionFileBytes = size_t{64} << 20;

// The whole of a file an option names (`option`: how messages call it,
// e.g. "--token-file"), as bytes (core/util/read_whole.h).
// Errors: INVALID_ARGUMENT naming the option and the path: missing,
// unreadable, a directory, or over kMaxOptionFileBytes.
absl::StatusOr<std::string> ReadOptionFile(absl::string_view option,
                                           const std::string& path);

// The most an --indices-file may hold: about 25 million indices, 2,500
// calls' worth; past it an error rather than memory exhausted.
inline constexpr size_t kMaxIndexFileBytes = size_t{256} << 20;

// The indices in `text`, an --indices-file's (`name` is how messages call
// it): one per line, written as ParseIndex takes them; blank lines and
// everything from a '#' on are skipped. Nothing is allocated per line.
// Errors: INVALID_ARGUMENT naming the file, the line number and the fault
// of a line; `visit`'s.
absl::Status ReadIndexLines(absl::string_view name, absl::string_view text,
                            IndexLineVisitor visit);

// Checks that `index` (as typed: `text`) has exactly the rank of `tensor`.
// Errors: INVALID_ARGUMENT naming the tensor's rank and shape and what was
// given, with a hint when separate arguments look like one index's
// coordinates ("0 1" instead of "0,1").
absl::Status CheckIndexRank(absl::string_view text,
                            absl::Span<const int64_t> index,
                            absl::string_view tensor,
                            absl::Span<const int64_t> shape, size_t arguments);

// Checks that each coordinate of `index` (of the tensor's rank) lies in
// -size..size-1 of its dimension, as InspectScalars takes them (negative
// ones count from the end), so that a bad index anywhere in a long list is
// found before any scalar is printed, and named where the user wrote it:
// `where` ("--indices-file 'f' line 20001", "argument 3").
// A tensor with a zero dimension passes: it has no index, and the server's
// refusal says that, naming the tensor and its shape.
// Errors: OUT_OF_RANGE INDEX_OUT_OF_RANGE {dimension, size}, as the
// server's for the same index.
absl::Status CheckIndexInShape(absl::string_view where, absl::string_view text,
                               absl::Span<const int64_t> index,
                               absl::Span<const int64_t> shape);

// The number of dimensions a numpy slice ("0:4, ::2, -1, ...") indexes: every
// item but "...". The same grammar the server parses (core/slice.h), checked
// here so that a malformed slice is a usage error like a malformed index.
// Errors: INVALID_ARGUMENT SLICE_INVALID naming the item.
absl::StatusOr<size_t> SliceDimensions(absl::string_view text);

// "WxH", both decimal integers in [1, max], with W * H <= max_cells.
// Errors: INVALID_ARGUMENT naming the text and the limit.
absl::StatusOr<std::pair<int, int>> ParseSize(absl::string_view text, int max,
                                              int64_t max_cells);

// "A:B", a half-open range [A, B) of rows or columns: decimal integers,
// A >= 0 (empty = 0), B > A (empty = to the end, sent as 0).
// Errors: INVALID_ARGUMENT naming the text and the rule.
absl::StatusOr<std::pair<int64_t, int64_t>> ParseRange(absl::string_view text);

// "i/N", diff --part: part i of N, decimal integers with 0 <= i < N and
// 1 <= N <= kMaxDiffParts (core/diff_parts/partition.h).
// Errors: INVALID_ARGUMENT naming the text and the rule.
absl::StatusOr<std::pair<int32_t, int32_t>> ParseDiffPart(
    absl::string_view text);

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_CLI_ARGUMENTS_H_
