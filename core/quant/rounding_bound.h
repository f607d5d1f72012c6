// The rounding bound of an encoding: the largest error, in steps, that a
// correct quantizer of that format reaches given the parameters it stored.
// Half a step for a quantizer that rounds to the nearest level of the scale
// it stores; more where the format's own quantizer rounds with one scale and
// stores another (ggml's Q8_0/Q4_x/Q5_x choose codes with the float32 scale
// and store it as f16), where it clips by design (Q4_0/Q5_0 put the signed
// extreme on level -8/-16, so the other end is a level short; MXFP4's
// power-of-two scale), or where a scale search trades clipping for the error
// of the rest (K-quants, IQ4). Quantizers that choose codes other than the
// nearest on purpose (GPTQ's error feedback, grid searches) say so: their
// "not nearest" elements are information, not a defect.
//
// A codec states its bound by a RoundingBound (Encoding::Bound: the default
// looks the scheme up in this file's tables, so a new ggml type needs one
// entry in BoundOfDType); the diff turns it into per-run limits (ApplyBound).
#ifndef TENSORMORPH_CORE_QUANT_ROUNDING_BOUND_H_
#define TENSORMORPH_CORE_QUANT_ROUNDING_BOUND_H_

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace tensormorph {

struct EncodingInfo;
struct QuantRun;

struct RoundingBound {
  // kNearest: every code is the level nearest its source for the scale
  // used (an element beyond the bound is a defect). kChosen: codes are
  // chosen otherwise on purpose (error feedback, joint grid search); an
  // element beyond the bound inside the range is information.
  enum class Codes : uint8_t { kNearest, kChosen };
  // Clipping a correct quantizer does: none; up to clip_steps beyond the
  // end of the range nearer zero (a signed extreme on the long end); up to
  // clip_steps beyond either end; any amount (a searched scale).
  enum class Clip : uint8_t { kNone, kShortEnd, kBothEnds, kAny };

  Codes codes = Codes::kNearest;
  Clip clip = Clip::kNone;
  double clip_steps = 0;  // beyond the end's half step, in steps
  // Codes were chosen with an unrounded scale that was then stored as f16:
  // a level l lands up to |l| * u steps from where it was aimed, u the f16
  // half-ulp of the stored scale relative to it.
  bool scale_f16 = false;
  // Where the rounded scale is not the run's own (IQ4_XS: an f16 super-
  // block d times a sub-block integer), its largest relative rounding
  // instead (2^-11 for f16 normals), or 2^-25 against the least stored
  // scale max(|range ends|) / scale_levels when that is larger (an f16
  // subnormal); 0: none, or scale_f16's.
  double scale_rel = 0;
  // Where the stored scale's magnitude is read from a run: 0 for the step
  // (uniform levels), else max(|range_min|, |range_max|) / scale_levels
  // (codebooks: their largest |entry|).
  double scale_levels = 0;
  // The offset ("min", range_min) was likewise stored as f16 after the
  // codes were chosen: levels count from it, and its own rounding adds.
  bool offset_f16 = false;
  // Float arithmetic of quantizer and decoder (x * (1/d) in float32), as a
  // fraction of the run's largest |value|.
  double float_slack = 0;
  // The quantizer may store a zero scale for a group whose source is not
  // zero (sub-block scales quantized against a larger one). Elsewhere a
  // zeroed group is a defect, unless its source is below what a stored f16
  // scale can hold (|x| < levels * 2^-25, some 4e-6 for Q8_0: not weights).
  bool zeroes_groups = false;
  // Codes on a float grid (fp8's e4m3/e5m2): a step is a fixed fraction of
  // the value, so a bf16 or f16 source's own rounding (half its ulp) is at
  // most 1/16 of a step, and the diff adds it (WidenForSourceRounding): a
  // checkpoint quantized from float32 and released beside its bf16 source
  // is within. Integer grids do not: with 127 levels the same rounding is
  // half a step at the top, and would hide a code one level off.
  // On a float grid a step is a fixed fraction of its level, so every term
  // that grows with the value (float_slack: x / s and s * level round
  // relative to the element; the source's rounding) is taken at the
  // element's own level, never at the range's end: that paired e4m3's finest
  // step (2^-9, a subnormal's) with its largest level (448) and reported a
  // bf16 source's 2^-8 as 896 steps (e5m2's ends are infinite). Per element
  //   0.5 + (r + f) * (|level| / step towards the source + 1)
  // with r the source's relative rounding (0 float32, 2^-11 f16, 2^-8 bf16)
  // and f float_slack: |level| / step is at most 16 for e4m3 (8 for e5m2),
  // at a power of two seen from below, so r adds at most 1/16 of a step
  // there; the 1 is the source lying up to a step beyond its level. So 0.5
  // against float32 (float arithmetic aside), 0.5 + 17 * 2^-8 = 0.566 for
  // e4m3 against bf16 (0.535 e5m2), 0.508 against f16, whose subnormals
  // (below 2^-14) round by a fixed 2^-25: more where a small scale puts
  // levels finer than that.
  bool float_codes = false;
  std::string family;  // a short name for reports: "nearest, f16 scale", ...
};

// The statement for a ggml or plain dtype (what its reference quantizer or
// conversion does).
RoundingBound BoundOfDType(DType dtype);

// The statement for an encoding by its info: a dtype scheme ("Q4_0") by
// BoundOfDType, a safetensors convention by its name (gptq, awq, ...).
RoundingBound BoundOfEncoding(const EncodingInfo& info);

// The f16 half-ulp at |v|: how far an f32 value that rounded to the f16 `v`
// may have been from it (2^-25 below the normal range).
double HalfUlpF16(double v);

// Fills run->bound .. extra_above (see QuantRun) from the run's stored
// parameters (step, range) and `b`.
void ApplyBound(const RoundingBound& b, QuantRun* run);

// How far a source stored as `source` (its scheme: "BF16", "F16", ...) may
// lie from what the quantizer read, relative to its magnitude: a bf16 or
// f16 release of weights quantized from float32 was itself rounded, by up
// to half its ulp (2^-8 |x| for bf16, 2^-11 |x| for f16 normals); 0 for
// float32 and wider, and for quantized sources.
double SourceRoundingRel(const EncodingInfo& source);

// Widens the run's bound by a source rounding of `rel` (SourceRoundingRel)
// of each source's magnitude, and f16's subnormal half-ulp when `f16`: on a
// float grid, where the diff widens (see float_codes).
void WidenForSourceRounding(double rel, bool f16, QuantRun* run);

// The bound, in steps, of the run's worst-placed level inside its range
// (what a report calls the bound used); 0 for a zero-step run. For uniform
// levels that is the range's end at the finer step; on a float grid (a run
// of one element, its steps the gaps around its own level) it is that
// level's: LevelBoundSteps(run, its decoded value).
double InteriorBoundSteps(const QuantRun& run);

// The bound, in steps, of the run's level `level` at the finer of the run's
// steps; 0 for a zero-step run.
double LevelBoundSteps(const QuantRun& run, double level);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_ROUNDING_BOUND_H_
