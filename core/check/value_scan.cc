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

namespace {

// The value rules over one tensor, as one object per call: Plan() decides
// how the tensor is read (piece size, levels to track, whole groups, ggml
// blocks or affine codes to mark), Scan() passes over it a piece at a time,
// and Report() turns the tallies into findings. State lives in members so
// that each rule is a small named step.
class ValueScan {
 public:
  ValueScan(const Checkpoint& ckpt, const LogicalTensor& t,
            const ValueScanOptions& o)
      : ckpt_(ckpt),
        t_(t),
        o_(o),
        n_(t.num_elements),
        enc_(*t.encoding),
        info_(enc_.info()),
        parts_(enc_.parts()),
        quantized_(info_.quantized),
        // ggml keeps its scales inside the blocks: a run's range is the only
        // view of them. Conventions store scales as tensors (scale_scan.h
        // reads them).
        block_scales_(quantized_ && info_.convention == "ggml"),
        // Values past fp16's range matter for decoded quantized values and
        // for floats wider than fp16; integers (position ids...) are not
        // weights.
        check_f16_(quantized_ ||
                   (!parts_.empty() && IsFloatStorage(parts_[0]->dtype))),
        judge_saturated_(o.saturated_groups &&
                         SaturatedGroupJudged(BoundOfEncoding(info_), info_)) {}

  // REQUIRES: t.num_elements > 0.
  absl::Status Plan();
  absl::Status Scan(const std::atomic<bool>* cancelled,
                    const std::function<void(int64_t)>& on_elements);
  void Report(std::vector<Finding>* out) const;

 private:
  // What the levels of an integer grid are (dead-levels) and whether runs
  // are cheap (evenly spaced levels).
  absl::Status PlanGrid();
  void PlanPiece();
  absl::Status PlanWholeGroups();
  void PlanBlocks();
  void PlanFloat16();

  // Whether whole groups may be marked instead of counted: not while
  // dead-levels still needs every value.
  bool MayMark() const { return !judge_dead_ || dead_decided_; }

  // One piece [first, first + m) by each of the three ways to pass it.
  absl::Status PassByBlocks(int64_t first, int64_t m);
  void MarkBlocksAhead(int64_t first, int64_t m);
  absl::Status PassByCodes(int64_t first);
  absl::Status ReadPiece(int64_t first, int64_t m);
  absl::Status PassDecoded(int64_t first, int64_t m);
  absl::Status PassRuns(int64_t first);

  absl::Status ProcessRun(const QuantRun& r, const float* v, int64_t at);
  // Decodes [at, at + count) run by run into `into` and processes each run.
  absl::Status DecodeAndProcess(int64_t at, int64_t count, float* into);
  void NoteSpecials(const RunCounts& c, const float* v, int64_t count,
                    int64_t at, bool f16);
  void CountLevels(const float* v, int64_t count, double lo, double hi);
  void Close(int64_t id, const GroupAcc& g);
  void CloseUntouched();

  void Emit(std::vector<Finding>* out, absl::string_view rule, int64_t count,
            int64_t worst_group, std::string expected, std::string actual,
            std::string hint) const;
  void ReportSpecials(std::vector<Finding>* out) const;
  void ReportScales(std::vector<Finding>* out) const;
  void ReportGroups(std::vector<Finding>* out) const;
  void ReportDeadLevels(std::vector<Finding>* out) const;

  const Checkpoint& ckpt_;
  const LogicalTensor& t_;
  const ValueScanOptions& o_;
  const int64_t n_;
  const Encoding& enc_;
  const EncodingInfo& info_;
  const std::vector<const StoredTensor*> parts_;
  const bool quantized_;
  const bool block_scales_;
  const bool check_f16_;
  const bool judge_saturated_;

