// The error pass of a diff whose quantized side is a plain float (F32, F16,
// BF16, FP8 e4m3/e5m2 stored as such): every element is a level of its own,
// its steps the gaps to the neighbouring floats. Those gaps depend on the
// decoded value's sign, float32 exponent and whether it is a power of two
// alone (FloatStepTable's key), so the run an element forms (its steps,
// bound and limits) is built once per key and tensor and looked up by value.
// Runs of one element, each inspected and bounded on its own, made such a
// diff some 25 times slower than an int8 one (issue 35).
// A scalar reference and AVX-512 and AVX2 paths chosen at run time; tests hold
// the fast paths to the reference, bit for bit.
#ifndef TENSORMORPH_CORE_DIFF_FLOAT_RUNS_H_
#define TENSORMORPH_CORE_DIFF_FLOAT_RUNS_H_

#include <bit>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/diff/error_pass.h"
#include "core/quant/encoding.h"
#include "core/quant/rounding_bound.h"

namespace tensormorph {

class FloatRuns {
 public:
  static constexpr int kKeys = 1024;
  // As FloatStepTable::KeyOf: float32 sign and exponent, and whether the
  // mantissa is zero (a power of two, where the step below is finer).
  static uint32_t KeyOf(float v) {
    const uint32_t b = std::bit_cast<uint32_t>(v);
    return (b >> 23) << 1 | ((b & 0x7fffffu) == 0 ? 1u : 0u);
  }

  // The runs of `quant`'s elements when it is a plain float of one of the
  // formats above whose steps are a function of the key (checked on every
  // code of the 8- and 16-bit formats, on representatives of every key for
  // F32) and never both zero, and `bound` (quant's) adds no per-group term
  // (no stored-scale rounding, offset or clipping): each key's run is then
  // {1, -1, its steps, the format's range} bounded as DiffTensor bounds a run
  // (ApplyBound, then WidenForSourceRounding(source_rel, source_f16) when the
  // bound has float_codes). nullptr otherwise: the caller takes DecodeRuns.
  static std::unique_ptr<FloatRuns> For(const Encoding& quant,
                                        const RoundingBound& bound,
                                        double source_rel, bool source_f16);

  const QuantRun& run(uint32_t key) const { return runs_[key]; }
  const RunLimits& limits(uint32_t key) const { return limits_[key]; }
  double interior(uint32_t key) const { return interior_[key]; }

  // The vector path's view: per key and side (2 * key + 1 when the source
  // lies above the decoded value) the step and its reciprocal towards the
  // source; per key the slack and clip limits; what every key shares.
  struct Columns {
    std::vector<double> step, inv;                  // 2 * kKeys
    std::vector<double> slack, hi, lo, interior;    // kKeys
    double bound = 0.5, slack_rel = 0, origin = 0;  // every key's
    // The same a side in one cache line, for the AVX2 path: two loads per
    // element and a transpose cost it less than six four-lane gathers.
    struct alignas(64) Side {
      double step, inv, slack, interior, hi, lo;
    };
    std::vector<Side> sides;  // 2 * kKeys
  };
  const Columns& columns() const { return columns_; }

 private:
  FloatRuns() = default;
  void Fill(const double* below, const double* above, double range_min,
            double range_max, const RoundingBound& bound, double source_rel,
            bool source_f16);

  std::vector<QuantRun> runs_;
  std::vector<RunLimits> limits_;
  std::vector<double> interior_;
  Columns columns_;
};

// Adds elements [0, m) of a plain float chunk: element i, decoded values[i]
// against source x[i], is run t.run(KeyOf(values[i])) (with its limits), as
// AccumulateErrors' scalar reference adds an element, except that the chunk
// is one run for the sums: its first m - m % 4 elements go to four partial
// sums (element i into partial i % 4), added to `sums` at the end as
// (p0 + p1) + (p2 + p3); the rest go straight to `sums` in order. Writes
// each error in steps to err_steps[0, m); raises *bound_steps to each
// element's InteriorBoundSteps. `first` is the flat index of element 0.
// The result is a function of the inputs alone, the same bits on every path.
void AccumulateFloatErrors(const float* values, const float* x, int64_t m,
                           int64_t first, const FloatRuns& t, double* err_steps,
                           ErrorSums* sums, double* bound_steps);
void AccumulateFloatErrorsScalar(const float* values, const float* x, int64_t m,
                                 int64_t first, const FloatRuns& t,
                                 double* err_steps, ErrorSums* sums,
                                 double* bound_steps);

namespace error_pass_internal {
// AccumulateFloatErrors' AVX2 path (x86-64), which it takes where the CPU
// has AVX2 but not AVX-512; here so that a test runs it on any AVX2 CPU.
// REQUIRES: the CPU has AVX2.
void AccumulateFloatErrorsAvx2(const float* values, const float* x, int64_t m,
                               int64_t first, const FloatRuns& t,
                               double* err_steps, ErrorSums* sums,
                               double* bound_steps);
}  // namespace error_pass_internal

// The offset of the first element of such a chunk whose judged excess
// (ExcessOf's, over clipped elements, and over the others too when
// `nearest_codes`) is `excess`; 0 if none is.
int64_t FindFloatExcess(const float* values, const float* x,
                        const double* err_steps, int64_t m, const FloatRuns& t,
                        double excess, bool nearest_codes);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_DIFF_FLOAT_RUNS_H_
