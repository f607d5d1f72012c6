#include "server/http/http_query.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace tensormorph {
namespace {

constexpr size_t kMaxValueBytes = 16 << 10;

bool IsUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int extra = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= s.size()) return false;  // cut short
    for (int k = 1; k <= extra; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF.
    constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += extra + 1;
  }
  return true;
}

// The parameters of one endpoint, checked once against what it takes.
class Query {
 public:
  static absl::StatusOr<Query> Check(const QueryParams& params,
                                     absl::string_view endpoint,
                                     std::vector<std::string> allowed) {
    for (auto it = params.begin(); it != params.end(); ++it) {
      const std::string& name = it->first;
      bool known = false;
      for (const std::string& a : allowed) known = known || a == name;
      if (!known) {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown query parameter '", name, "'; ", endpoint,
                         " takes ", absl::StrJoin(allowed, ", ")));
      }
      if (params.count(name) > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("query parameter '", name, "' is given ",
                         params.count(name), " times; give it once"));
      }
      if (it->second.size() > kMaxValueBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("query parameter '", name, "' is ", it->second.size(),
                         " bytes, past the ", kMaxValueBytes, " allowed"));
      }
      if (!IsUtf8(it->second)) {
        return absl::InvalidArgumentError(
            absl::StrCat("query parameter '", name, "' is not valid UTF-8"));
      }
    }
    return Query(params);
  }

  std::optional<std::string> Get(const std::string& name) const {
    auto it = params_.find(name);
    if (it == params_.end()) return std::nullopt;
    return it->second;
  }

  absl::StatusOr<std::string> Required(const std::string& name) const {
    std::optional<std::string> v = Get(name);
    if (!v.has_value() || v->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("query parameter '", name, "' is required"));
    }
    return *v;
  }

  absl::StatusOr<bool> Flag(const std::string& name) const {
    std::optional<std::string> v = Get(name);
    if (!v.has_value()) return false;
    if (*v == "1" || *v == "true") return true;
    if (*v == "0" || *v == "false") return false;
    return absl::InvalidArgumentError(
        absl::StrCat("query parameter '", name, "' is '", *v,
                     "'; expected 0, 1, true or false"));
  }

  absl::StatusOr<std::optional<int64_t>> Integer(const std::string& name,
                                                 int64_t min,
                                                 int64_t max) const {
    std::optional<std::string> v = Get(name);
    if (!v.has_value()) return std::optional<int64_t>();
    return ParseInteger(name, *v, min, max);
  }

  // "A:B", either side optional; an absent parameter is {0, 0}.
  absl::StatusOr<std::pair<int64_t, int64_t>> Range(
      const std::string& name) const {
    std::optional<std::string> v = Get(name);
    if (!v.has_value()) return std::pair<int64_t, int64_t>{0, 0};
    std::vector<absl::string_view> parts = absl::StrSplit(*v, ':');
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "query parameter '", name, "' is '", *v, "'; expected BEGIN:END"));
    }
    std::pair<int64_t, int64_t> range{0, 0};
    int64_t* ends[] = {&range.first, &range.second};
    for (int k = 0; k < 2; ++k) {
      if (parts[k].empty()) continue;
      absl::StatusOr<int64_t> n = ParseInteger(name, parts[k], 0, INT64_MAX);
      if (!n.ok()) return n.status();
      *ends[k] = *n;
    }
    return range;
  }

  static absl::StatusOr<int64_t> ParseInteger(const std::string& name,
                                              absl::string_view text,
                                              int64_t min, int64_t max) {
    // Digits with an optional '-': SimpleAtoi alone would take "+5" and
    // " 5" too.
    absl::string_view digits = text;
    absl::ConsumePrefix(&digits, "-");
    const bool plain = !digits.empty() &&
                       std::all_of(digits.begin(), digits.end(),
                                   [](char c) { return c >= '0' && c <= '9'; });
    int64_t n = 0;
    if (!plain || !absl::SimpleAtoi(text, &n) || n < min || n > max) {
      return absl::InvalidArgumentError(
          absl::StrCat("query parameter '", name, "' has '", text,
                       "'; expected an integer in [", min, ", ", max, "]"));
    }
    return n;
  }

 private:
  explicit Query(const QueryParams& params) : params_(params) {}
  const QueryParams& params_;
};

