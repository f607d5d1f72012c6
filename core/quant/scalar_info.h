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

// The decomposition value = scale * level + offset holds for every encoding:
//  - affine integers: level = code - zero_point (offset 0, or a "min");
//  - codebooks (IQ4_NL, FP4, NF4): level = the codebook entry of the code;
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
