#include "client/cli/arguments.h"

#include <algorithm>
#include <charconv>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli/format.h"
#include "core/diff_parts/partition.h"
#include "core/util/error_reason.h"
#include "core/util/read_whole.h"

namespace tensormorph {
namespace {

// A decimal integer of 64 bits, optionally '-' signed, nothing else
// (SimpleAtoi would also take surrounding spaces and a '+').
bool ParseInt(absl::string_view text, int64_t* out) {
  const char* end = text.data() + text.size();
  const auto [at, error] = std::from_chars(text.data(), end, *out);
  return error == std::errc() && at == end;
}

// What is wrong with `text` as a coordinate ParseInt refused: digits past
// what 64 bits hold are an integer all the same, out of range.
std::string NotAnIndexInteger(absl::string_view text) {
  int64_t v;
  const char* end = text.data() + text.size();
  const auto [at, error] = std::from_chars(text.data(), end, v);
  return error == std::errc::result_out_of_range && at == end
             ? "is out of range (a coordinate fits in 64 bits)"
             : "is not an integer";
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ParseIndex(absl::string_view text) {
  std::vector<int64_t> index;
  absl::Status s = ParseIndexInto(text, &index);
  if (!s.ok()) return s;
  return index;
}

absl::Status ParseIndexInto(absl::string_view text,
                            std::vector<int64_t>* index) {
  index->clear();
  const absl::string_view t = absl::StripAsciiWhitespace(text);
  if (t == "()") return absl::OkStatus();
  if (t.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "index '", text,
        "' is empty: give one integer per dimension, comma-separated, e.g. "
        "3,17 (a rank-0 tensor's one element is ())"));
  }
  for (absl::string_view raw : absl::StrSplit(t, ',')) {
    const absl::string_view c = absl::StripAsciiWhitespace(raw);
    int64_t v;
    if (c.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "index '", text, "' has an empty coordinate (coordinate ",
          index->size(), ")"));
    }
    if (!ParseInt(c, &v)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", c, "' in index '", text, "' ", NotAnIndexInteger(c)));
    }
    index->push_back(v);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadOptionFile(absl::string_view option,
                                           const std::string& path) {
  return ReadWholeFile(path, absl::StrCat(option, " '", path, "'"),
                       kMaxOptionFileBytes);
}

absl::Status ReadIndexLines(absl::string_view name, absl::string_view text,
                            IndexLineVisitor visit) {
  std::vector<int64_t> index;
  absl::string_view rest = text;
  for (int line = 1; !rest.empty(); ++line) {
    const size_t eol = std::min(rest.find('\n'), rest.size());
    absl::string_view written = rest.substr(0, eol);
    rest.remove_prefix(std::min(eol + 1, rest.size()));
    written = written.substr(0, written.find('#'));
    written = absl::StripAsciiWhitespace(written);
    if (written.empty()) continue;
    if (absl::Status s = ParseIndexInto(written, &index); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " line ", line, ": ", s.message()));
    }
    if (absl::Status s = visit(line, written, index); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status CheckIndexRank(absl::string_view text,
                            absl::Span<const int64_t> index,
                            absl::string_view tensor,
                            absl::Span<const int64_t> shape, size_t arguments) {
  if (index.size() == shape.size()) return absl::OkStatus();
  std::string msg = absl::StrCat(
      "index '", text, "' has ", Count(index.size(), "coordinate"),
      " but tensor '", tensor, "' has rank ", shape.size(), " (shape ",
      ShapeText(shape), "): every index needs exactly ",
      Count(shape.size(), "coordinate"));
  if (shape.empty()) {
    absl::StrAppend(&msg, "; its one element is ()");
  } else {
    std::vector<std::string> zeros(shape.size(), "0");
    absl::StrAppend(&msg, ", comma-separated, e.g. ",
                    absl::StrJoin(zeros, ","));
    if (index.size() < shape.size() && arguments > 1) {
      absl::StrAppend(&msg,
                      " (each argument is one index: separate arguments are "
                      "separate indices)");
    }
  }
  return absl::InvalidArgumentError(msg);
}

absl::Status CheckIndexInShape(absl::string_view where, absl::string_view text,
                               absl::Span<const int64_t> index,
                               absl::Span<const int64_t> shape) {
  // An empty tensor has no index at all: the server's refusal says so.
  for (const int64_t size : shape) {
    if (size == 0) return absl::OkStatus();
  }
  for (size_t d = 0; d < index.size() && d < shape.size(); ++d) {
    const int64_t c = index[d];
    if (c >= -shape[d] && c < shape[d]) continue;
    return WithReason(
        absl::OutOfRangeError(
            absl::StrCat(where, ": index '", text, "': coordinate ", c,
                         " is out of range for dimension ", d, " of size ",
                         shape[d], " (", -shape[d], " .. ", shape[d] - 1, ")")),
        ErrorReason::kIndexOutOfRange,
        {{"dimension", absl::StrCat(d)}, {"size", absl::StrCat(shape[d])}});
  }
  return absl::OkStatus();
}

namespace {
// INVALID_ARGUMENT SLICE_INVALID, as the server's parser (core/slice.cc)
// reports the same slice.
absl::Status SliceInvalid(std::string message) {
  return WithReason(absl::InvalidArgumentError(std::move(message)),
                    ErrorReason::kSliceInvalid);
}
}  // namespace

absl::StatusOr<size_t> SliceDimensions(absl::string_view text) {
  if (absl::StripAsciiWhitespace(text).empty()) return 0;
  size_t dims = 0, items = 0;
  bool ellipsis = false;
  for (absl::string_view raw : absl::StrSplit(text, ',')) {
    ++items;
    const absl::string_view item = absl::StripAsciiWhitespace(raw);
    if (item == "...") {
      if (ellipsis) {
        return SliceInvalid(
            absl::StrCat("slice '", text, "' has more than one '...'"));
      }
      ellipsis = true;
      continue;
    }
    std::vector<absl::string_view> parts = absl::StrSplit(item, ':');
    if (parts.size() > 3) {
      return SliceInvalid(
          absl::StrCat("slice item '", item,
                       "' has more than three parts (start:stop:step)"));
    }
    if (parts.size() == 1 && item.empty()) {
      return SliceInvalid(
          absl::StrCat("slice '", text, "': item ", items,
                       " is empty (use ':' for all of a dimension)"));
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      const absl::string_view p = absl::StripAsciiWhitespace(parts[i]);
      int64_t v;
      if (p.empty()) continue;
      if (!ParseInt(p, &v)) {
        return SliceInvalid(absl::StrCat("slice item '", item, "': '", p, "' ",
                                         NotAnIndexInteger(p)));
      }
      if (i == 2 && v == 0) {
        return SliceInvalid(
            absl::StrCat("slice item '", item, "': step must not be 0"));
      }
    }
    ++dims;
  }
  return dims;
}

absl::StatusOr<std::pair<int, int>> ParseSize(absl::string_view text, int max,
                                              int64_t max_cells) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, 'x');
  int64_t side[2];
  bool ok = parts.size() == 2;
  for (size_t i = 0; ok && i < 2; ++i) {
    ok =
        !parts[i].empty() && parts[i][0] != '-' && ParseInt(parts[i], &side[i]);
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not WxH (two positive integers, e.g. 128x64)"));
  }
  for (int i = 0; i < 2; ++i) {
    if (side[i] < 1 || side[i] > max) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", text, "': ", i == 0 ? "width " : "height ", side[i],
                       " is out of range: 1 to ", max, " cells"));
    }
  }
  if (side[0] * side[1] > max_cells) {  // each side <= max: no overflow
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "': ", side[0] * side[1],
                     " cells are more than the ", max_cells, " allowed"));
  }
  return std::pair<int, int>(static_cast<int>(side[0]),
                             static_cast<int>(side[1]));
}

