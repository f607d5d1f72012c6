#include "core/check/value_scan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/check/block_marks.h"
#include "core/check/rules.h"
#include "core/check/run_counts.h"
#include "core/dtype.h"
#include "core/io/fault_guard.h"
#include "core/quant/rounding_bound.h"
#include "core/quant/scalar_info.h"
#include "core/util/status_macros.h"

namespace tensormorph {
namespace {

// What a group's elements have shown so far.
struct GroupAcc {
  int64_t count = 0, zeros = 0, nan = 0, inf = 0, at_low = 0, at_high = 0;
  float first = 0;
  bool constant = true;
  bool degenerate = false;  // its range is one value (a zero scale)
  bool scale_nan = false, scale_inf = false, scale_zero = false;
  double lo = 0, hi = 0;  // the group's range (its end levels)
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

bool IsNan(float x) { return x != x; }
bool IsInf(float x) {
  return std::fabs(x) == std::numeric_limits<float>::infinity();
}
bool IsOverF16(float x) {
  const float a = std::fabs(x);
  return a > static_cast<float>(kF16Max) && !IsInf(x);
}

template <typename Pred>
int64_t FirstOf(const float* v, int64_t n, Pred pred) {
  for (int64_t k = 0; k < n; ++k) {
    if (pred(v[k])) return k;
  }
  return 0;
}

}  // namespace

std::string FileOfTensor(const Checkpoint& ckpt, const LogicalTensor& t) {
  std::vector<const StoredTensor*> parts = t.encoding->parts();
  if (parts.empty()) return "";
  return ckpt.files()[parts[0]->file_index].path;
}

bool SaturatedGroupJudged(const RoundingBound& bound,
                          const EncodingInfo& info) {
  // A range that is the group's own min and max, which a correct
  // round-to-nearest quantizer of a Clip::kNone format writes, holds every
  // source value within half a step of its ends: whatever piles up there is
  // the source's own. Error feedback (GPTQ) moves later columns past the
  // range it set, so it may clip.
  return info.quantized &&
         !(bound.clip == RoundingBound::Clip::kNone &&
           bound.codes == RoundingBound::Codes::kNearest && !info.symmetric);
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
  ScalarInfo::Grid grid = ScalarInfo::Grid::kNone;
  if (quantized) {
    ScalarInfo s;
    absl::Status st = GuardedRead([&] { return enc.Inspect(0, &s); });
    if (!st.ok()) return st;
    grid = s.grid;
    if (s.grid == ScalarInfo::Grid::kUniform && info.bits <= 8) {
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
  const bool judge_saturated =
      o.saturated_groups && SaturatedGroupJudged(BoundOfEncoding(info), info);

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
    if (judge_saturated && info.bits >= kSaturatedGroupMinBits &&
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

  int64_t levels_used = 0;
  bool dead_decided = false;  // more than half the levels occur: no finding
  // Where the first NaN, Inf and value past fp16 are: found again only in
  // the runs that hold one (the counts are branch-free).
  auto note_specials = [&](const RunCounts& c, const float* v, int64_t count,
                           int64_t at, bool f16) {
    if (c.nan > 0 && nan == 0) first_nan = at + FirstOf(v, count, IsNan);
    if (c.inf > 0 && inf == 0) first_inf = at + FirstOf(v, count, IsInf);
    nan += c.nan;
    inf += c.inf;
    if (!f16 || c.over == 0) return;
    if (over_f16 == 0) first_over = at + FirstOf(v, count, IsOverF16);
    over_f16 += c.over;
    for (int64_t k = 0; k < count; ++k) {
      if (IsOverF16(v[k])) max_abs = std::max(max_abs, std::fabs(double{v[k]}));
    }
  };
  // Runs come from DecodeRuns where it is cheap (evenly spaced levels: a
  // run per group segment); for codebooks and float codes it inspects every
  // element, so there the values are decoded in bulk, the groups found by
  // GroupIds, and each group's range inspected once.
  const bool runs_cheap = grid == ScalarInfo::Grid::kUniform;
  std::vector<int64_t> indices, ids;
  if (quantized && !runs_cheap) {
    indices.resize(values.size());
    ids.resize(values.size());
  }
  // Elements per group where every whole group has the same count: a run of
  // that many is a whole group, judged at once without entering `open`.
  int64_t group_elems = 0;
  if (block_scales && !parts.empty()) {
    const DTypeInfo& d = GetDTypeInfo(parts[0]->dtype);
    group_elems = d.sub_block_elems > 1 ? d.sub_block_elems : d.block_elems;
  } else if (info.group_size > 0 && !info.act_order) {
    group_elems = info.group_size;
  }
  if (group_elems > 1 && quantized && n > group_elems) {
    // Held to the encoding's own ids: the first group_elems elements are
    // one group and the next starts another. Otherwise every run goes
    // through `open`, which is right whatever the groups are.
    ScalarInfo a, b, c;
    absl::Status st = GuardedRead([&]() -> absl::Status {
      TM_RETURN_IF_ERROR(enc.Inspect(0, &a));
      TM_RETURN_IF_ERROR(enc.Inspect(group_elems - 1, &b));
      return enc.Inspect(group_elems, &c);
    });
    if (!st.ok()) return st;
    if (a.group != b.group || b.group == c.group) group_elems = 0;
  }

  // One run of values of group r.group.
  auto process_run = [&](const QuantRun& r, const float* v, int64_t at,
                         int64_t piece_no) -> absl::Status {
    GroupAcc whole;
    GroupAcc* g = &whole;
    bool fresh = true;
    if (r.count != group_elems) {
      auto [it, inserted] = open.try_emplace(r.group);
      g = &it->second;
      fresh = inserted;
    }
    if (fresh) {
      g->first = v[0];
      g->lo = r.range_min;
      g->hi = r.range_max;
      if (!runs_cheap) {
        ScalarInfo s;
        if (absl::Status e = enc.Inspect(at, &s); !e.ok()) return e;
        g->lo = s.range_min;
        g->hi = s.range_max;
      }
    }
    g->last_piece = piece_no;
    g->count += r.count;
    const double lo = runs_cheap ? r.range_min : g->lo;
    const double hi = runs_cheap ? r.range_max : g->hi;
    if (std::isnan(lo) || std::isnan(hi)) {
      g->scale_nan |= block_scales;
    } else if (std::isinf(lo) || std::isinf(hi)) {
      g->scale_inf |= block_scales;
    } else if (lo == hi) {
      g->degenerate = true;
      g->scale_zero |= block_scales;
    }
    const RunCounts c = CountRun(v, r.count, g->first, static_cast<float>(lo),
                                 static_cast<float>(hi));
    g->nan += c.nan;
    g->inf += c.inf;
    g->zeros += c.zeros;
    g->constant &= c.differ == 0;
    g->at_low += c.at_low;
    g->at_high += c.at_high;
    note_specials(c, v, r.count, at, /*f16=*/true);
    if (judge_dead && !dead_decided && !g->degenerate &&
        std::isfinite(hi - lo)) {
      // Level index from the lowest level; only until more than half the
      // levels have occurred, when the rule can no longer fire.
      const double inv = (levels - 1) / (hi - lo);
      for (int64_t k = 0; k < r.count; ++k) {
        const double x = (v[k] - lo) * inv + 0.5;
        if (!(x >= 0 && x < static_cast<double>(levels))) continue;
        int64_t& h = level_hist[static_cast<size_t>(x)];
        if (h++ == 0 && 2 * ++levels_used > levels) {
          dead_decided = true;
          break;
        }
      }
    }
    if (g == &whole) close(r.group, whole);
    return absl::OkStatus();
  };

  const float* stored_f32 = quantized ? nullptr : enc.StoredF32();
  std::vector<uint8_t> ordinary;
  // ggml Q8_0 and Q4_K: whole sub-blocks are marked from the blocks' bytes
  // (block_marks.h), without decoding; only the others are decoded, one
  // sub-block at a time, and go through process_run. The tensor's elements
  // are its one part's blocks in order.
  const StoredTensor* blocks = nullptr;
  int64_t block_elems = 0, block_bytes = 0;
  if (runs_cheap && block_scales && group_elems == 32 && parts.size() == 1 &&
      HasBlockMarks(parts[0]->dtype)) {
    const DTypeInfo& d = GetDTypeInfo(parts[0]->dtype);
    if (d.block_elems > 0 && n % d.block_elems == 0 &&
        parts[0]->data.size() / static_cast<uint64_t>(d.block_bytes) >=
            static_cast<uint64_t>(n / d.block_elems)) {
      blocks = parts[0];
      block_elems = d.block_elems;
      block_bytes = d.block_bytes;
    }
  }
  std::vector<float> group_values(32);
  std::vector<QuantRun> group_runs;
  // Conventions' integer codes (GPTQ, AWQ, compressed-tensors int): whole
  // groups marked from their codes and each run's scale and bias
  // (Encoding::AffineCodeRuns), the others decoded run by run; off for the
  // tensor once the encoding answers UNIMPLEMENTED.
  bool by_codes = runs_cheap && !block_scales && group_elems > 1 &&
                  info.bits >= 1 && info.bits <= 8 && HasAffineMarks();
  Encoding::AffineCodes affine;
  auto pass_by_codes = [&](int64_t first, int64_t piece_no) -> absl::Status {
    const std::vector<QuantRun>& rs = affine.runs;
    ordinary.resize(rs.size());
    MarkOrdinaryAffineRuns(affine, group_elems, info.bits, ordinary.data());
    int64_t at = first;
    for (size_t k = 0; k < rs.size(); at += rs[k].count, ++k) {
      if (ordinary[k] != 0) {
        ++groups_seen;
        continue;
      }
      TM_RETURN_IF_ERROR(
          enc.DecodeRuns(at, rs[k].count, values.data(), &group_runs));
      int64_t i = 0;
      for (const QuantRun& r : group_runs) {
        TM_RETURN_IF_ERROR(process_run(r, values.data() + i, at + i, piece_no));
        i += r.count;
      }
    }
    return absl::OkStatus();
  };
  // One piece by its blocks' marks.
  auto pass_by_blocks = [&](int64_t first, int64_t m,
                            int64_t piece_no) -> absl::Status {
    const int64_t subs = m / 32;
    ordinary.resize(static_cast<size_t>(subs) + 8);
    MarkOrdinaryBlocks(blocks->dtype,
                       blocks->data.data() + first / block_elems * block_bytes,
                       m / block_elems, ordinary.data());
    // Past the end: never eight marked in a row.
    std::memset(ordinary.data() + subs, 0, 8);
    for (int64_t s = 0; s < subs;) {
      if (ordinary[s] != 0) {
        int64_t e = s + 1;
        while (e + 8 <= subs) {
          uint64_t word;
          std::memcpy(&word, ordinary.data() + e, 8);
          if (word != 0x0101010101010101u) break;
          e += 8;
        }
        while (e < subs && ordinary[e] != 0) ++e;
        groups_seen += e - s;
        s = e;
        continue;
      }
      const int64_t at = first + 32 * s;
      TM_RETURN_IF_ERROR(
          enc.DecodeRuns(at, 32, group_values.data(), &group_runs));
      int64_t k = 0;
      for (const QuantRun& r : group_runs) {
        TM_RETURN_IF_ERROR(
            process_run(r, group_values.data() + k, at + k, piece_no));
        k += r.count;
      }
      ++s;
    }
    return absl::OkStatus();
  };
  // A group a piece did not touch is complete: pieces are whole rows (or
  // one row, or contiguous runs of a long 1-D tensor), and a group covers a
  // contiguous band of rows, touching each of them.
  auto close_untouched = [&](int64_t piece_no) {
    for (auto it = open.begin(); it != open.end();) {
      if (it->second.last_piece != piece_no) {
        close(it->first, it->second);
        open.erase(it++);
      } else {
        ++it;
      }
    }
  };
  int64_t piece_no = 0;
  for (int64_t first = 0; first < n; first += piece, ++piece_no) {
    if (cancelled != nullptr && cancelled->load())
      return absl::CancelledError("cancelled");
    const int64_t m = std::min(piece, n - first);
    if (blocks != nullptr && (!judge_dead || dead_decided) &&
        first % block_elems == 0 && m % block_elems == 0) {
      absl::Status pass =
          GuardedRead([&] { return pass_by_blocks(first, m, piece_no); });
      if (!pass.ok()) return pass;
      close_untouched(piece_no);
      if (on_elements) on_elements(m);
      continue;
    }
    if (by_codes && (!judge_dead || dead_decided)) {
      absl::Status got =
          GuardedRead([&] { return enc.AffineCodeRuns(first, m, &affine); });
      if (absl::IsUnimplemented(got)) {
        by_codes = false;
      } else if (!got.ok()) {
        return got;
      } else {
        absl::Status pass =
            GuardedRead([&] { return pass_by_codes(first, piece_no); });
        if (!pass.ok()) return pass;
        close_untouched(piece_no);
        if (on_elements) on_elements(m);
        continue;
      }
    }
    absl::Status read = GuardedRead([&]() -> absl::Status {
      if (!quantized) {
        return stored_f32 != nullptr ? absl::OkStatus()
                                     : enc.Decode(first, m, values.data());
      }
      if (runs_cheap) return enc.DecodeRuns(first, m, values.data(), &runs);
      if (absl::Status s = enc.Decode(first, m, values.data()); !s.ok())
        return s;
      for (int64_t k = 0; k < m; ++k) indices[k] = first + k;
      if (absl::Status s =
              enc.GroupIds(absl::MakeConstSpan(indices.data(), m), ids.data());
          !s.ok()) {
        return s;
      }
      runs.clear();
      for (int64_t k = 0; k < m; ++k) {
        if (runs.empty() || runs.back().group != ids[k]) {
          runs.push_back({0, ids[k], 0, 0, 0, 0});
        }
        ++runs.back().count;
      }
      return absl::OkStatus();
    });
    if (!read.ok()) return read;
    if (!quantized) {
      // Float32 is read in place where it is stored so (no copy to make);
      // under the guard, as Decode would be.
      absl::Status pass = GuardedRead([&]() -> absl::Status {
        const float* v =
            stored_f32 != nullptr ? stored_f32 + first : values.data();
        note_specials(CountSpecials(v, m), v, m, first, check_f16);
        return absl::OkStatus();
      });
      if (!pass.ok()) return pass;
    } else {
      // Inspect reads the mapping: under the guard with the rest.
      absl::Status pass = GuardedRead([&]() -> absl::Status {
        int64_t i = 0;
        bool marked = false;
        for (size_t ri = 0; ri < runs.size(); ++ri) {
          const QuantRun& r = runs[ri];
          if (runs_cheap && group_elems > 1 && (!judge_dead || dead_decided)) {
            // Whole groups are marked a piece at a time: one that no rule
            // can fire on (MarkOrdinaryRuns is sure of that) only counts as
            // a group seen, as process_run would close it.
            if (!marked) {
              ordinary.resize(runs.size());
              MarkOrdinaryRuns(values.data() + i, runs.data() + ri,
                               static_cast<int64_t>(runs.size() - ri),
                               group_elems, ordinary.data() + ri);
              marked = true;
            }
            if (ordinary[ri] != 0) {
              // Eight marked runs at a time: each a whole group.
              size_t rj = ri + 1;
              while (rj + 8 <= runs.size()) {
                uint64_t word;
                std::memcpy(&word, ordinary.data() + rj, 8);
                if (word != 0x0101010101010101u) break;
                rj += 8;
              }
              groups_seen += static_cast<int64_t>(rj - ri);
              i += static_cast<int64_t>(rj - ri) * group_elems;
              ri = rj - 1;
              continue;
            }
          }
          if (absl::Status s =
                  process_run(r, values.data() + i, first + i, piece_no);
              !s.ok()) {
            return s;
          }
          i += r.count;
        }
        return absl::OkStatus();
      });
      if (!pass.ok()) return pass;
      close_untouched(piece_no);
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
  // A quantized tensor's NaN or Inf came from its decode (a scale, an
  // overflow): an error. A plain tensor stores its NaN and Inf as they are,
  // maybe on purpose (masks, test data): a warning of its own rule.
  if (nan > 0) {
    emit(quantized ? "nan-value" : "nan-stored-value", nan,
         nan_groups.worst_group,
         quantized ? "finite decoded values" : "finite stored values",
         absl::StrCat(nan, " of ", n, " values are NaN (first at flat index ",
                      first_nan, ")", in_group(nan_groups, "NaN")),
         quantized ? "look at the group's scale (tensormorph scalar) and at "
                     "the nan-scale findings; re-quantize from the source"
                   : "the stored values are NaN: re-export the tensor from "
                     "its source unless they are meant (a mask, test data)");
  }
  if (inf > 0) {
    emit(quantized ? "inf-value" : "inf-stored-value", inf,
         inf_groups.worst_group,
         quantized ? "finite decoded values" : "finite stored values",
         absl::StrCat(inf, " of ", n, " values are Inf (first at flat index ",
                      first_inf, ")", in_group(inf_groups, "Inf")),
         quantized ? "an overflow: look at the scales (inf-scale, "
                     "fp16-saturated-scale) and re-quantize from the source"
                   : "the stored values are Inf: re-export the tensor from "
                     "its source unless they are meant (a mask of -Inf)");
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
         "many values at the group's end levels: the scale may clip; only "
         "the source can tell (tensormorph diff, clipped; check --source)");
  }
  if (judge_dead && !dead_decided) {
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
