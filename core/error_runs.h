// Errors in steps of runs of plain float values (F16, BF16: every element a
// code with no other parameter) against their float32 source, the steps
// looked up by value (FloatStepTable) rather than inspected: folded into a
// maximum down columns (an error heatmap's cells) or written element by
// element (an ErrorGrid). A scalar statement, and vectors held to it bit for
// bit.
#ifndef TENSORMORPH_CORE_ERROR_RUNS_H_
#define TENSORMORPH_CORE_ERROR_RUNS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/quant/decode_simd.h"
#include "core/quant/float_steps.h"

namespace tensormorph {

// A maximum that keeps NaN: std::max keeps its left operand when either is
// NaN, so an accumulator that is NaN stays NaN but a NaN element would be
// dropped; the flag catches those, beside the max chain rather than in it
// (a select on isnan inside the chain ran 3-4 times slower).
struct MaxKeepingNaN {
  double acc;
  bool nan = false;
  void Add(double x) {
    acc = std::max(acc, x);
    nan |= std::isnan(x);
  }
  double Result() const {
    return nan ? std::numeric_limits<double>::quiet_NaN() : acc;
  }
};

// One element's error in steps (core/error_steps.h's ElementErrorSteps) for
// a plain float's decoded value `e`, its steps those `table` gives e: NaN
// when either is NaN, 0 when equal, +inf when the step is not above 0 or
// the difference is infinite. The specification the vectors are held to.
double PlainFloatErrorSteps(float source, float e, const FloatStepTable& table);

// Column maxima of errors down a band of rows (PlainFloatErrors::
// FoldColumns): float32 where the vectors computed an error (exactly its
// double), double where the statement did, and whether a column met NaN.
class ErrorColumns {
 public:
  // n columns, each at -inf and without NaN.
  void Reset(int64_t n);
  // Columns [begin, end) folded into *m (a cell's maximum, NaN kept).
  void FoldInto(int64_t begin, int64_t end, MaxKeepingNaN* m) const;

  // A row of errors already computed (an ErrorGrid's), column k from
  // errors[k], k < n: float32 ones where they are not NaN, returning
  // whether any is (the caller then folds those with FoldOne); doubles
  // whole, NaN included.
  bool FoldFloats(const float* errors, int64_t n, DecodeSimd simd);
  void FoldDoubles(const double* errors, int64_t n, DecodeSimd simd);
  void FoldOne(int64_t k, double error) {
    slow_[k] = std::max(slow_[k], error);
    nan_[k] |= std::isnan(error) ? 1 : 0;
  }

 private:
  friend class PlainFloatErrors;
  std::vector<float> fast_;
  std::vector<double> slow_;
  std::vector<uint8_t> nan_;
};

// The kernels for one table at the SIMD level given (ActiveDecodeSimd at
// the call site). Every result is PlainFloatErrorSteps' bits, in any order
// of elements for a maximum (an error is never -0, so ties are equal bits);
// NaN results are the canonical quiet NaN.
// Thread safety: immutable after construction.
class PlainFloatErrors {
 public:
  PlainFloatErrors(const FloatStepTable& table, DecodeSimd simd);

  // PlainFloatErrorSteps(x[k], e[k]) for k < n written to out[k] as a
  // float32 where that is the error exactly; else out[k] is NaN and k is
  // appended to *inexact (which the caller reserved n for: nothing
  // allocates here), for the caller to compute in double.
  void Store(const float* x, const float* e, int64_t n, float* out,
             std::vector<int64_t>* inexact) const;

  // Column by column down a band of rows: error k folded into column k of
  // *columns, for k < n (columns->Reset(n) or more before the band). A
  // heatmap's cells then take their columns' maxima once per band: a
  // cell's run is too short (16 columns of a 4096-column row in 256 cells)
  // for a call per run to pay.
  void FoldColumns(const float* x, const float* e, int64_t n,
                   ErrorColumns* columns) const;

  // Where the vectors hold: e's exponent fields (float32's) in [lo, hi],
  // whose steps are 2^(field - c + 127) by the table, half that below a
  // power of two towards zero, so that 1 / step is the float32 of field
  // c - field (+1). lo > hi when no field is (then only the statement).
  struct Fields {
    int32_t lo = 1, hi = 0, c = 0;
  };

 private:
  const FloatStepTable& table_;
  DecodeSimd simd_;
  Fields fields_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_ERROR_RUNS_H_
