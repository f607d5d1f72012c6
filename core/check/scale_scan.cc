#include "core/check/scale_scan.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/check/rules.h"
#include "core/io/fault_guard.h"

namespace tensormorph {
namespace {

constexpr int64_t kPiece = int64_t{1} << 18;

// The smallest normal magnitude of a scale's stored dtype; 0 where the rule
// does not apply (E8M0 has no denormals, integers none at all).
double SmallestNormal(DType d) {
  switch (d) {
    case DType::kF16:
      return 6.103515625e-05;  // 2^-14
    case DType::kBF16:
    case DType::kF32:
      return 1.1754943508222875e-38;  // 2^-126
    case DType::kF64:
      return 2.2250738585072014e-308;
    case DType::kF8E4M3:
      return 0.015625;  // 2^-6
    case DType::kF8E5M2:
      return 6.103515625e-05;  // 2^-14
    default:
      return 0;
  }
}

bool IsFloatScale(DType d) {
  switch (d) {
    case DType::kF64:
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kF8E8M0:
      return true;
    default:
      return false;
  }
}

}  // namespace

ScaleRole RoleOfPart(absl::string_view name) {
  const size_t dot = name.rfind('.');
  const absl::string_view last =
      dot == absl::string_view::npos ? name : name.substr(dot + 1);
  if (absl::StrContains(last, "zero")) return ScaleRole::kZero;
  if (absl::StrContains(last, "scale") || absl::StrContains(last, "absmax"))
    return ScaleRole::kScale;
  return ScaleRole::kNone;
}

absl::Status ScanStoredScales(const Checkpoint& ckpt, const LogicalTensor& t,
                              const std::atomic<bool>* cancelled,
                              absl::flat_hash_set<const StoredTensor*>* scanned,
                              std::vector<Finding>* out) {
  const EncodingInfo& info = t.encoding->info();
  if (!info.quantized || info.convention == "ggml") return absl::OkStatus();
  const std::vector<const StoredTensor*> parts = t.encoding->parts();
  for (size_t p = 1; p < parts.size(); ++p) {
    const StoredTensor* st = parts[p];
    const ScaleRole role = RoleOfPart(st->name);
    if (role == ScaleRole::kNone || !IsFloatScale(st->dtype)) continue;
    if (!scanned->insert(st).second) continue;
    const LogicalTensor* part = ckpt.FindPart(st->name);
    if (part == nullptr || part->num_elements == 0) continue;
    const bool scale = role == ScaleRole::kScale;
    const double tiny = scale ? SmallestNormal(st->dtype) : 0;
    const bool f16 = st->dtype == DType::kF16;
    const bool wide = st->dtype == DType::kF32 || st->dtype == DType::kBF16 ||
                      st->dtype == DType::kF64;
    struct Count {
      int64_t n = 0, first = -1;
      void Add(int64_t i) {
        if (n++ == 0) first = i;
      }
    } nan, inf, zero, denormal, at_max, over;
    double smallest = 0, largest = 0;
    const int64_t n = part->num_elements;
    std::vector<float> v(static_cast<size_t>(std::min(kPiece, n)));
    for (int64_t first = 0; first < n; first += kPiece) {
      if (cancelled != nullptr && cancelled->load())
        return absl::CancelledError("cancelled");
      const int64_t m = std::min(kPiece, n - first);
      absl::Status s = GuardedRead(
          [&] { return part->encoding->Decode(first, m, v.data()); });
      if (!s.ok()) return s;
      for (int64_t i = 0; i < m; ++i) {
        const double x = v[i], a = std::fabs(x);
        if (std::isnan(x)) {
          nan.Add(first + i);
        } else if (std::isinf(x)) {
          inf.Add(first + i);
        } else if (!scale) {
          continue;
        } else if (x == 0) {
          zero.Add(first + i);
        } else if (a < tiny) {
          if (denormal.n == 0 || a < smallest) smallest = a;
          denormal.Add(first + i);
        } else if (f16 && a == kF16Max) {
          at_max.Add(first + i);
        } else if (wide && a > kF16Max) {
          largest = std::max(largest, a);
          over.Add(first + i);
        }
      }
    }
    const std::string what = scale ? "scales" : "zero-points";
    auto emit = [&](absl::string_view rule, const Count& c,
                    std::string expected, std::string actual,
                    std::string hint) {
      if (c.n == 0) return;
      Finding f;
      f.rule = std::string(rule);
      f.severity = FindCheckRule(rule)->severity;
      f.tensor = st->name;
      f.file = ckpt.files()[st->file_index].path;
      f.expected = std::move(expected);
      f.actual =
          absl::StrCat(c.n, " of ", n, " ", what, " ", actual,
                       " (first at element ", c.first, ") of '", t.name, "'");
      f.hint = std::move(hint);
      f.count = c.n;
      f.worst_group = c.first;
      out->push_back(std::move(f));
    };
    const std::string dtype(DTypeName(st->dtype));
    emit("nan-scale", nan, absl::StrCat("finite ", what), "are NaN",
         "every value of those groups decodes to NaN: re-quantize, or "
         "re-export the scales from the quantizer's float32 state");
    emit("inf-scale", inf, absl::StrCat("finite ", what), "are Inf",
         "an overflow of the scale: re-quantize the tensor");
    emit("zero-scale", zero, "non-zero scales", "are 0",
         "each such group decodes to one value: an underflow (a scale too "
         "small for " +
             dtype + "), or a group the quantizer never saw");
    emit("denormal-scale", denormal,
         absl::StrFormat("scales of at least %g (the smallest normal %s)", tiny,
                         dtype),
         absl::StrFormat("are denormal (smallest %g)", smallest),
         "the scale has lost precision on its way to 0: store scales in a "
         "wider dtype (bf16 or f32)");
    emit("fp16-saturated-scale", at_max,
         "F16 scales below the fp16 maximum 65504",
         "are exactly +-65504: saturated, an overflow clamped to the fp16 "
         "maximum",
         "the true scale was larger than fp16 holds: store scales as bf16 or "
         "f32");
    emit("fp16-saturated-scale", over,
         absl::StrCat(dtype, " scales within +-65504 (the fp16 maximum)"),
         absl::StrFormat("would overflow fp16 (largest %g)", largest),
         "a runtime that casts scales to fp16 gets Inf here: keep them in "
         "bf16/f32 there, or rescale");
  }
  return absl::OkStatus();
}

}  // namespace tensormorph