#define TM_ASSIGN(lhs, expr)                    \
  auto lhs##_or = (expr);                       \
  if (!lhs##_or.ok()) return lhs##_or.status(); \
  auto lhs = *std::move(lhs##_or)

}  // namespace

absl::StatusOr<v1::ReadSliceRequest> ReadSliceFromQuery(
    const QueryParams& params) {
  TM_ASSIGN(q, Query::Check(params, "/v1/tensor.npy",
                            {"checkpoint", "tensor", "slice", "raw", "part"}));
  TM_ASSIGN(checkpoint, q.Required("checkpoint"));
  TM_ASSIGN(tensor, q.Required("tensor"));
  TM_ASSIGN(raw, q.Flag("raw"));
  TM_ASSIGN(part, q.Flag("part"));
  v1::ReadSliceRequest req;
  req.set_checkpoint(checkpoint);
  req.set_tensor(tensor);
  req.set_slice(q.Get("slice").value_or(""));
  req.set_mode(raw ? v1::OUTPUT_MODE_RAW : v1::OUTPUT_MODE_FLOAT32);
  req.set_part(part);
  return req;
}

absl::StatusOr<v1::GetHeatmapRequest> HeatmapFromQuery(
    const QueryParams& params) {
  TM_ASSIGN(q, Query::Check(
                   params, "/v1/heatmap.png",
                   {"checkpoint", "tensor", "mode", "ref", "ref_tensor",
                    "imatrix", "width", "height", "rows", "cols", "leading"}));
  TM_ASSIGN(checkpoint, q.Required("checkpoint"));
  TM_ASSIGN(tensor, q.Required("tensor"));
  v1::GetHeatmapRequest req;
  req.set_checkpoint(checkpoint);
  req.set_tensor(tensor);
  const std::string mode = q.Get("mode").value_or("value");
  static const std::pair<const char*, v1::HeatmapMode> kModes[] = {
      {"value", v1::HEATMAP_MODE_MEAN},       {"mean", v1::HEATMAP_MODE_MEAN},
      {"absmax", v1::HEATMAP_MODE_ABSMAX},    {"error", v1::HEATMAP_MODE_ERROR},
      {"group", v1::HEATMAP_MODE_GROUP},      {"zeros", v1::HEATMAP_MODE_ZEROS},
      {"sq-error", v1::HEATMAP_MODE_SQ_ERROR}};
  bool found = false;
  for (const auto& [name, m] : kModes) {
    if (mode == name) req.set_mode(m), found = true;
  }
  if (!found) {
    return absl::InvalidArgumentError(absl::StrCat(
        "query parameter 'mode' is '", mode,
        "'; expected value, absmax, error, group, zeros or sq-error"));
  }
  req.set_reference(q.Get("ref").value_or(""));
  req.set_reference_tensor(q.Get("ref_tensor").value_or(""));
  req.set_imatrix(q.Get("imatrix").value_or(""));
  TM_ASSIGN(width, q.Integer("width", 1, INT32_MAX));
  TM_ASSIGN(height, q.Integer("height", 1, INT32_MAX));
  if (width.has_value()) req.set_width(static_cast<int32_t>(*width));
  if (height.has_value()) req.set_height(static_cast<int32_t>(*height));
  TM_ASSIGN(rows, q.Range("rows"));
  TM_ASSIGN(cols, q.Range("cols"));
  req.set_row_begin(rows.first);
  req.set_row_end(rows.second);
  req.set_col_begin(cols.first);
  req.set_col_end(cols.second);
  if (std::optional<std::string> leading = q.Get("leading")) {
    for (absl::string_view part : absl::StrSplit(*leading, ',')) {
      TM_ASSIGN(index,
                Query::ParseInteger("leading", part, INT64_MIN + 1, INT64_MAX));
      req.add_leading(index);
    }
  }
  return req;
}

#undef TM_ASSIGN

}  // namespace tensormorph