  // Plan.
  int64_t levels_ = 0;
  ScalarInfo::Grid grid_ = ScalarInfo::Grid::kNone;
  bool judge_dead_ = false;
  bool runs_cheap_ = false;
  int64_t piece_ = 1;
  // Elements per group where every whole group has the same count: a run of
  // that many is a whole group, judged at once without entering `open_`.
  int64_t group_elems_ = 0;
  // ggml Q8_0 and Q4_K: the one part whose blocks are marked.
  const StoredTensor* blocks_ = nullptr;
  int64_t block_elems_ = 0, block_bytes_ = 0;
  // Conventions' integer codes marked by Encoding::AffineCodeRuns; off for
  // the tensor once the encoding answers UNIMPLEMENTED.
  bool by_codes_ = false;
  const float* stored_f32_ = nullptr;
  // A plain F16 or BF16 tensor: its codes in element order, and the
  // magnitude code from which a value is one NaN/Inf/fp16 would count.
  const uint8_t* stored16_ = nullptr;
  uint16_t special16_ = 0;

  // Buffers.
  std::vector<float> values_;
  std::vector<QuantRun> runs_;
  std::vector<int64_t> indices_, ids_;
  std::vector<uint8_t> ordinary_;
  std::vector<float> group_values_ = std::vector<float>(32);
  std::vector<QuantRun> group_runs_;
  Encoding::AffineCodes affine_;

