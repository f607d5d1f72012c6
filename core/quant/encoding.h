// An encoding decodes a logical tensor's elements, however they are stored.
#ifndef TENSORMORPH_CORE_QUANT_ENCODING_H_
#define TENSORMORPH_CORE_QUANT_ENCODING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/quant/float_steps.h"
#include "core/quant/rounding_bound.h"
#include "core/quant/scalar_info.h"

namespace tensormorph {

struct StoredTensor;

// How a logical tensor's values are represented.
struct EncodingInfo {
  std::string scheme;       // "Q4_K", "BF16", "F8_E4M3", ...
  std::string convention;   // "ggml", "safetensors"
  int32_t bits = 0;         // bits per raw code
  bool quantized = false;   // codes need parameters beyond themselves
  std::string granularity;  // "per-block 256 (sub-blocks of 32)", "none"
  int64_t block_elems = 1;  // elements sharing the outermost parameters
  // No offset or zero-point term: value = scale * level, the level a
  // function of the code alone (a fixed shift such as Q4_0's code - 8, or a
  // codebook entry). False when groups carry a zero-point (GPTQ/AWQ qzeros,
  // compressed-tensors weight_zero_point) or a real-valued offset ("min":
  // Q4_1, Q5_1, Q2_K, Q4_K, Q5_K).
  bool symmetric = true;
  int64_t group_size = 0;            // per-group schemes: elements per group
  bool act_order = false;            // groups are looked up through g_idx
  std::vector<int64_t> block_shape;  // per-block schemes: [rows, cols]
  std::string axis;                  // "in" / "out" where it applies
};

// What a diff needs of each element, in bulk: the decoded value, the gaps to
// the neighbouring levels, its group's representable range, and the group.
struct ElementQuant {
  float value = 0;
  double step_below = 0;
  double step_above = 0;
  double range_min = 0;
  double range_max = 0;
  int64_t group = -1;  // ScalarInfo::group
};

// What a diff needs of a run of consecutive elements that share their
// quantization parameters (a ggml sub-block, a convention's group within a
// row; one element where the gaps depend on the code, as in codebooks).
struct QuantRun {
  int64_t count = 0;
  int64_t group = -1;  // as ElementQuant::group
  double step_below = 0, step_above = 0;
  double range_min = 0, range_max = 0;
  // The rounding bound of the run's elements (core/quant/rounding_bound.h):
  // an element x decoded as x̂ is within it when its error in steps is at
  // most
  //   bound + (slack + slack_rel * |x̂ - origin|) / (step towards x)
  //         + (extra_above if x > range_max, extra_below if x < range_min).
  // Codecs leave these at their defaults (half a step, nothing more); the
  // diff fills them from Encoding::Bound (ApplyBound).
  double bound = 0.5;
  double slack = 0, slack_rel = 0, origin = 0;  // slack in real units
  double extra_below = 0, extra_above = 0;      // in steps, may be +inf
};

// The group id DecodeDetailed reports for an inspected element (see
// ScalarInfo::group).
inline int64_t GroupIdOf(const ScalarInfo& s) { return s.group; }

// Thread safety: implementations are immutable and safe to call from many
// threads at once.
class Encoding {
 public:
  virtual ~Encoding() = default;

  virtual const EncodingInfo& info() const = 0;
  // The largest error a correct quantizer of this encoding reaches given
  // the parameters it stored (rounding_bound.h). The default looks the
  // scheme or convention up (BoundOfEncoding); a codec whose quantizer
  // differs states its own.
  virtual RoundingBound Bound() const { return BoundOfEncoding(info()); }
  // The stored tensors the logical tensor is built from.
  virtual std::vector<const StoredTensor*> parts() const = 0;

  // Decodes elements [first, first + count) in row-major order.
  // REQUIRES: 0 <= first, first + count <= the tensor's element count.
  // Errors: UNIMPLEMENTED when the encoding cannot be decoded.
  virtual absl::Status Decode(int64_t first, int64_t count,
                              float* out) const = 0;

  // Inspects element `index` (row-major).
  // REQUIRES: 0 <= index < the tensor's element count.
  // Errors: UNIMPLEMENTED when the encoding cannot be decoded.
  virtual absl::Status Inspect(int64_t index, ScalarInfo* out) const = 0;

  // The group id of each of `indices` into out[i]: Inspect's
  // ScalarInfo::group, without the rest of ScalarInfo. Views that need only
  // groups (a heatmap's cells, a million of them at a page's resolution)
  // would otherwise spend their time decomposing scalars they never show.
  // The default inspects each index; encodings whose groups are arithmetic
  // of the index (ggml blocks, conventions' group grids) override it.
  // REQUIRES: each index as Inspect's; `out` holds indices.size() ids.
  // Errors: as Inspect.
  virtual absl::Status GroupIds(absl::Span<const int64_t> indices,
                                int64_t* out) const;

