#include "core/check/value_scan.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/check/rules.h"
#include "core/io/fault_guard.h"
#include "core/quant/scalar_info.h"

namespace tensormorph {
namespace {

// What a group's elements have shown so far.
struct GroupAcc {
  int64_t count = 0, zeros = 0, nan = 0, inf = 0, at_low = 0, at_high = 0;
  float first = 0;
  bool constant = true;
  bool degenerate = false;  // its range is one value (a zero scale)
  bool scale_nan = false, scale_inf = false, scale_zero = false;
  int64_t last_piece = 0;
};

// A per-tensor tally of one rule: offenders, and the group with most.
struct Tally {
  int64_t count = 0;
  int64_t worst_group = -1;
  double worst = -1;  // the measure worst_group was chosen by
  void Add(int64_t n, int64_t group, double measure) {
    count += n;
    if (measure > worst) {
      worst = measure;
      worst_group = group;
    }
  }
};

bool IsFloatStorage(DType d) {
  switch (d) {
    case DType::kF64:
    case DType::kF32:
    case DType::kBF16:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string FileOfTensor(const Checkpoint& ckpt, const LogicalTensor& t) {
  std::vector<const StoredTensor*> parts = t.encoding->parts();
  if (parts.empty()) return "";
  return ckpt.files()[parts[0]->file_index].path;
}

absl::Status ScanTensorValues(const Checkpoint& ckpt, const LogicalTensor& t,
                              const ValueScanOptions& o,
                              const std::atomic<bool>* cancelled,
                              const std::function<void(int64_t)>& on_elements,
                              std::vector<Finding>* out) {
  const int64_t n = t.num_elements;
  if (n == 0) return absl::OkStatus();
  const Encoding& enc = *t.encoding;
  const EncodingInfo& info = enc.info();
  const std::vector<const StoredTensor*> parts = enc.parts();
  const bool quantized = info.quantized;
  // ggml keeps its scales inside the blocks: a run's range is the only view
  // of them. Conventions store scales as tensors (scale_scan.h reads them).
  const bool block_scales = quantized && info.convention == "ggml";
  // Values past fp16's range matter for decoded quantized values and for
  // floats wider than fp16; integers (position ids...) are not weights.
  const bool check_f16 =
      quantized || (!parts.empty() && IsFloatStorage(parts[0]->dtype));

  // dead-levels: integer grids of at most 8 bits (L levels), judged with
  // enough elements that an unused level means something.
  int64_t levels = 0;
  if (quantized && info.bits <= 8) {
    ScalarInfo s;
    absl::Status st = GuardedRead([&] { return enc.Inspect(0, &s); });
    if (!st.ok()) return st;
    if (s.grid == ScalarInfo::Grid::kUniform) {
      const double l = s.grid_max - s.grid_min + 1;
      if (l >= 2 && l <= 256) levels = static_cast<int64_t>(l);
    }
  }
  const bool judge_dead =
      levels > 0 && n / levels >= kDeadLevelsElementsPerLevel;
  std::vector<int64_t> level_hist(judge_dead ? levels : 0, 0);

  const int64_t cols =
      t.shape.empty() ? 1 : std::max<int64_t>(1, t.shape.back());
  int64_t piece = o.piece_elements;
  if (cols <= o.piece_elements) {
    piece = o.piece_elements / cols * cols;
  } else if (cols <= o.max_piece_elements) {
    piece = cols;
  }
  piece = std::max<int64_t>(1, std::min(piece, n));

  std::vector<float> values(static_cast<size_t>(piece));
  std::vector<QuantRun> runs;
  absl::flat_hash_map<int64_t, GroupAcc> open;
  int64_t nan = 0, inf = 0, over_f16 = 0;
  int64_t first_nan = -1, first_inf = -1, first_over = -1;
  double max_abs = 0;
  Tally nan_groups, inf_groups, all_zero, constant, saturated;
  Tally scale_nan, scale_inf, scale_zero;
  int64_t groups_seen = 0;

  auto close = [&](int64_t id, const GroupAcc& g) {
    ++groups_seen;
    if (g.nan > 0) nan_groups.Add(0, id, static_cast<double>(g.nan));
    if (g.inf > 0) inf_groups.Add(0, id, static_cast<double>(g.inf));
    if (g.scale_nan) scale_nan.Add(1, id, 0);
    if (g.scale_inf) scale_inf.Add(1, id, 0);
    if (g.scale_zero) scale_zero.Add(1, id, 0);
    if (g.count >= 2 && g.zeros == g.count) {
      all_zero.Add(1, id, 0);
    } else if (g.count >= 2 && g.constant && g.nan == 0 && g.inf == 0) {
      constant.Add(1, id, 0);
    }
    if (info.bits >= kSaturatedGroupMinBits &&
        g.count >= kSaturatedGroupMinElements && !g.degenerate) {
      // A min/max quantizer puts the group's own min and max on its end
      // levels, and a one-sided outlier stretches the scale so that the bulk
      // rounds to the other end: clipping fills both ends.
      const double frac = static_cast<double>(g.at_low + g.at_high) / g.count;
      if (g.at_low > 1 && g.at_high > 1 && frac > kSaturatedGroupFraction) {
        saturated.Add(1, id, frac);
      }
    }
  };

  int64_t piece_no = 0;
  for (int64_t first = 0; first < n; first += piece, ++piece_no) {
    if (cancelled != nullptr && cancelled->load())
      return absl::CancelledError("cancelled");
    const int64_t m = std::min(piece, n - first);
    absl::Status read = GuardedRead([&]() -> absl::Status {
      if (!quantized) return enc.Decode(first, m, values.data());
      return enc.DecodeRuns(first, m, values.data(), &runs);
    });
    if (!read.ok()) return read;
    if (!quantized) {
      for (int64_t i = 0; i < m; ++i) {
        const float v = values[i];
        if (std::isnan(v)) {
          if (nan++ == 0) first_nan = first + i;
        } else if (std::isinf(v)) {
          if (inf++ == 0) first_inf = first + i;
        } else if (check_f16 && std::fabs(v) > kF16Max) {
          if (over_f16++ == 0) first_over = first + i;
          max_abs = std::max(max_abs, static_cast<double>(std::fabs(v)));
        }
      }
    } else {
      int64_t i = 0;
      for (const QuantRun& r : runs) {
        const int64_t end = i + r.count;
        auto [it, fresh] = open.try_emplace(r.group);
        GroupAcc& g = it->second;
        if (fresh) g.first = values[i];
        g.last_piece = piece_no;
        g.count += r.count;
        const double lo = r.range_min, hi = r.range_max;
        if (std::isnan(lo) || std::isnan(hi)) {
          g.scale_nan |= block_scales;
        } else if (std::isinf(lo) || std::isinf(hi)) {
          g.scale_inf |= block_scales;
        } else if (lo == hi) {
          g.degenerate = true;
          g.scale_zero |= block_scales;
        }
        const float flo = static_cast<float>(lo), fhi = static_cast<float>(hi);
        const bool dead = judge_dead && !g.degenerate && std::isfinite(hi - lo);
        const double inv = dead ? (levels - 1) / (hi - lo) : 0;
        for (; i < end; ++i) {
          const float v = values[i];
          if (std::isnan(v)) {
            ++g.nan;
            if (nan++ == 0) first_nan = first + i;
            g.constant = false;
            continue;
          }
          if (std::isinf(v)) {
            ++g.inf;
            if (inf++ == 0) first_inf = first + i;
            g.constant = false;
            continue;
          }
          g.zeros += v == 0;
          g.constant &= v == g.first;
          // A zero on an end level is exact (every value of the group on
          // one side of 0), not clipped.
          g.at_low += v != 0 && v == flo;
          g.at_high += v != 0 && v == fhi;
          if (std::fabs(v) > kF16Max) {
            if (over_f16++ == 0) first_over = first + i;
            max_abs = std::max(max_abs, static_cast<double>(std::fabs(v)));
          }
          if (dead) {
            const int64_t k = std::llround((v - lo) * inv);
            if (k >= 0 && k < levels) ++level_hist[k];
          }
        }
      }
      // A group this piece did not touch is complete: pieces are whole rows
      // (or one row, or contiguous runs of a long 1-D tensor), and a group
      // covers a contiguous band of rows, touching each of them.
      for (auto it = open.begin(); it != open.end();) {
        if (it->second.last_piece != piece_no) {
          close(it->first, it->second);
          open.erase(it++);
        } else {
          ++it;
        }
      }
    }
    if (on_elements) on_elements(m);
  }
  for (const auto& [id, g] : open) close(id, g);

  const std::string file = FileOfTensor(ckpt, t);
  auto emit = [&](absl::string_view rule, int64_t count, int64_t worst_group,
                  std::string expected, std::string actual, std::string hint) {
    const CheckRule* r = FindCheckRule(rule);
    Finding f;
    f.rule = std::string(rule);
    f.severity = r != nullptr ? r->severity : Severity::kError;
    f.tensor = t.name;
    f.file = file;
    f.expected = std::move(expected);
    f.actual = std::move(actual);
    f.hint = std::move(hint);
    f.count = count;
    f.worst_group = worst_group;
    out->push_back(std::move(f));
  };
  auto in_group = [](const Tally& tally, absl::string_view what) {
    return tally.worst_group < 0
               ? std::string()
               : absl::StrCat("; most in group ", tally.worst_group, " (",
                              static_cast<int64_t>(tally.worst), " ", what,
                              ")");
  };
  const std::string groups_text = absl::StrCat(groups_seen, " groups");
  if (nan > 0) {
    emit("nan-value", nan, nan_groups.worst_group, "finite decoded values",
         absl::StrCat(nan, " of ", n, " values are NaN (first at flat index ",
                      first_nan, ")", in_group(nan_groups, "NaN")),
         quantized ? "look at the group's scale (tensormorph scalar) and at "
                     "the nan-scale findings; re-quantize from the source"
                   : "the stored values are NaN: re-export the tensor from "
                     "its source");
  }
  if (inf > 0) {
    emit("inf-value", inf, inf_groups.worst_group, "finite decoded values",
         absl::StrCat(inf, " of ", n, " values are Inf (first at flat index ",
                      first_inf, ")", in_group(inf_groups, "Inf")),
         "an overflow: look at the scales (inf-scale, fp16-saturated-scale) "
         "and re-quantize from the source");
  }
  if (over_f16 > 0) {
    emit("fp16-saturated-scale", over_f16, -1,
         "decoded values within +-65504 (the largest float16)",
         absl::StrFormat("%d of %d decoded values would overflow fp16 (largest "
                         "|x| %g, first at flat index %d)",
                         over_f16, n, max_abs, first_over),
         "values, not scales: fine in bf16 or fp32; a model run in fp16 gets "
         "Inf here");
  }
  if (scale_nan.count > 0) {
    emit("nan-scale", scale_nan.count, scale_nan.worst_group,
         "finite block scales",
         absl::StrCat(scale_nan.count, " of ", groups_text,
                      " have a NaN scale (e.g. group ", scale_nan.worst_group,
                      ")"),
         "every value of such a block is NaN: re-quantize the tensor");
  }
  if (scale_inf.count > 0) {
    emit("inf-scale", scale_inf.count, scale_inf.worst_group,
         "finite block scales",
         absl::StrCat(scale_inf.count, " of ", groups_text,
                      " have an infinite scale (e.g. group ",
                      scale_inf.worst_group, ")"),
         "an fp16 overflow of the block scale: re-quantize the tensor");
  }
  if (scale_zero.count > 0) {
    emit("zero-scale", scale_zero.count, scale_zero.worst_group,
         "non-zero block scales",
         absl::StrCat(scale_zero.count, " of ", groups_text,
                      " have a zero scale, so one value each (e.g. group ",
                      scale_zero.worst_group, ")"),
         "harmless for blocks whose source was all zero; otherwise an "
         "underflow that erased the block");
  }
  if (all_zero.count > 0) {
    emit("all-zero-group", all_zero.count, all_zero.worst_group,
         "groups with at least one non-zero value",
         absl::StrCat(all_zero.count, " of ", groups_text,
                      " decode to all zeros (e.g. group ", all_zero.worst_group,
                      ")"),
         "compare with the source (tensormorph diff): pruned there, or lost "
         "here?");
  }
  if (constant.count > 0) {
    emit("constant-group", constant.count, constant.worst_group,
         "groups of more than one value",
         absl::StrCat(constant.count, " of ", groups_text,
                      " decode to one non-zero value (e.g. group ",
                      constant.worst_group, ")"),
         "the codes carry nothing: look at the group's scale and zero-point "
         "(tensormorph scalar)");
  }
  if (saturated.count > 0) {
    emit("saturated-group", saturated.count, saturated.worst_group,
         absl::StrFormat("at most %g%% of a group on its two end levels",
                         kSaturatedGroupFraction * 100),
         absl::StrFormat("%d of %s have more; worst group %d with %.1f%%",
                         saturated.count, groups_text, saturated.worst_group,
                         saturated.worst * 100),
         "the scale clips these groups: compare with the source "
         "(tensormorph diff, clipped)");
  }
  if (judge_dead) {
    int64_t used = 0;
    std::vector<int64_t> unused;
    for (int64_t k = 0; k < levels; ++k) {
      if (level_hist[k] > 0) {
        ++used;
      } else {
        unused.push_back(k);
      }
    }
    if (2 * static_cast<int64_t>(unused.size()) >= levels) {
      std::string list;
      for (size_t k = 0; k < unused.size() && k < 16; ++k) {
        absl::StrAppend(&list, k == 0 ? "" : " ", unused[k]);
      }
      if (unused.size() > 16) absl::StrAppend(&list, " ...");
      emit("dead-levels", static_cast<int64_t>(unused.size()), -1,
           absl::StrCat("most of the ", levels, " levels of a ", info.bits,
                        "-bit grid in use"),
           absl::StrCat(
               "only ", used, " of ", levels, " levels occur in ", n,
               " values; never used (level index from the lowest): ", list),
           absl::StrCat("the tensor carries about ",
                        static_cast<int>(
                            std::ceil(std::log2(std::max<int64_t>(used, 2)))),
                        " bits: check the scale and the bit width it was "
                        "packed at"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tensormorph
