#include "core/slice.h"

#include <algorithm>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/format/stored_tensor.h"
#include "core/util/error_reason.h"

namespace tensormorph {
namespace {

// Elements decoded at once when a strided run is read through a contiguous
// span; bounds the scratch buffer.
constexpr int64_t kMaxSpan = 1 << 16;

// INVALID_ARGUMENT SLICE_INVALID: the expression, not the tensor, is wrong.
absl::Status SliceInvalid(absl::string_view message) {
  return WithReason(absl::InvalidArgumentError(message),
                    ErrorReason::kSliceInvalid);
}

absl::StatusOr<std::optional<int64_t>> ParseBound(absl::string_view part,
                                                  absl::string_view item) {
  part = absl::StripAsciiWhitespace(part);
  if (part.empty()) return std::optional<int64_t>();
  int64_t v;
  if (!absl::SimpleAtoi(part, &v)) {
    return SliceInvalid(absl::StrCat("slice item '", item, "': '", part,
                                     "' is not an integer"));
  }
  return std::optional<int64_t>(v);
}

}  // namespace

absl::StatusOr<std::vector<SliceItem>> ParseSlice(absl::string_view text) {
  std::vector<SliceItem> items;
  if (absl::StripAsciiWhitespace(text).empty()) return items;
  bool seen_ellipsis = false;
  for (absl::string_view raw : absl::StrSplit(text, ',')) {
    const absl::string_view item = absl::StripAsciiWhitespace(raw);
    SliceItem s;
    if (item == "...") {
      if (seen_ellipsis) {
        return SliceInvalid("slice has more than one '...'");
      }
      seen_ellipsis = true;
      s.kind = SliceItem::Kind::kEllipsis;
      items.push_back(s);
      continue;
    }
    std::vector<absl::string_view> parts = absl::StrSplit(item, ':');
    if (parts.size() > 3) {
      return SliceInvalid(
          absl::StrCat("slice item '", item, "' has more than three parts"));
    }
    if (parts.size() == 1) {
      auto v = ParseBound(parts[0], item);
      if (!v.ok()) return v.status();
      if (!v->has_value()) {
        return SliceInvalid(absl::StrCat("slice item ", items.size(),
                                         " is empty (use ':' for all)"));
      }
      s.kind = SliceItem::Kind::kIndex;
      s.index = **v;
      items.push_back(s);
      continue;
    }
    std::optional<int64_t>* fields[3] = {&s.start, &s.stop, &s.step};
    for (size_t i = 0; i < parts.size(); ++i) {
      auto v = ParseBound(parts[i], item);
      if (!v.ok()) return v.status();
      *fields[i] = *v;
    }
    if (s.step.has_value() && *s.step == 0) {
      return SliceInvalid(
          absl::StrCat("slice item '", item, "': step must not be 0"));
    }
    if (s.step.has_value() && *s.step == std::numeric_limits<int64_t>::min()) {
      return SliceInvalid(
          absl::StrCat("slice item '", item, "': step is out of range"));
    }
    items.push_back(s);
  }
  return items;
}

absl::StatusOr<ResolvedSlice> ResolveSlice(absl::Span<const SliceItem> items,
                                           absl::Span<const int64_t> shape) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t explicit_dims = 0;
  for (const SliceItem& it : items) {
    if (it.kind != SliceItem::Kind::kEllipsis) ++explicit_dims;
  }
  if (explicit_dims > rank) {
    return SliceInvalid(absl::StrCat("slice has ", explicit_dims,
                                     " indices but the tensor has ", rank,
                                     " dimensions"));
  }
  // Expand "..." (or the implicit trailing one) into full ranges.
  std::vector<SliceItem> full;
  for (const SliceItem& it : items) {
    if (it.kind == SliceItem::Kind::kEllipsis) {
      for (int64_t k = 0; k < rank - explicit_dims; ++k) full.emplace_back();
    } else {
      full.push_back(it);
    }
  }
  while (static_cast<int64_t>(full.size()) < rank) full.emplace_back();