absl::StatusOr<std::pair<int64_t, int64_t>> ParseRange(absl::string_view text) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  int64_t v[2] = {0, 0};
  bool ok = parts.size() == 2;
  for (size_t i = 0; ok && i < 2; ++i) {
    ok = parts[i].empty() || (parts[i][0] != '-' && ParseInt(parts[i], &v[i]));
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text,
                     "' is not A:B (non-negative integers, either may be "
                     "left out: 0:512, 100:, :64)"));
  }
  if (!parts[1].empty() && v[1] <= v[0]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "': the end ", v[1], " must be past the start ", v[0]));
  }
  return std::pair<int64_t, int64_t>(v[0], v[1]);
}

absl::StatusOr<std::pair<int32_t, int32_t>> ParseDiffPart(
    absl::string_view text) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, '/');
  int64_t v[2] = {0, 0};
  bool ok = parts.size() == 2;
  for (size_t i = 0; ok && i < 2; ++i) {
    ok = !parts[i].empty() && parts[i][0] != '-' && ParseInt(parts[i], &v[i]);
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is not i/N (part i of N, two integers, e.g. 0/3)"));
  }
  if (v[1] < 1 || v[1] > kMaxDiffParts) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "': N must be 1 to ", kMaxDiffParts));
  }
  if (v[0] >= v[1]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "': i must be 0 to ", v[1] - 1, " (parts count from 0)"));
  }
  return std::pair<int32_t, int32_t>(static_cast<int32_t>(v[0]),
                                     static_cast<int32_t>(v[1]));
}

}  // namespace tensormorph
