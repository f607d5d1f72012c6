// What the Scalar Inspector shows for one element: the stored code beside
// everything needed to turn it into the dequantized value.
#ifndef TENSORMORPH_CORE_QUANT_SCALAR_INFO_H_
#define TENSORMORPH_CORE_QUANT_SCALAR_INFO_H_

#include <array>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace tensormorph {

// A stored quantization parameter by its format's own name ("d", "dmin",
// "sc", "m", "e"), as the integer or float found in the file.
struct ScalarParam {
  absl::string_view name;
  double value = 0;
};

// Lattice codebook types (ggml's IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S) store, per group of 8 (IQ3: 4) elements, an index into a
// grid of 8- (4-) dimensional points, plus sign bits (IQ2, IQ3) or a shift
// delta (IQ1), under a sub-block scale. What the Inspector shows of it:
struct GridCodeword {
  int32_t index = -1;             // the grid entry the element's group selects
  int32_t grid_size = 0;          // entries in the grid (256 .. 2048)
  int32_t dims = 0;               // coordinates per entry: 8, or 4 (IQ3)
  int32_t position = 0;           // the element's coordinate within the entry
  std::array<int8_t, 8> entry{};  // the entry's coordinates as stored
  // The sign byte of the element's 8-element group (bit k: element k of the
  // group negated; IQ1 has none: 0) and whether this element is negated.
  uint32_t sign_bits = 0;
  bool negated = false;
  double delta = 0;            // IQ1's shift of every coordinate (+-1/8)
  double sub_block_scale = 0;  // the multiplier of (signed coordinate+delta)
};

// Levels and steps of lattice codebook types. The grid is a subset of the
// product of per-coordinate values, chosen jointly, so no single element has
// levels of its own; Tensormorph uses each element's marginal codebook:
// the levels of an element are every value its coordinate takes in any
// grid entry, with either sign where the format stores signs (IQ2: +-8,
// +-25, +-43; IQ3_XXS: +-4 .. +-62; IQ3_S: +-1 .. +-15), or shifted by its
// group's delta (IQ1: -1, 0, +1 plus delta), times the sub-block scale.
// level = the element's signed coordinate (+ delta), scale = the sub-block
// scale, offset 0; step_below/above = the gaps to the neighbouring marginal
// levels (the nearest other value the element could take if the rest of its
// group were free), step their mean, range = the marginal's extremes. Error
// in steps = |x - x̂| / step against these levels. Since a quantizer picks
// the nearest grid point for the whole group (imatrix-weighted), a correct
// element may sit beyond half a step of its marginal level; what stays true
// is that an element outside [range_min, range_max] is clipped.
//
// The decomposition value = scale * level + offset holds for every encoding:
//  - affine integers: level = code - zero_point (offset 0, or a "min");
//  - codebooks (IQ4_NL, FP4, NF4): level = the codebook entry of the code;
//  - lattice codebooks (IQ1..IQ3): level = the signed grid coordinate (plus
//    IQ1's delta), scale the sub-block scale (see GridCodeword);
//  - plain floats: scale 1, level = value.
// `value` is the decoder's own result (bit-exact with the reference); the
// decomposition explains it and may differ from it in the last bit where the
// reference rounds intermediate products.
struct ScalarInfo {
  uint64_t code_bits_value = 0;  // the raw code's bits
  int64_t code = 0;              // the raw code as the format's integer
  int32_t code_width = 0;        // bits in the raw code
  bool code_is_float = false;    // code_bits_value is a float bit pattern
  int64_t block = -1;            // storage block (ggml block, group), or -1
  int32_t sub_block = -1;        // sub-block within the block, or -1
  double scale = 1;              // effective multiplier of the level
  double zero_point = 0;         // in code units (0 for symmetric)
  double offset = 0;             // real-unit offset (a "min"), 0 if none
  double level = 0;              // what scale multiplies
  // Distances to the neighbouring representable values below and above
  // (at the ends of the range, the gap on the inside), and their mean.
  double step_below = 0;
  double step_above = 0;
  double step = 0;
  // Smallest and largest value representable in this element's group.
  double range_min = 0;
  double range_max = 0;
  float value = 0;
  // The group id: the element's group (the elements sharing one scale and
  // offset or zero-point: a ggml sub-block where the type has them, else the
  // ggml block; a convention's group, block or channel; the whole tensor for
  // per-tensor scales), numbered densely 0..groups-1 in row-major order of
  // the group grid. -1 where nothing is shared (plain dtypes). Every view
  // (stats' group count, heatmap group mode, diff's worst groups and its
  // per-element group) uses this id.
  int64_t group = -1;
  // The grid the element's group draws its values from, so that GroupLevels
  // can list them: integer levels grid_min..grid_max (kUniform), or the
  // `codebook` entries (kCodebook; static tables or the encoding's own, so
  // valid while the encoding lives), each as value = scale * level + offset.
  // kNone for plain dtypes, whose values are their own codes.
  enum class Grid : uint8_t { kNone, kUniform, kCodebook };
  Grid grid = Grid::kNone;
  double grid_scale = 0, grid_offset = 0;
  double grid_min = 0, grid_max = 0;
  const double* codebook = nullptr;
  int32_t codebook_size = 0;
  // Lattice codebook types only (codeword.index >= 0), see GridCodeword.
  GridCodeword codeword;
  std::array<ScalarParam, 4> params{};
  int32_t num_params = 0;

  void AddParam(absl::string_view name, double v) {
    if (num_params < static_cast<int32_t>(params.size())) {
      params[num_params++] = {name, v};
    }
  }
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_SCALAR_INFO_H_