  // Tallies.
  absl::flat_hash_map<int64_t, GroupAcc> open_;
  int64_t piece_no_ = 0;
  int64_t nan_ = 0, inf_ = 0, over_f16_ = 0;
  int64_t first_nan_ = -1, first_inf_ = -1, first_over_ = -1;
  double max_abs_ = 0;
  Tally nan_groups_, inf_groups_, all_zero_, constant_, saturated_;
  Tally scale_nan_, scale_inf_, scale_zero_;
  int64_t groups_seen_ = 0;
  std::vector<int64_t> level_hist_;
  int64_t levels_used_ = 0;
  bool dead_decided_ = false;  // more than half the levels occur: no finding
};

absl::Status ValueScan::Plan() {
  TM_RETURN_IF_ERROR(PlanGrid());
  PlanPiece();
  values_.resize(static_cast<size_t>(piece_));
  if (quantized_ && !runs_cheap_) {
    indices_.resize(values_.size());
    ids_.resize(values_.size());
  }
  TM_RETURN_IF_ERROR(PlanWholeGroups());
  PlanBlocks();
  by_codes_ = runs_cheap_ && !block_scales_ && group_elems_ > 1 &&
              info_.bits >= 1 && info_.bits <= 8 && HasAffineMarks();
  stored_f32_ = quantized_ ? nullptr : enc_.StoredF32();
  PlanFloat16();
  return absl::OkStatus();
}

// A plain F16 or BF16 tensor (every element a float code and nothing else:
// PlainFloatSteps) is read from its codes: a piece none of whose codes is
// special holds nothing the value rules count, and is not decoded; the
// rare piece that has one is decoded and counted as any other, so that the
// findings say the same.
void ValueScan::PlanFloat16() {
  if (quantized_ || parts_.size() != 1 || enc_.PlainFloatSteps() == nullptr ||
      parts_[0]->data.size() / 2 < static_cast<uint64_t>(n_)) {
    return;
  }
  if (parts_[0]->dtype == DType::kF16) {
    special16_ = kF16SpecialLimit;  // no F16 is past fp16
  } else if (parts_[0]->dtype == DType::kBF16) {
    special16_ = check_f16_ ? kBF16SpecialLimit : uint16_t{0x7f80};
  } else {
    return;
  }
  stored16_ = parts_[0]->data.data();
}

// dead-levels: integer grids of at most 8 bits (L levels), judged with
// enough elements that an unused level means something. Runs come from
// DecodeRuns where it is cheap (evenly spaced levels: a run per group
// segment); for codebooks and float codes it inspects every element, so
// there the values are decoded in bulk, the groups found by GroupIds, and
// each group's range inspected once.
absl::Status ValueScan::PlanGrid() {
  if (quantized_) {
    ScalarInfo s;
    TM_RETURN_IF_ERROR(GuardedRead([&] { return enc_.Inspect(0, &s); }));
    grid_ = s.grid;
    if (s.grid == ScalarInfo::Grid::kUniform && info_.bits <= 8) {
      const double l = s.grid_max - s.grid_min + 1;
      if (l >= 2 && l <= 256) levels_ = static_cast<int64_t>(l);
    }
  }
  judge_dead_ = levels_ > 0 && n_ / levels_ >= kDeadLevelsElementsPerLevel;
  level_hist_.assign(judge_dead_ ? levels_ : 0, 0);
  runs_cheap_ = grid_ == ScalarInfo::Grid::kUniform;
  return absl::OkStatus();
}

// Whole rows per piece where a row is shorter than a piece, one row up to
// max_piece_elements, else contiguous runs of the row.
void ValueScan::PlanPiece() {
  const int64_t cols =
      t_.shape.empty() ? 1 : std::max<int64_t>(1, t_.shape.back());
  int64_t piece = o_.piece_elements;
  if (cols <= o_.piece_elements) {
    piece = o_.piece_elements / cols * cols;
  } else if (cols <= o_.max_piece_elements) {
    piece = cols;
  }
  piece_ = std::max<int64_t>(1, std::min(piece, n_));
}

absl::Status ValueScan::PlanWholeGroups() {
  if (block_scales_ && !parts_.empty()) {
    const DTypeInfo& d = GetDTypeInfo(parts_[0]->dtype);
    group_elems_ = d.sub_block_elems > 1 ? d.sub_block_elems : d.block_elems;
  } else if (info_.group_size > 0 && !info_.act_order) {
    group_elems_ = info_.group_size;
  }
  if (group_elems_ <= 1 || !quantized_ || n_ <= group_elems_) {
    return absl::OkStatus();
  }
  // Held to the encoding's own ids: the first group_elems elements are one
  // group and the next starts another. Otherwise every run goes through
  // `open_`, which is right whatever the groups are.
  ScalarInfo a, b, c;
  TM_RETURN_IF_ERROR(GuardedRead([&]() -> absl::Status {
    TM_RETURN_IF_ERROR(enc_.Inspect(0, &a));
    TM_RETURN_IF_ERROR(enc_.Inspect(group_elems_ - 1, &b));
    return enc_.Inspect(group_elems_, &c);
  }));
  if (a.group != b.group || b.group == c.group) group_elems_ = 0;
  return absl::OkStatus();
}

// ggml Q8_0 and Q4_K: whole sub-blocks are marked from the blocks' bytes
// (block_marks.h), without decoding; only the others are decoded, one
// sub-block at a time, and go through ProcessRun. The tensor's elements are
// its one part's blocks in order.
void ValueScan::PlanBlocks() {
  if (!(runs_cheap_ && block_scales_ && group_elems_ == 32 &&
        parts_.size() == 1 && HasBlockMarks(parts_[0]->dtype))) {
    return;
  }
  const DTypeInfo& d = GetDTypeInfo(parts_[0]->dtype);
  if (d.block_elems > 0 && n_ % d.block_elems == 0 &&
      parts_[0]->data.size() / static_cast<uint64_t>(d.block_bytes) >=
          static_cast<uint64_t>(n_ / d.block_elems)) {
    blocks_ = parts_[0];
    block_elems_ = d.block_elems;
    block_bytes_ = d.block_bytes;
  }
}

absl::Status ValueScan::Scan(const std::atomic<bool>* cancelled,
                             const std::function<void(int64_t)>& on_elements) {
  for (int64_t first = 0; first < n_; first += piece_, ++piece_no_) {
    if (cancelled != nullptr && cancelled->load()) {
      return absl::CancelledError("cancelled");
    }
    const int64_t m = std::min(piece_, n_ - first);
    bool passed = false;
    if (blocks_ != nullptr && MayMark() && first % block_elems_ == 0 &&
        m % block_elems_ == 0) {
      TM_RETURN_IF_ERROR(GuardedRead([&] { return PassByBlocks(first, m); }));
      passed = true;
    } else if (by_codes_ && MayMark()) {
      absl::Status got =
          GuardedRead([&] { return enc_.AffineCodeRuns(first, m, &affine_); });
      if (absl::IsUnimplemented(got)) {
        by_codes_ = false;
      } else {
        TM_RETURN_IF_ERROR(got);
        TM_RETURN_IF_ERROR(GuardedRead([&] { return PassByCodes(first); }));
        passed = true;
      }
    }
    if (!passed && stored16_ != nullptr) {
      TM_RETURN_IF_ERROR(GuardedRead([&] {
        passed = !AnyFloat16Special(stored16_ + 2 * first, m, special16_);
        return absl::OkStatus();
      }));
    }
    if (!passed) {
      TM_RETURN_IF_ERROR(GuardedRead([&] { return ReadPiece(first, m); }));
      TM_RETURN_IF_ERROR(GuardedRead([&] { return PassDecoded(first, m); }));
    }
    if (on_elements) on_elements(m);
  }
  for (const auto& [id, g] : open_) Close(id, g);
  return absl::OkStatus();
}

// One piece by its blocks' marks: runs of marked sub-blocks only count,
// eight at a time; the others are decoded one sub-block at a time.
absl::Status ValueScan::PassByBlocks(int64_t first, int64_t m) {
  const int64_t subs = m / 32;
  ordinary_.resize(static_cast<size_t>(subs) + 8);
  MarkBlocksAhead(first, m);
  // Past the end: never eight marked in a row.
  std::memset(ordinary_.data() + subs, 0, 8);
  for (int64_t s = 0; s < subs;) {
    if (ordinary_[s] != 0) {
      int64_t e = s + 1;
      while (e + 8 <= subs) {
        uint64_t word;
        std::memcpy(&word, ordinary_.data() + e, 8);
        if (word != 0x0101010101010101u) break;
        e += 8;
      }
      while (e < subs && ordinary_[e] != 0) ++e;
      groups_seen_ += e - s;
      s = e;
      continue;
    }
    TM_RETURN_IF_ERROR(
        DecodeAndProcess(first + 32 * s, 32, group_values_.data()));
    ++s;
  }
  CloseUntouched();
  return absl::OkStatus();
}

// MarkOrdinaryBlocks over the piece's blocks a run at a time, the next run's
// cache lines asked for first: the marks read a block's bytes once and
// little else, and without the prefetch waited on memory for most of
// their time (the hardware prefetcher did not keep ahead of them).
void ValueScan::MarkBlocksAhead(int64_t first, int64_t m) {
  constexpr int64_t kRun = 64;  // blocks: 2-9 KiB
  const uint8_t* base =
      blocks_->data.data() + first / block_elems_ * block_bytes_;
  const int64_t nb = m / block_elems_, subs_per_block = block_elems_ / 32;
  for (int64_t b = 0; b < nb; b += kRun) {
    const int64_t ahead = std::clamp<int64_t>(nb - b - kRun, 0, kRun);
    const uint8_t* next = base + (b + kRun) * block_bytes_;
    for (int64_t o = 0; o < ahead * block_bytes_; o += 64) {
      __builtin_prefetch(next + o);
    }
    MarkOrdinaryBlocks(blocks_->dtype, base + b * block_bytes_,
                       std::min(kRun, nb - b),
                       ordinary_.data() + b * subs_per_block);
  }
}

// One piece by its affine codes (affine_): whole groups marked from their
// codes and each run's scale and bias, the others decoded run by run.
absl::Status ValueScan::PassByCodes(int64_t first) {
  const std::vector<QuantRun>& rs = affine_.runs;
  ordinary_.resize(rs.size());
  MarkOrdinaryAffineRuns(affine_, group_elems_, info_.bits, ordinary_.data());
  int64_t at = first;
  for (size_t k = 0; k < rs.size(); at += rs[k].count, ++k) {
    if (ordinary_[k] != 0) {
      ++groups_seen_;
      continue;
    }
    TM_RETURN_IF_ERROR(DecodeAndProcess(at, rs[k].count, values_.data()));
  }
  CloseUntouched();
  return absl::OkStatus();
}

absl::Status ValueScan::DecodeAndProcess(int64_t at, int64_t count,
                                         float* into) {
  TM_RETURN_IF_ERROR(enc_.DecodeRuns(at, count, into, &group_runs_));
  int64_t i = 0;
  for (const QuantRun& r : group_runs_) {
    TM_RETURN_IF_ERROR(ProcessRun(r, into + i, at + i));
    i += r.count;
  }
  return absl::OkStatus();
}

// Decodes the piece into values_ and, quantized, its runs into runs_: from
// DecodeRuns where runs are cheap, else from GroupIds. Float32 stored so is
// read in place (no copy to make).
absl::Status ValueScan::ReadPiece(int64_t first, int64_t m) {
  if (!quantized_) {
    return stored_f32_ != nullptr ? absl::OkStatus()
                                  : enc_.Decode(first, m, values_.data());
  }
  if (runs_cheap_) return enc_.DecodeRuns(first, m, values_.data(), &runs_);
  TM_RETURN_IF_ERROR(enc_.Decode(first, m, values_.data()));
  for (int64_t k = 0; k < m; ++k) indices_[k] = first + k;
  TM_RETURN_IF_ERROR(
      enc_.GroupIds(absl::MakeConstSpan(indices_.data(), m), ids_.data()));
  runs_.clear();
  for (int64_t k = 0; k < m; ++k) {
    if (runs_.empty() || runs_.back().group != ids_[k]) {
      runs_.push_back({0, ids_[k], 0, 0, 0, 0});
    }
    ++runs_.back().count;
  }
  return absl::OkStatus();
}

// The piece ReadPiece decoded. Under the guard, as Decode would be: a plain
// float32 tensor is read in place, and Inspect reads the mapping.
absl::Status ValueScan::PassDecoded(int64_t first, int64_t m) {
  if (!quantized_) {
    const float* v =
        stored_f32_ != nullptr ? stored_f32_ + first : values_.data();
    NoteSpecials(CountSpecials(v, m), v, m, first, check_f16_);
    return absl::OkStatus();
  }
  TM_RETURN_IF_ERROR(PassRuns(first));
  CloseUntouched();
  return absl::OkStatus();
}

absl::Status ValueScan::PassRuns(int64_t first) {
  int64_t i = 0;
  bool marked = false;
  for (size_t ri = 0; ri < runs_.size(); ++ri) {
    const QuantRun& r = runs_[ri];
    if (runs_cheap_ && group_elems_ > 1 && MayMark()) {
      // Whole groups are marked a piece at a time: one that no rule can
      // fire on (MarkOrdinaryRuns is sure of that) only counts as a group
      // seen, as ProcessRun would close it.
      if (!marked) {
        ordinary_.resize(runs_.size());
        MarkOrdinaryRuns(values_.data() + i, runs_.data() + ri,
                         static_cast<int64_t>(runs_.size() - ri), group_elems_,
                         ordinary_.data() + ri);
        marked = true;
      }
      if (ordinary_[ri] != 0) {
        // Eight marked runs at a time: each a whole group.
        size_t rj = ri + 1;
        while (rj + 8 <= runs_.size()) {
          uint64_t word;
          std::memcpy(&word, ordinary_.data() + rj, 8);
          if (word != 0x0101010101010101u) break;
          rj += 8;
        }
        groups_seen_ += static_cast<int64_t>(rj - ri);
        i += static_cast<int64_t>(rj - ri) * group_elems_;
        ri = rj - 1;
        continue;
      }
    }
    TM_RETURN_IF_ERROR(ProcessRun(r, values_.data() + i, first + i));
    i += r.count;
  }
  return absl::OkStatus();
}

// One run of values of group r.group: a whole group is judged at once, a
// part of one accumulates in open_.
absl::Status ValueScan::ProcessRun(const QuantRun& r, const float* v,
                                   int64_t at) {
  GroupAcc whole;
  GroupAcc* g = &whole;
  bool fresh = true;
  if (r.count != group_elems_) {
    auto [it, inserted] = open_.try_emplace(r.group);
    g = &it->second;
    fresh = inserted;
  }
  if (fresh) {
    g->first = v[0];
    g->lo = r.range_min;
    g->hi = r.range_max;
    if (!runs_cheap_) {
      ScalarInfo s;
      TM_RETURN_IF_ERROR(enc_.Inspect(at, &s));
      g->lo = s.range_min;
      g->hi = s.range_max;
    }
  }
  g->last_piece = piece_no_;
  g->count += r.count;
  const double lo = runs_cheap_ ? r.range_min : g->lo;
  const double hi = runs_cheap_ ? r.range_max : g->hi;
  if (std::isnan(lo) || std::isnan(hi)) {
    g->scale_nan |= block_scales_;
  } else if (std::isinf(lo) || std::isinf(hi)) {
    g->scale_inf |= block_scales_;
  } else if (lo == hi) {
    g->degenerate = true;
    g->scale_zero |= block_scales_;
  }
  const RunCounts c = CountRun(v, r.count, g->first, static_cast<float>(lo),
                               static_cast<float>(hi));
  g->nan += c.nan;
  g->inf += c.inf;
  g->zeros += c.zeros;
  g->constant &= c.differ == 0;
  g->at_low += c.at_low;
  g->at_high += c.at_high;
  NoteSpecials(c, v, r.count, at, /*f16=*/true);
  if (judge_dead_ && !dead_decided_ && !g->degenerate &&
      std::isfinite(hi - lo)) {
    CountLevels(v, r.count, lo, hi);
  }
  if (g == &whole) Close(r.group, whole);
  return absl::OkStatus();
}

// Where the first NaN, Inf and value past fp16 are: found again only in the
// runs that hold one (the counts are branch-free).
void ValueScan::NoteSpecials(const RunCounts& c, const float* v, int64_t count,
                             int64_t at, bool f16) {
  if (c.nan > 0 && nan_ == 0) first_nan_ = at + FirstOf(v, count, IsNan);
  if (c.inf > 0 && inf_ == 0) first_inf_ = at + FirstOf(v, count, IsInf);
  nan_ += c.nan;
  inf_ += c.inf;
  if (!f16 || c.over == 0) return;
  if (over_f16_ == 0) first_over_ = at + FirstOf(v, count, IsOverF16);
  over_f16_ += c.over;
  for (int64_t k = 0; k < count; ++k) {
    if (IsOverF16(v[k])) max_abs_ = std::max(max_abs_, std::fabs(double{v[k]}));
  }
}

// Level index from the lowest level; only until more than half the levels
// have occurred, when the rule can no longer fire.
void ValueScan::CountLevels(const float* v, int64_t count, double lo,
                            double hi) {
  const double inv = (levels_ - 1) / (hi - lo);
  for (int64_t k = 0; k < count; ++k) {
    const double x = (v[k] - lo) * inv + 0.5;
    if (!(x >= 0 && x < static_cast<double>(levels_))) continue;
    int64_t& h = level_hist_[static_cast<size_t>(x)];
    if (h++ == 0 && 2 * ++levels_used_ > levels_) {
      dead_decided_ = true;
      return;
    }
  }
}

void ValueScan::Close(int64_t id, const GroupAcc& g) {
  ++groups_seen_;
  if (g.nan > 0) nan_groups_.Add(0, id, static_cast<double>(g.nan));
  if (g.inf > 0) inf_groups_.Add(0, id, static_cast<double>(g.inf));
  if (g.scale_nan) scale_nan_.Add(1, id, 0);
  if (g.scale_inf) scale_inf_.Add(1, id, 0);
  if (g.scale_zero) scale_zero_.Add(1, id, 0);
  if (g.count >= 2 && g.zeros == g.count) {
    all_zero_.Add(1, id, 0);
  } else if (g.count >= 2 && g.constant && g.nan == 0 && g.inf == 0) {
    constant_.Add(1, id, 0);
  }
  if (judge_saturated_ && info_.bits >= kSaturatedGroupMinBits &&
      g.count >= kSaturatedGroupMinElements && !g.degenerate) {
    // A min/max quantizer puts the group's own min and max on its end
    // levels, and a one-sided outlier stretches the scale so that the bulk
    // rounds to the other end: clipping fills both ends.
    const double frac = static_cast<double>(g.at_low + g.at_high) / g.count;
    if (g.at_low > 1 && g.at_high > 1 && frac > kSaturatedGroupFraction) {
      saturated_.Add(1, id, frac);
    }
  }
}

// A group a piece did not touch is complete: pieces are whole rows (or one
// row, or contiguous runs of a long 1-D tensor), and a group covers a
// contiguous band of rows, touching each of them.
void ValueScan::CloseUntouched() {
  for (auto it = open_.begin(); it != open_.end();) {
    if (it->second.last_piece != piece_no_) {
      Close(it->first, it->second);
      open_.erase(it++);
    } else {
      ++it;
    }
  }
}

std::string InGroup(const Tally& tally, absl::string_view what) {
  return tally.worst_group < 0
             ? std::string()
             : absl::StrCat("; most in group ", tally.worst_group, " (",
                            static_cast<int64_t>(tally.worst), " ", what, ")");
}

void ValueScan::Emit(std::vector<Finding>* out, absl::string_view rule,
                     int64_t count, int64_t worst_group, std::string expected,
                     std::string actual, std::string hint) const {
  const CheckRule* r = FindCheckRule(rule);
  Finding f;
  f.rule = std::string(rule);
  f.severity = r != nullptr ? r->severity : Severity::kError;
  f.tensor = t_.name;
  f.file = FileOfTensor(ckpt_, t_);
  f.expected = std::move(expected);
  f.actual = std::move(actual);
  f.hint = std::move(hint);
  f.count = count;
  f.worst_group = worst_group;
  out->push_back(std::move(f));
}

void ValueScan::Report(std::vector<Finding>* out) const {
  ReportSpecials(out);
  ReportScales(out);
  ReportGroups(out);
  ReportDeadLevels(out);
}

// A quantized tensor's NaN or Inf came from its decode (a scale, an
// overflow): an error. A plain tensor stores its NaN and Inf as they are,
// maybe on purpose (masks, test data): a warning of its own rule.
void ValueScan::ReportSpecials(std::vector<Finding>* out) const {
  if (nan_ > 0) {
    Emit(out, quantized_ ? "nan-value" : "nan-stored-value", nan_,
         nan_groups_.worst_group,
         quantized_ ? "finite decoded values" : "finite stored values",
         absl::StrCat(nan_, " of ", n_, " values are NaN (first at flat index ",
                      first_nan_, ")", InGroup(nan_groups_, "NaN")),
         quantized_ ? "look at the group's scale (tensormorph scalar) and at "
                      "the nan-scale findings; re-quantize from the source"
                    : "the stored values are NaN: re-export the tensor from "
                      "its source unless they are meant (a mask, test data)");
  }
  if (inf_ > 0) {
    Emit(out, quantized_ ? "inf-value" : "inf-stored-value", inf_,
         inf_groups_.worst_group,
         quantized_ ? "finite decoded values" : "finite stored values",
         absl::StrCat(inf_, " of ", n_, " values are Inf (first at flat index ",
                      first_inf_, ")", InGroup(inf_groups_, "Inf")),
         quantized_ ? "an overflow: look at the scales (inf-scale, "
                      "fp16-saturated-scale) and re-quantize from the source"
                    : "the stored values are Inf: re-export the tensor from "
                      "its source unless they are meant (a mask of -Inf)");
  }
  if (over_f16_ > 0) {
    Emit(out, "fp16-saturated-scale", over_f16_, -1,
         "decoded values within +-65504 (the largest float16)",
         absl::StrFormat("%d of %d decoded values would overflow fp16 (largest "
                         "|x| %g, first at flat index %d)",
                         over_f16_, n_, max_abs_, first_over_),
         "values, not scales: fine in bf16 or fp32; a model run in fp16 gets "
         "Inf here");
  }
}

void ValueScan::ReportScales(std::vector<Finding>* out) const {
  const std::string groups_text = absl::StrCat(groups_seen_, " groups");
  if (scale_nan_.count > 0) {
    Emit(out, "nan-scale", scale_nan_.count, scale_nan_.worst_group,
         "finite block scales",
         absl::StrCat(scale_nan_.count, " of ", groups_text,
                      " have a NaN scale (e.g. group ", scale_nan_.worst_group,
                      ")"),
         "every value of such a block is NaN: re-quantize the tensor");
  }
  if (scale_inf_.count > 0) {
    Emit(out, "inf-scale", scale_inf_.count, scale_inf_.worst_group,
         "finite block scales",
         absl::StrCat(scale_inf_.count, " of ", groups_text,
                      " have an infinite scale (e.g. group ",
                      scale_inf_.worst_group, ")"),
         "an fp16 overflow of the block scale: re-quantize the tensor");
  }
  if (scale_zero_.count > 0) {
    Emit(out, "zero-scale", scale_zero_.count, scale_zero_.worst_group,
         "non-zero block scales",
         absl::StrCat(scale_zero_.count, " of ", groups_text,
                      " have a zero scale, so one value each (e.g. group ",
                      scale_zero_.worst_group, ")"),
         "harmless for blocks whose source was all zero; otherwise an "
         "underflow that erased the block");
  }
}

void ValueScan::ReportGroups(std::vector<Finding>* out) const {
  const std::string groups_text = absl::StrCat(groups_seen_, " groups");
  if (all_zero_.count > 0) {
    Emit(out, "all-zero-group", all_zero_.count, all_zero_.worst_group,
         "groups with at least one non-zero value",
         absl::StrCat(all_zero_.count, " of ", groups_text,
                      " decode to all zeros (e.g. group ",
                      all_zero_.worst_group, ")"),
         "compare with the source (tensormorph diff): pruned there, or lost "
         "here?");
  }
  if (constant_.count > 0) {
    Emit(out, "constant-group", constant_.count, constant_.worst_group,
         "groups of more than one value",
         absl::StrCat(constant_.count, " of ", groups_text,
                      " decode to one non-zero value (e.g. group ",
                      constant_.worst_group, ")"),
         "the codes carry nothing: look at the group's scale and zero-point "
         "(tensormorph scalar)");
  }
  if (saturated_.count > 0) {
    Emit(out, "saturated-group", saturated_.count, saturated_.worst_group,
         absl::StrFormat("at most %g%% of a group on its two end levels",
                         kSaturatedGroupFraction * 100),
         absl::StrFormat("%d of %s have more; worst group %d with %.1f%%",
                         saturated_.count, groups_text, saturated_.worst_group,
                         saturated_.worst * 100),
         "many values at the group's end levels: the scale may clip; only "
         "the source can tell (tensormorph diff, clipped; check --source)");
  }
}

void ValueScan::ReportDeadLevels(std::vector<Finding>* out) const {
  if (!judge_dead_ || dead_decided_) return;
  int64_t used = 0;
  std::vector<int64_t> unused;
  for (int64_t k = 0; k < levels_; ++k) {
    if (level_hist_[k] > 0) {
      ++used;
    } else {
      unused.push_back(k);
    }
  }
  if (2 * static_cast<int64_t>(unused.size()) < levels_) return;
  std::string list;
  for (size_t k = 0; k < unused.size() && k < 16; ++k) {
    absl::StrAppend(&list, k == 0 ? "" : " ", unused[k]);
  }
  if (unused.size() > 16) absl::StrAppend(&list, " ...");
  Emit(
      out, "dead-levels", static_cast<int64_t>(unused.size()), -1,
      absl::StrCat("most of the ", levels_, " levels of a ", info_.bits,
                   "-bit grid in use"),
      absl::StrCat("only ", used, " of ", levels_, " levels occur in ", n_,
                   " values; never used (level index from the lowest): ", list),
      absl::StrCat(
          "the tensor carries about ",
          static_cast<int>(std::ceil(std::log2(std::max<int64_t>(used, 2)))),
          " bits: check the scale and the bit width it was packed at"));
}

}  // namespace

absl::Status ScanTensorValues(const Checkpoint& ckpt, const LogicalTensor& t,
                              const ValueScanOptions& o,
                              const std::atomic<bool>* cancelled,
                              const std::function<void(int64_t)>& on_elements,
                              std::vector<Finding>* out) {
  if (t.num_elements == 0) return absl::OkStatus();
  ValueScan scan(ckpt, t, o);
  TM_RETURN_IF_ERROR(scan.Plan());
  TM_RETURN_IF_ERROR(scan.Scan(cancelled, on_elements));
  scan.Report(out);
  return absl::OkStatus();
}

}  // namespace tensormorph
