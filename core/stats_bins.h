// The histogram's bins: the one expression that says which bin a value is
// in (Binner), and the same answer for a tensor's worth of values without a
// division each (BinEdges).
#ifndef TENSORMORPH_CORE_STATS_BINS_H_
#define TENSORMORPH_CORE_STATS_BINS_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/quant/decode_simd.h"

namespace tensormorph {

// The histogram's bin of a finite value: floor((v - min) / width), clamped
// to the bins in double before it becomes an int (a value 2^31 bins or more
// past the range must land in the end bin, not wrap), the same double
// expression whatever the caller. A NaN quotient (an infinite bound) is
// bin 0. Bin is monotonic in v: a subtraction, a division by a positive
// width, a floor and a clamp, each monotonic (BinEdges relies on it).
class Binner {
 public:
  // REQUIRES: bins >= 1.
  Binner(double min, double max, int bins)
      : min_(min), width_((max - min) / bins), bins_(bins) {}
  int Bin(float v) const {
    if (!(width_ > 0)) return 0;
    return Clamp(std::floor((v - min_) / width_));
  }
  // ++hist[Bin(v)] for each finite v of v[0, n).
  void Add(const float* v, int64_t n, int64_t* hist) const {
    for (int64_t i = 0; i < n; ++i) {
      if (std::isfinite(v[i])) ++hist[Bin(v[i])];
    }
  }
  double min() const { return min_; }
  double width() const { return width_; }
  int bins() const { return bins_; }
  // A finite min and a finite positive width: Bin is then a step function
  // of v with finite float edges (BinEdges).
  bool Exact() const {
    return std::isfinite(min_) && width_ > 0 && std::isfinite(width_);
  }

 private:
  int Clamp(double q) const {
    const double top = bins_ - 1;
    return q >= 0 ? static_cast<int>(q <= top ? q : top) : 0;
  }

  double min_, width_;
  int bins_;
};

// Binner's bins for a tensor's worth of values, by the floats where the
// bin changes, found once per histogram by bisection over Bin itself:
// lower(j), the least float whose bin is j or more. A value's bin is
// estimated in float arithmetic and then moved until lower(b) <= v <
// lower(b + 1), so every answer is Bin's, bit for bit; only the compares
// decide. The table is kept only where every estimate is within one bin
// (checked at each edge; the estimate is monotonic), so a walk is a step
// at most. A division and a floor in double per value bounded every
// histogram pass; with at most 64 bins the passes run sixteen values a
// step with AVX-512 (the edges in registers), eight with AVX2 (the bin
// taken from the estimate where its error bound reaches no edge, the walk
// elsewhere), and count bins by pairs of neighbours, one increment per
// two values. Where the table does not pay (fewer than 64 values a bin to
// come) or cannot be used (not Binner::Exact(), more than kMaxBins bins,
// a range float estimates too coarsely), every call is Binner's own.
//
// Thread safety: one thread (Add keeps scratch).
class BinEdges {
 public:
  static constexpr int kMaxBins = 4096;
  // `values`: about how many values will be binned; `simd`: the level to
  // use (ActiveDecodeSimd()). The same answers at every level.
  BinEdges(const Binner& binner, DecodeSimd simd, int64_t values);

  // Binner::Add: ++hist[Bin(v)] for each finite v of v[0, n); hist holds
  // binner.bins() counts. Allocates nothing (safe under the fault guard).
  void Add(const float* v, int64_t n, int64_t* hist) const;
  // For each of the 16 * runs values of v: out[i] = Binner::Bin(v[i])
  // where v[i] is finite, and bins() (one past the last bin) where it is
  // not, so that a caller may add every value's count into a histogram
  // with one spare entry, without a branch. Runs' 16 levels (ComputeStats'
  // pass by codes), a batch a call: the table is loaded into registers
  // once per call. REQUIRES: runs >= 1.
  void Bin16(const float* v, int32_t* out, int runs = 1) const;
  // Binner::Bin(v) of a finite v.
  int Bin(float v) const;

  // Which way Add and Bin16 go: "binner" (no table), "scalar", "avx2" or
  // "avx512". For tests, that the fast paths run where they should.
  const char* PathForTesting() const;

 private:
  enum class Path { kScalar, kAvx2, kAvx512 };
  int Estimate(float v) const;
  bool EstimatesNearEnough() const;
  int EdgeBin(float v) const;

  const Binner binner_;
  bool edges_ = false;  // the table is built and its estimates near enough
  Path path_ = Path::kScalar;
  int bins_ = 1;
  float min_ = 0, inv_width_ = 0;
  // lower_[j]: the least float of bin j or more (lower_[0] = -inf);
  // upper_[j] = lower_[j + 1] (upper_[bins - 1] = +inf). Padded to 64 for
  // the vector lookups.
  std::vector<float> lower_, upper_;
  // Add's pair counts (2 x 64 x 64), scratch for the vector paths.
  mutable std::vector<uint32_t> pairs_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_STATS_BINS_H_