  // A hint that Inspect(index) comes soon: starts bringing its bytes into
  // the cache, so a batch of scattered indices overlaps its memory misses.
  // Never faults (a prefetch of a page truncated away is dropped).
  // REQUIRES: as Inspect.
  virtual void Prefetch(int64_t index) const { (void)index; }

  // Decodes elements [first, first + count) into `values`, bit-identical
  // to Decode's, and replaces `runs` with runs covering them in order, each
  // with the parameters its elements share. The default inspects each
  // element (runs of one); encodings with shared parameters give one run
  // per group, which is what makes a diff's per-element work small.
  // REQUIRES: as Decode.
  virtual absl::Status DecodeRuns(int64_t first, int64_t count, float* values,
                                  std::vector<QuantRun>* runs) const;

  // The low 8 bits of Inspect's ScalarInfo::code_bits_value of each of
  // elements [first, first + count), into out[0, count): level usage
  // counted in bulk (stats' code histogram), where Inspect would decompose
  // every scalar to read one field. The default inspects each element;
  // ggml blocks and conventions' code matrices unpack them at once.
  // REQUIRES: as Decode.
  // Errors: as Inspect.
  virtual absl::Status RawCodes(int64_t first, int64_t count,
                                uint8_t* out) const;

  // The elements themselves when they are stored as float32, row-major and
  // aligned, so that Decode would only copy them: a pass can read them in
  // place (inside GuardedRead, as Decode would be). nullptr otherwise.
  virtual const float* StoredF32() const { return nullptr; }
  // The same for elements stored as IEEE half precision (F16) codes: what
  // a pass that widens them itself (the heatmap's mean) reads in place
  // rather than through Decode's float32 copy. nullptr otherwise.
  virtual const uint16_t* StoredF16() const { return nullptr; }
  // The same for bfloat16 (BF16) codes: what ComputeStats counts by code.
  virtual const uint16_t* StoredBF16() const { return nullptr; }

  // Where every element is a plain float code (F16, BF16) with no other
  // parameter, so that DecodeDetailed's steps are FloatStepTable::Of of
  // Decode's values, bit for bit: that table; nullptr otherwise. Passes
  // that need only values and steps (the error heatmap) decode then, rather
  // than inspect each element.
  virtual const FloatStepTable* PlainFloatSteps() const { return nullptr; }

  // Elements [first, first + count) as integer codes and their runs'
  // parameters, where every value is
  //   scale[k] * float(int(codes[i] ^ flip) - bias[k])
  // for element i of runs[k] (convention codes of a byte or less, no
  // codebook, groups in regular runs): one code byte per element, `runs` as
  // DecodeRuns gives them and each run's scale and bias, the values being
  // Decode's bit for bit. What a pass that judges groups by their codes
  // needs, without decoding them.
  // REQUIRES: as Decode.
  // Errors: UNIMPLEMENTED where the values are not of that form (the
  // default; ggml blocks, codebooks, act-order groups, zero-points beyond
  // 32 bits), found before or part way through: `out` is then unspecified,
  // and the caller decodes instead.
  struct AffineCodes {
    std::vector<uint8_t> codes;
    uint8_t flip = 0;
    std::vector<QuantRun> runs;
    std::vector<float> scale;
    std::vector<int32_t> bias;
  };
  virtual absl::Status AffineCodeRuns(int64_t first, int64_t count,
                                      AffineCodes* out) const;

  // Elements [first, first + count) as codes below 16 and, per run, the
  // value Decode gives each code in it: level[16 * k + c] has the bits of
  // Decode's value of every element of runs[k] whose code is c (computed
  // by the expression Decode computes, whatever its form: an integer
  // level, a codebook, roundings to a narrower dtype). One code byte per
  // element; `runs` cover the elements in order, each with the count,
  // group and range_min / range_max DecodeRuns gives its elements (their
  // steps unspecified). Levels of codes the encoding cannot produce are
  // unspecified. What a pass that judges groups by their codes needs,
  // without decoding them: a run of n elements has 16 values, not n.
  // REQUIRES: as Decode.
  // Errors: UNIMPLEMENTED where codes are wider than 4 bits or runs do not
  // share their codes' values (the default; act-order groups, per-column
  // factors), found before or part way through: `out` is then
  // unspecified, and the caller decodes instead.
  struct LevelCodes {
    std::vector<uint8_t> codes;
    std::vector<QuantRun> runs;
    std::vector<float> level;  // 16 per run
  };
  virtual absl::Status CodeLevelRuns(int64_t first, int64_t count,
                                     LevelCodes* out) const;

  // ElementQuant of elements [first, first + count): DecodeRuns, spelled
  // out per element.
  // REQUIRES: as Decode.
  absl::Status DecodeDetailed(int64_t first, int64_t count,
                              ElementQuant* out) const;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_ENCODING_H_