  ResolvedSlice out;
  out.num_elements = 1;
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t n = shape[d];
    const SliceItem& it = full[d];
    ResolvedDim r;
    if (it.kind == SliceItem::Kind::kIndex) {
      const int64_t i = it.index < 0 ? it.index + n : it.index;
      if (i < 0 || i >= n) {
        return WithReason(
            absl::OutOfRangeError(absl::StrCat(
                "index ", it.index, " is out of range for dimension ", d,
                " of size ", n)),
            ErrorReason::kSliceOutOfRange,
            {{"dimension", absl::StrCat(d)}, {"size", absl::StrCat(n)}});
      }
      r = {i, 1, 1, false};
    } else {
      const int64_t step = it.step.value_or(1);
      // numpy's PySlice_AdjustIndices, in int64 without overflow: bounds are
      // clamped before any arithmetic that could exceed the range.
      auto adjust = [n](int64_t v, int64_t lo, int64_t hi) {
        if (v < 0) v = v < -n ? lo : v + n;
        return std::clamp(v, lo, hi);
      };
      int64_t start, stop;
      if (step > 0) {
        start = it.start ? adjust(*it.start, 0, n) : 0;
        stop = it.stop ? adjust(*it.stop, 0, n) : n;
        r.count = stop > start ? (stop - start - 1) / step + 1 : 0;
      } else {
        start = it.start ? adjust(*it.start, -1, n - 1) : n - 1;
        stop = it.stop ? adjust(*it.stop, -1, n - 1) : -1;
        r.count = start > stop ? (start - stop - 1) / (-step) + 1 : 0;
      }
      r.start = start;
      r.step = step;
      r.keep = true;
      out.result_shape.push_back(r.count);
    }
    out.num_elements *= r.count;
    out.dims.push_back(r);
  }
  return out;
}

SliceReader::SliceReader(const LogicalTensor& tensor, ResolvedSlice slice)
    : tensor_(tensor), slice_(std::move(slice)) {
  strides_.assign(tensor.shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(tensor.shape.size()) - 2; d >= 0; --d) {
    strides_[d] = strides_[d + 1] * tensor.shape[d + 1];
  }
  if (tensor.encoding != nullptr) {
    std::vector<absl::Span<const uint8_t>> parts;
    for (const StoredTensor* part : tensor.encoding->parts()) {
      parts.push_back(part->data);
    }
    read_ahead_ = ElementReadAhead(parts, tensor.num_elements);
  }
}

absl::Status SliceReader::ReadRun(int64_t base, int64_t k, int64_t n,
                                  float* out) {
  const ResolvedDim& inner =
      slice_.dims.empty() ? ResolvedDim{0, 1, 1, true} : slice_.dims.back();
  const int64_t step = inner.step;
  const int64_t first = base + inner.start + k * step;  // source of element k
  if (step == 1) {
    read_ahead_.Reading(first, n);
    return tensor_.encoding->Decode(first, n, out);
  }
  if (step == -1) {
    absl::Status s = tensor_.encoding->Decode(first - (n - 1), n, out);
    std::reverse(out, out + n);
    return s;
  }
  const int64_t astep = step > 0 ? step : -step;
  if (astep >= kMaxSpan) {  // Far apart: decode one element at a time.
    for (int64_t i = 0; i < n; ++i) {
      absl::Status s = tensor_.encoding->Decode(first + i * step, 1, out + i);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  // Decode a contiguous span covering a batch of picks, then gather.
  const int64_t per_batch = std::max<int64_t>(1, kMaxSpan / astep);
  scratch_.resize((per_batch - 1) * astep + 1);
  for (int64_t done = 0; done < n; done += per_batch) {
    const int64_t m = std::min(per_batch, n - done);
    const int64_t a = first + done * step;
    const int64_t b = a + (m - 1) * step;
    const int64_t lo = std::min(a, b);
    absl::Status s =
        tensor_.encoding->Decode(lo, (m - 1) * astep + 1, scratch_.data());
    if (!s.ok()) return s;
    for (int64_t i = 0; i < m; ++i) out[done + i] = scratch_[a + i * step - lo];
  }
  return absl::OkStatus();
}

absl::Status SliceReader::Read(int64_t first, int64_t count, float* out) {
  const int64_t rank = static_cast<int64_t>(slice_.dims.size());
  const int64_t run = rank == 0 ? 1 : slice_.dims.back().count;
  if (count <= 0 || run == 0) return absl::OkStatus();
  int64_t pos = first;
  while (count > 0) {
    // Source offset of the run holding result element `pos`: unravel the
    // outer index over the resolved dimensions.
    int64_t outer = pos / run;
    const int64_t k = pos % run;
    int64_t base = 0;
    for (int64_t d = rank - 2; d >= 0; --d) {
      const ResolvedDim& r = slice_.dims[d];
      const int64_t i = outer % r.count;
      outer /= r.count;
      base += (r.start + i * r.step) * strides_[d];
    }
    const int64_t n = std::min(count, run - k);
    absl::Status s = ReadRun(base, k, n, out);
    if (!s.ok()) return s;
    out += n;
    pos += n;
    count -= n;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> ReadSlice(const LogicalTensor& tensor,
                                             const ResolvedSlice& slice) {
  std::vector<float> out(slice.num_elements);
  SliceReader reader(tensor, slice);
  absl::Status s = reader.Read(0, slice.num_elements, out.data());
  if (!s.ok()) return s;
  return out;
}

}  // namespace tensormorph
