// The heatmap bit for bit against the straightforward reduction it
// replaces for speed: each cell's group from Inspect of its first element,
// and every element folded into its cell one at a time, in double, in
// row-major order; the mean's and squared errors' sums in the 16 lanes of
// heatmap.h's contract (the element at column offset k of its cell into
// partial sum k % 16, combined by the fixed tree), held at every SIMD level
// the CPU has
// (CapDecodeSimdForTesting), so the vector kernels and the scalar one give
// the same bits. Every mode, with and without a reference, on ggml types
// and conventions, over the whole view and over regions whose cells differ
// in width (so runs of uneven length meet), and on values with NaN and
// infinities among them (every fast path must propagate them as the plain
// reduction does). Error mode's cells from a grid of the view's errors
// (ComputeErrorGrid, at each SIMD level) are held to the same bits.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error_grid.h"
#include "core/format/checkpoint.h"
#include "core/heatmap.h"
#include "core/heatmap_q4k.h"
#include "core/heatmap_q8.h"
#include "core/quant/decode_simd.h"
#include "core/quant/float_formats.h"
#include "gtest/gtest.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildGguf;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::GgufSpec;
using ::tensormorph::testing::GgufString;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::WriteFile;

// Quantized values share a scale, so their sums in double are mostly exact
// and would hide a change of the order of additions. This F32 GGUF holds two
// [16, 256] tensors ("a", and "b" as its reference) of magnitudes 2^-40 to
// 2^40, either sign, a tenth exact zeros: sums that round at nearly every
// step, differently in any other order.
std::string WriteWildGguf(int64_t rows = 16) {
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> exponent(-40, 40), tenth(0, 9);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  auto values = [&] {
    std::string data(rows * 256 * sizeof(float), '\0');
    for (size_t k = 0; k < static_cast<size_t>(rows) * 256; ++k) {
      const float f =
          tenth(rng) == 0
              ? 0.0f
              : std::ldexp(mantissa(rng), exponent(rng)) * (k % 3 ? 1 : -1);
      std::memcpy(data.data() + k * sizeof(float), &f, sizeof(float));
    }
    return data;
  };
  GgufSpec s;
  s.kv.push_back({"general.architecture", GgufString("llama")});
  s.tensors.push_back({"a.weight", {256, rows}, 0, values()});
  s.tensors.push_back({"b.weight", {256, rows}, 0, values()});
  const std::string path =
      MakeTempDir() + "/wild" + std::to_string(rows) + ".gguf";
  WriteFile(path, BuildGguf(s));
  return path;
}

// The same shape with NaN, +inf and -inf among ordinary values (about one
// element in 40 each, so that most cells of a few elements are finite, and
// wide cells meet mixtures): "a" against its reference "b", with specials
// of its own. NaNs of several payloads and both signs, so that a cell's NaN
// must come out canonical whichever element carried it.
std::string WriteSpecialsGguf() {
  std::mt19937 rng(29);
  std::uniform_int_distribution<int> pick(0, 119), payload(1, 0x3fffff);
  std::normal_distribution<float> gaussian(0.0f, 3.0f);
  auto values = [&] {
    std::string data(16 * 256 * sizeof(float), '\0');
    for (size_t k = 0; k < 16 * 256; ++k) {
      float f = gaussian(rng);
      switch (pick(rng)) {
        case 0:
          f = std::bit_cast<float>(static_cast<uint32_t>(
              (k % 2 ? 0xffc00000u : 0x7fc00000u) | payload(rng)));
          break;
        case 1:
          f = std::numeric_limits<float>::infinity();
          break;
        case 2:
          f = -std::numeric_limits<float>::infinity();
          break;
        default:
          break;
      }
      std::memcpy(data.data() + k * sizeof(float), &f, sizeof(float));
    }
    return data;
  };
  GgufSpec s;
  s.kv.push_back({"general.architecture", GgufString("llama")});
  s.tensors.push_back({"a.weight", {256, 16}, 0, values()});
  s.tensors.push_back({"b.weight", {256, 16}, 0, values()});
  const std::string path = MakeTempDir() + "/specials.gguf";
  WriteFile(path, BuildGguf(s));
  return path;
}

// A [16, 256] tensor "a" of 16-bit float codes (ggml type `type_id`: F16
// or BF16) drawn from every code, NaNs and infinities included, against an
// F32 reference "b": a quarter exactly the decoded value (errors of 0, so
// cells tie), the rest the value moved by up to a few of its steps, or
// another random value. The error heatmap's plain-float path
// (Encoding::PlainFloatSteps) must give DecodeDetailed's bits here.
std::string WriteHalfGguf(uint32_t type_id, int seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(0, 65535), pick(0, 7);
  std::uniform_real_distribution<float> wobble(-0.01f, 0.01f);
  std::string a(16 * 256 * 2, '\0'), b(16 * 256 * sizeof(float), '\0');
  for (size_t k = 0; k < 16 * 256; ++k) {
    const uint16_t c = static_cast<uint16_t>(code(rng));
    a[2 * k] = static_cast<char>(c & 0xff);
    a[2 * k + 1] = static_cast<char>(c >> 8);
    const float v = type_id == 1 ? F16ToF32(c) : BF16ToF32(c);
    float x = v;
    switch (pick(rng)) {
      case 0:
      case 1:
        break;
      case 2:
        x = std::bit_cast<float>(static_cast<uint32_t>(code(rng)) << 16);
        break;
      default:
        x = v * (1.0f + wobble(rng));
        break;
    }
    std::memcpy(b.data() + k * sizeof(float), &x, sizeof(float));
  }
  GgufSpec s;
  s.kv.push_back({"general.architecture", GgufString("llama")});
  s.tensors.push_back({"a.weight", {256, 16}, type_id, a});
  s.tensors.push_back({"b.weight", {256, 16}, 0, b});
  const std::string path =
      MakeTempDir() + "/half" + std::to_string(type_id) + ".gguf";
  WriteFile(path, BuildGguf(s));
  return path;
}

// The fixed tree of heatmap.h (and stats.h): (0+8), (1+9), ... (7+15);
// then those eight as (0+4) ... (3+7); then (0+2), (1+3); then the two.
double SumOfLanes(const double* s) {
  const double a0 = s[0] + s[8], a1 = s[1] + s[9], a2 = s[2] + s[10],
               a3 = s[3] + s[11], a4 = s[4] + s[12], a5 = s[5] + s[13],
               a6 = s[6] + s[14], a7 = s[7] + s[15];
  const double b0 = a0 + a4, b1 = a1 + a5, b2 = a2 + a6, b3 = a3 + a7;
  const double c0 = b0 + b2, c1 = b1 + b3;
  return c0 + c1;
}

// The reduction as the heatmap first computed it, on the cells (edges,
// width, height, rows, cols) `got` chose; the view is the tensor's first
// (rank 2 fixtures only). Non-finite values as core/heatmap.h states them:
// the mean's sum propagates NaN and infinities by itself; a maximum turns
// NaN at its first NaN; every NaN cell is the canonical quiet NaN; min and
// max cover the finite cells only.
Heatmap Reference(const LogicalTensor& t, const LogicalTensor* ref,
                  HeatmapMode mode, const Heatmap& got) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  Heatmap h = got;
  const size_t cells = static_cast<size_t>(h.width) * h.height;
  const bool zeros = mode == HeatmapMode::kZeros;
  const bool sq_error = mode == HeatmapMode::kSqError;
  h.values.assign(cells, mode == HeatmapMode::kMean || zeros || sq_error
                             ? 0.0
                             : -std::numeric_limits<double>::infinity());
  h.groups.assign(cells, -1);
  h.pruned.clear();
  if (zeros && ref != nullptr) h.pruned.assign(cells, 0.0);
  for (int i = 0; i < h.height; ++i) {
    for (int j = 0; j < h.width; ++j) {
      ScalarInfo s;
      EXPECT_TRUE(
          t.encoding->Inspect(h.row_edges[i] * h.cols + h.col_edges[j], &s)
              .ok());
      h.groups[i * h.width + j] = s.group;
    }
  }
  const int64_t c_begin = h.col_edges.front();
  const int64_t ncols = h.col_edges.back() - c_begin;
  const bool detailed = mode == HeatmapMode::kErrorSteps;
  const bool with_ref = ref != nullptr && (detailed || zeros || sq_error);
  std::vector<ElementQuant> q(static_cast<size_t>(ncols));
  std::vector<float> v(static_cast<size_t>(ncols));
  std::vector<float> x(static_cast<size_t>(ncols));
  // The mean's (or squared errors') 16 partial sums of each cell.
  std::vector<double> lanes(cells * 16, 0.0);
  // Each cell's located element (heatmap.h's cell_element), chosen the
  // plain way: elements in row-major order, the first NaN kept, else the
  // first strictly largest.
  std::vector<double> best(cells, 0.0);
  std::vector<int64_t> element(cells, -1);
  const auto locate = [&](size_t k, double value, int64_t index) {
    if (element[k] >= 0 && std::isnan(best[k])) return;
    if (element[k] < 0 || std::isnan(value) || value > best[k]) {
      best[k] = value;
      element[k] = index;
    }
  };
  for (int i = 0; mode != HeatmapMode::kGroup && i < h.height; ++i) {
    for (int64_t r = h.row_edges[i]; r < h.row_edges[i + 1]; ++r) {
      const int64_t first = r * h.cols + c_begin;
      if (detailed) {
        EXPECT_TRUE(t.encoding->DecodeDetailed(first, ncols, q.data()).ok());
      } else {
        EXPECT_TRUE(t.encoding->Decode(first, ncols, v.data()).ok());
      }
      if (with_ref) {
        EXPECT_TRUE(ref->encoding->Decode(first, ncols, x.data()).ok());
      }
      for (int j = 0; j < h.width; ++j) {
        double& out = h.values[i * h.width + j];
        for (int64_t c = h.col_edges[j] - c_begin;
             c < h.col_edges[j + 1] - c_begin; ++c) {
          switch (mode) {
            case HeatmapMode::kMean:
              lanes[(static_cast<size_t>(i) * h.width + j) * 16 +
                    (c + c_begin - h.col_edges[j]) % 16] += v[c];
              break;
            case HeatmapMode::kAbsmax: {
              const double a = std::fabs(v[c]);
              locate(static_cast<size_t>(i) * h.width + j, a, first + c);
              out = std::isnan(out) || std::isnan(a) ? kNaN : std::max(out, a);
              break;
            }
            case HeatmapMode::kErrorSteps: {
              const double e = q[c].value;
              double steps;
              if (std::isnan(x[c]) || std::isnan(e)) {
                steps = kNaN;
              } else if (x[c] == e) {
                steps = 0;
              } else {
                const double err = std::fabs(x[c] - e);
                const double step =
                    x[c] > e ? q[c].step_above : q[c].step_below;
                steps = step > 0 && !std::isinf(err) ? err / step : INFINITY;
              }
              locate(static_cast<size_t>(i) * h.width + j, steps, first + c);
              out = std::isnan(out) || std::isnan(steps) ? kNaN
                                                         : std::max(out, steps);
              break;
            }
            case HeatmapMode::kSqError: {
              // heatmap.h: (x - x̂)^2 in double, into the mean's lanes.
              const double d =
                  static_cast<double>(x[c]) - static_cast<double>(v[c]);
              lanes[(static_cast<size_t>(i) * h.width + j) * 16 +
                    (c + c_begin - h.col_edges[j]) % 16] += d * d;
              break;
            }
            case HeatmapMode::kZeros:
              if (v[c] != 0) break;
              if (!with_ref || x[c] != 0) {
                out += 1;
              } else {
                h.pruned[i * h.width + j] += 1;
              }
              break;
            case HeatmapMode::kGroup:
              break;
          }
        }
      }
    }
  }
  for (int i = 0; i < h.height; ++i) {
    for (int j = 0; j < h.width; ++j) {
      const size_t k = static_cast<size_t>(i) * h.width + j;
      const double count =
          static_cast<double>(h.row_edges[i + 1] - h.row_edges[i]) *
          static_cast<double>(h.col_edges[j + 1] - h.col_edges[j]);
      if (mode == HeatmapMode::kMean || sq_error)
        h.values[k] = SumOfLanes(lanes.data() + k * 16);
      if (mode == HeatmapMode::kMean || zeros) h.values[k] /= count;
      if (!h.pruned.empty()) h.pruned[k] /= count;
      if (mode == HeatmapMode::kGroup)
        h.values[k] = static_cast<double>(h.groups[k]);
      if (std::isnan(h.values[k])) h.values[k] = kNaN;
    }
  }
  h.cell_element.clear();
  if (got.cell_element.size() == cells) h.cell_element = element;
  std::vector<double> finite;
  for (double v : h.values) {
    if (std::isfinite(v)) finite.push_back(v);
  }
  h.min = h.max = 0;
  if (!finite.empty()) {
    const auto [lo, hi] = std::minmax_element(finite.begin(), finite.end());
    h.min = *lo;
    h.max = *hi;
  }
  return h;
}

void ExpectSameBits(const std::vector<double>& got,
                    const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(std::bit_cast<uint64_t>(got[k]), std::bit_cast<uint64_t>(want[k]))
        << what << " cell " << k << ": " << got[k] << " vs " << want[k];
  }
}

struct Source {
  std::string path, ref_path, tensor, ref_tensor;
};

TEST(HeatmapReferenceTest, EveryModeAndRegionIsTheStraightforwardReduction) {
  const std::string down = "model.layers.0.mlp.down_proj.weight";
  const std::string wild = WriteWildGguf();
  const std::string specials = WriteSpecialsGguf();
  const std::string f16 = WriteHalfGguf(1, 41), bf16 = WriteHalfGguf(30, 43);
  std::vector<Source> sources = {
      {wild, wild, "a.weight", "b.weight"},
      {specials, specials, "a.weight", "b.weight"},
      {f16, f16, "a.weight", "b.weight"},
      {bf16, bf16, "a.weight", "b.weight"},
      {"gguf/Q4_K.gguf", "gguf/source_f32.gguf", "blk.0.ffn_down.weight"},
      {"gguf/Q8_0.gguf", "gguf/source_f32.gguf", "blk.0.ffn_down.weight"},
      {"gguf/Q6_K.gguf", "gguf/source_f32.gguf", "blk.0.ffn_down.weight"},
      {"gguf/Q4_0.gguf", "gguf/source_f32.gguf", "blk.0.ffn_down.weight"},
      {"gguf/TQ1_0.gguf", "gguf/source_f32.gguf", "blk.0.ffn_down.weight"},
      {"gguf/IQ4_NL.gguf", "gguf/source_f32.gguf", "blk.0.ffn_down.weight"},
      {"gguf/F16.gguf", "gguf/source_f32.gguf", "blk.0.ffn_down.weight"},
      {"safetensors/gptq_4bit_g32_actorder",
       "safetensors/gptq_4bit_g32_actorder/source", down},
      {"safetensors/ct_int8_channel", "safetensors/ct_int8_channel/source",
       down},
      {"safetensors/fp8_block_sharded", "safetensors/fp8_block_sharded/source",
       down},
  };
  for (size_t k = 4; k < sources.size(); ++k) {
    sources[k].path = Fixture(sources[k].path);
    sources[k].ref_path = Fixture(sources[k].ref_path);
    sources[k].ref_tensor = sources[k].tensor;
  }
  struct Shape {
    int width, height;
    int64_t row_begin, row_end, col_begin, col_end;
  };
  const std::vector<Shape> shapes = {
      {256, 256, 0, 0, 0, 0},  // one element per cell where the view is small
      {7, 3, 0, 0, 0, 0},      // uneven cells over the whole view
      {13, 5, 1, 0, 3, 0},     // a region, uneven
      {5, 2, 1, 3, 17, 60},    // a narrow region
      {1, 1, 0, 0, 0, 0},      // one cell
      {32, 8, 0, 0, 0, 0},     // runs of eight columns or more, in eights
      {19, 4, 2, 0, 5, 0},     // uneven runs: of 13 or 14 on ggml, 3 on the
                               // conventions' 64 columns
      {8, 4, 2, 0, 5, 0},      // eight uneven runs of 7 or 8 (conventions)
      {24, 2, 0, 0, 0, 0},     // three eights of cells, runs of 10 or 11
      // Runs past 16 columns on the 256-column sources, so that the mean's
      // lanes wrap with every remainder of a row's last 16: 17/18, 18/19,
      // 23/24, 28/29, 85/86 (and 8/9, 13/14, 19/20, 31/32, 36/37 above).
      {15, 2, 0, 0, 0, 0},
      {14, 3, 0, 0, 0, 0},
      {11, 3, 0, 0, 1, 0},
      {9, 2, 0, 0, 0, 0},
      {3, 2, 0, 0, 0, 0},
      // Cells of 16, 32 and 64 columns on the 256-column sources, eight,
      // four and two abreast (the mean's AVX-512 blocks of 128 columns),
      // and a region whose first eight cells of 16 make a block and whose
      // last seven do not.
      {16, 3, 0, 0, 0, 0},
      {8, 2, 0, 0, 0, 0},
      {4, 2, 0, 0, 0, 0},
      {15, 2, 1, 0, 16, 0},
  };
  int compared = 0, located_count = 0, from_grid = 0;
  // Cells of the specials source: NaN, +inf, -inf, finite (each must occur,
  // or that case went untested).
  int64_t kinds[4] = {0, 0, 0, 0};
  for (const Source& src : sources) {
    auto ckpt = Checkpoint::Open(src.path);
    ASSERT_TRUE(ckpt.ok()) << src.path << ": " << ckpt.status();
    auto ref_ckpt = Checkpoint::Open(src.ref_path);
    ASSERT_TRUE(ref_ckpt.ok()) << src.ref_path << ": " << ref_ckpt.status();
    const LogicalTensor* t = (*ckpt)->FindTensor(src.tensor);
    const LogicalTensor* x = (*ref_ckpt)->FindTensor(src.ref_tensor);
    ASSERT_NE(t, nullptr) << src.path;
    ASSERT_NE(x, nullptr) << src.ref_path;
    ASSERT_EQ(t->shape.size(), 2u) << src.path;
    for (const Shape& shape : shapes) {
      for (HeatmapMode mode :
           {HeatmapMode::kMean, HeatmapMode::kAbsmax, HeatmapMode::kErrorSteps,
            HeatmapMode::kGroup, HeatmapMode::kZeros, HeatmapMode::kSqError}) {
        for (const LogicalTensor* r :
             {x, static_cast<const LogicalTensor*>(nullptr)}) {
          if ((mode == HeatmapMode::kErrorSteps ||
               mode == HeatmapMode::kSqError) &&
              r == nullptr) {
            continue;
          }
          HeatmapOptions o;
          o.mode = mode;
          o.width = shape.width;
          o.height = shape.height;
          o.row_begin = shape.row_begin;
          o.row_end = shape.row_end;
          o.col_begin = shape.col_begin;
          o.col_end = shape.col_end;
          const std::string what =
              src.path + " mode " + std::to_string(static_cast<int>(mode)) +
              (r != nullptr ? " with ref" : "") + " " +
              std::to_string(shape.width) + "x" + std::to_string(shape.height) +
              " from (" + std::to_string(shape.row_begin) + ", " +
              std::to_string(shape.col_begin) + ")";
          // At each SIMD level this CPU has (the mean's vector kernels and
          // their scalar twin), decoders included.
          for (DecodeSimd level :
               {DecodeSimd::kScalar, DecodeSimd::kAvx2, DecodeSimd::kAvx512}) {
            if (level > SupportedDecodeSimd()) break;
            const std::string at =
                what + " simd " + std::to_string(static_cast<int>(level));
            CapDecodeSimdForTesting(level);
            auto got = ComputeHeatmap(*t, r, o);
            CapDecodeSimdForTesting(DecodeSimd::kAvx512);
            ASSERT_TRUE(got.ok()) << at << ": " << got.status();
            const Heatmap want = Reference(*t, r, mode, *got);
            ExpectSameBits(got->values, want.values, at + " values");
            ExpectSameBits(got->pruned, want.pruned, at + " pruned");
            EXPECT_EQ(got->groups, want.groups) << at;
            EXPECT_EQ(std::bit_cast<uint64_t>(got->min),
                      std::bit_cast<uint64_t>(want.min))
                << at;
            EXPECT_EQ(std::bit_cast<uint64_t>(got->max),
                      std::bit_cast<uint64_t>(want.max))
                << at;
          }
          auto got = ComputeHeatmap(*t, r, o);
          ASSERT_TRUE(got.ok()) << what << ": " << got.status();
          ++compared;
          if (mode == HeatmapMode::kErrorSteps ||
              mode == HeatmapMode::kAbsmax) {
            // The located elements, and the same values as without them.
            o.locate = true;
            auto located = ComputeHeatmap(*t, r, o);
            ASSERT_TRUE(located.ok()) << what << ": " << located.status();
            const Heatmap want = Reference(*t, r, mode, *located);
            ExpectSameBits(located->values, got->values, what + " located");
            EXPECT_EQ(located->cell_element, want.cell_element) << what;
            ++located_count;
          }
          if (mode == HeatmapMode::kErrorSteps) {
            // From a grid of the view's errors (computed at each SIMD
            // level): the same bits, and the same located elements.
            // (o.locate is on here, from the located check above.)
            auto located = ComputeHeatmap(*t, r, o);
            ASSERT_TRUE(located.ok()) << what << ": " << located.status();
            for (DecodeSimd level : {DecodeSimd::kScalar, DecodeSimd::kAvx2,
                                     DecodeSimd::kAvx512}) {
              if (level > SupportedDecodeSimd()) break;
              const std::string at = what + " from a grid made at simd " +
                                     std::to_string(static_cast<int>(level));
              CapDecodeSimdForTesting(level);
              auto grid = ComputeErrorGrid(*t, *r, {});
              CapDecodeSimdForTesting(DecodeSimd::kAvx512);
              ASSERT_TRUE(grid.ok()) << at << ": " << grid.status();
              HeatmapOptions from = o;
              from.locate = false;
              from.errors = &*grid;
              auto cells = ComputeHeatmap(*t, r, from);
              ASSERT_TRUE(cells.ok()) << at << ": " << cells.status();
              ExpectSameBits(cells->values, got->values, at);
              EXPECT_EQ(cells->groups, got->groups) << at;
              EXPECT_EQ(std::bit_cast<uint64_t>(cells->max),
                        std::bit_cast<uint64_t>(got->max))
                  << at;
              from.locate = true;
              auto cells_located = ComputeHeatmap(*t, r, from);
              ASSERT_TRUE(cells_located.ok()) << at;
              EXPECT_EQ(cells_located->cell_element, located->cell_element)
                  << at;
            }
            ++from_grid;
          }
          if (src.path == specials) {
            for (double v : got->values) {
              ++kinds[std::isnan(v)    ? 0
                      : v == INFINITY  ? 1
                      : v == -INFINITY ? 2
                                       : 3];
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(compared, 14 * 18 * 10);
  EXPECT_EQ(located_count, 14 * 18 * 3);
  EXPECT_EQ(from_grid, 14 * 18);
  for (int k = 0; k < 4; ++k) EXPECT_GT(kinds[k], 0) << "kind " << k;
}

// A view taller than one decoded batch of rows (the heatmap reads whole
// rows a batch at a time, a quarter of a million elements or fewer): bands
// of cells that a batch boundary cuts, keeping their lanes, column maxima
// and counts across it, and batches that hold several bands, are the same
// reduction at every SIMD level.
TEST(HeatmapReferenceTest,
     BandsAcrossDecodeBatchesAreTheStraightforwardReduction) {
  const std::string tall = WriteWildGguf(1100);  // 281,600 elements
  auto ckpt = Checkpoint::Open(tall);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor* t = (*ckpt)->FindTensor("a.weight");
  const LogicalTensor* x = (*ckpt)->FindTensor("b.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_NE(x, nullptr);
  struct Shape {
    int width, height;
    int64_t row_begin, row_end, col_begin, col_end;
  };
  const std::vector<Shape> shapes = {
      {16, 1, 0, 0, 0, 0},      // one band of every row
      {16, 3, 0, 0, 0, 0},      // bands of 366 and 367 rows
      {13, 300, 0, 0, 0, 0},    // bands of 3 and 4 rows, many a batch
      {7, 5, 5, 1090, 0, 0},    // whole rows from row 5
      {9, 4, 2, 1099, 3, 250},  // not whole rows: a row at a time
  };
  int compared = 0;
  for (const Shape& shape : shapes) {
    for (HeatmapMode mode :
         {HeatmapMode::kMean, HeatmapMode::kAbsmax, HeatmapMode::kErrorSteps,
          HeatmapMode::kZeros, HeatmapMode::kSqError}) {
      HeatmapOptions o;
      o.mode = mode;
      o.width = shape.width;
      o.height = shape.height;
      o.row_begin = shape.row_begin;
      o.row_end = shape.row_end;
      o.col_begin = shape.col_begin;
      o.col_end = shape.col_end;
      const LogicalTensor* r = mode == HeatmapMode::kErrorSteps ||
                                       mode == HeatmapMode::kZeros ||
                                       mode == HeatmapMode::kSqError
                                   ? x
                                   : nullptr;
      for (DecodeSimd level :
           {DecodeSimd::kScalar, DecodeSimd::kAvx2, DecodeSimd::kAvx512}) {
        if (level > SupportedDecodeSimd()) break;
        const std::string at =
            "mode " + std::to_string(static_cast<int>(mode)) + " " +
            std::to_string(shape.width) + "x" + std::to_string(shape.height) +
            " rows from " + std::to_string(shape.row_begin) + " simd " +
            std::to_string(static_cast<int>(level));
        CapDecodeSimdForTesting(level);
        auto got = ComputeHeatmap(*t, r, o);
        CapDecodeSimdForTesting(DecodeSimd::kAvx512);
        ASSERT_TRUE(got.ok()) << at << ": " << got.status();
        const Heatmap want = Reference(*t, r, mode, *got);
        ExpectSameBits(got->values, want.values, at + " values");
        ExpectSameBits(got->pruned, want.pruned, at + " pruned");
        EXPECT_EQ(got->groups, want.groups) << at;
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 5 * 5);
}

// A [300, 512] Q4_K tensor of random blocks: every byte random, so codes,
// scales and mins take every value and d and dmin every finite fp16 code
// (magnitudes 2^-24 to 65504: sums that round), with some blocks given NaN,
// infinite, zero, subnormal and largest d or dmin. The mean's lanes read
// these blocks in place (core/heatmap_q4k.h) where cells are 16, 32 or 64
// columns wide in whole chunks of 64 and the CPU has AVX2 or AVX-512.
std::string WriteRandomQ4_KGguf() {
  constexpr int64_t kRows = 300, kCols = 512;
  std::mt19937 rng(53);
  std::string data(kRows * kCols / 256 * 144, '\0');
  for (char& c : data) c = static_cast<char>(rng() & 0xff);
  const uint16_t planted[] = {0x7e00, 0x7c00, 0xfc00, 0x0000,
                              0x8000, 0x0001, 0x03ff, 0x7bff};
  for (size_t b = 0; b < data.size(); b += 144) {
    // d and dmin finite (a NaN in one block in 16 would make nearly every
    // cell NaN), then one block in 40 given a planted d or dmin.
    for (int k = 0; k < 2; ++k) {
      uint16_t h;
      std::memcpy(&h, data.data() + b + 2 * k, 2);
      if ((h & 0x7c00) == 0x7c00) h &= 0xbfff;
      std::memcpy(data.data() + b + 2 * k, &h, 2);
    }
    if (rng() % 40 == 0) {
      std::memcpy(data.data() + b + 2 * (rng() % 2), &planted[rng() % 8], 2);
    }
  }
  GgufSpec s;
  s.kv.push_back({"general.architecture", GgufString("llama")});
  s.tensors.push_back({"a.weight", {kCols, kRows}, 12, data});
  const std::string path = MakeTempDir() + "/random_q4_k.gguf";
  WriteFile(path, BuildGguf(s));
  return path;
}

// A region of cells for the blocks paths' tests.
struct BlocksShape {
  int width, height;
  int64_t row_begin, row_end, col_begin, col_end;
};

// The mean and absmax heatmaps of `t` over each of `shapes`, at every SIMD
// level, against the straightforward reduction of the decoded values, bit
// for bit. Counts the NaN and finite cells compared.
void ExpectMeanAndAbsmaxAreTheReduction(const LogicalTensor& t,
                                        const std::vector<BlocksShape>& shapes,
                                        int* nan_cells, int* finite_cells) {
  int compared = 0;
  for (const BlocksShape& shape : shapes) {
    for (HeatmapMode mode : {HeatmapMode::kMean, HeatmapMode::kAbsmax}) {
      HeatmapOptions o;
      o.mode = mode;
      o.width = shape.width;
      o.height = shape.height;
      o.row_begin = shape.row_begin;
      o.row_end = shape.row_end;
      o.col_begin = shape.col_begin;
      o.col_end = shape.col_end;
      for (DecodeSimd level :
           {DecodeSimd::kScalar, DecodeSimd::kAvx2, DecodeSimd::kAvx512}) {
        if (level > SupportedDecodeSimd()) break;
        const std::string at =
            "mode " + std::to_string(static_cast<int>(mode)) + " " +
            std::to_string(shape.width) + "x" + std::to_string(shape.height) +
            " from (" + std::to_string(shape.row_begin) + ", " +
            std::to_string(shape.col_begin) + ") simd " +
            std::to_string(static_cast<int>(level));
        CapDecodeSimdForTesting(level);
        auto got = ComputeHeatmap(t, nullptr, o);
        CapDecodeSimdForTesting(DecodeSimd::kAvx512);
        ASSERT_TRUE(got.ok()) << at << ": " << got.status();
        const Heatmap want = Reference(t, nullptr, mode, *got);
        ExpectSameBits(got->values, want.values, at);
        for (double v : got->values)
          (std::isnan(v) ? *nan_cells : *finite_cells)++;
        ++compared;
      }
    }
  }
  EXPECT_GE(compared, 2 * static_cast<int>(shapes.size()));
}

// The mean and absmax of Q4_K read from its blocks are the straightforward
// reduction of the decoded values, bit for bit, at every SIMD level: cells
// of 16, 32 and 64 columns (the mean's blocks path) and of any width
// (absmax's), regions that start on a chunk (64 columns) or off one
// (decoded as before), bands cut by decode batches (128 rows of 512) and
// batches of several bands.
TEST(HeatmapReferenceTest,
     Q4_KMeanAndAbsmaxFromItsBlocksAreTheStraightforwardReduction) {
  auto ckpt = Checkpoint::Open(WriteRandomQ4_KGguf());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor* t = (*ckpt)->FindTensor("a.weight");
  ASSERT_NE(t, nullptr);
  // The blocks path is taken at both vector levels, not only its answer
  // checked.
  ASSERT_NE(StoredQ4KBlocks(*t), nullptr);
#if defined(__x86_64__)
  std::vector<int64_t> run;
  for (int64_t c = 0; c <= 512; c += 16) run.push_back(c);
  EXPECT_TRUE(Q4KMeanLanesApply(DecodeSimd::kAvx2, 0, 512, run));
  EXPECT_TRUE(Q4KMeanLanesApply(DecodeSimd::kAvx512, 0, 512, run));
  EXPECT_FALSE(Q4KMeanLanesApply(DecodeSimd::kScalar, 0, 512, run));
#endif
  int nan_cells = 0, finite_cells = 0;
  ExpectMeanAndAbsmaxAreTheReduction(
      *t,
      {
          {32, 300, 0, 0, 0, 0},     // 16 columns, a band per row
          {32, 7, 0, 0, 0, 0},       // bands of 42 and 43 rows across batches
          {16, 1, 0, 0, 0, 0},       // 32 columns, one band of every row
          {8, 19, 0, 0, 0, 0},       // 64 columns
          {12, 5, 3, 290, 64, 448},  // a region from a chunk: 32 columns
          {6, 4, 1, 0, 192, 0},      // from the last chunk of a super-block
          {20, 3, 0, 0, 16, 336},    // off a chunk: decoded
          {24, 9, 0, 0, 0, 0},       // cells of 21 and 22: the mean decoded
      },
      &nan_cells, &finite_cells);
  // Random d and dmin make some cells NaN and leave others finite: both
  // kinds were compared.
  EXPECT_GT(nan_cells, 0);
  EXPECT_GT(finite_cells, 0);
}

// A [300, 512] Q8_0 tensor of random blocks: every code random, d every
// finite fp16 code (magnitudes 2^-24 to 65504: sums that round), with one
// block in 40 given NaN, infinite, zero, -0, subnormal or largest d, and
// one in 30 all codes -128 (the one code whose magnitude is not a positive
// int8's). The mean's lanes and absmax's maxima read these blocks in place
// (core/heatmap_q8.h) with AVX-512 or AVX2.
std::string WriteRandomQ8_0Gguf() {
  constexpr int64_t kRows = 300, kCols = 512;
  std::mt19937 rng(59);
  std::string data(kRows * kCols / 32 * 34, '\0');
  for (char& c : data) c = static_cast<char>(rng() & 0xff);
  const uint16_t planted[] = {0x7e00, 0x7c00, 0xfc00, 0x0000,
                              0x8000, 0x0001, 0x03ff, 0x7bff};
  for (size_t b = 0; b < data.size(); b += 34) {
    uint16_t h;
    std::memcpy(&h, data.data() + b, 2);
    if ((h & 0x7c00) == 0x7c00) h &= 0xbfff;  // finite, as in Q4_K's
    if (rng() % 40 == 0) h = planted[rng() % 8];
    std::memcpy(data.data() + b, &h, 2);
    if (rng() % 30 == 0) std::memset(data.data() + b + 2, 0x80, 32);
  }
  GgufSpec s;
  s.kv.push_back({"general.architecture", GgufString("llama")});
  s.tensors.push_back({"a.weight", {kCols, kRows}, 8, data});
  const std::string path = MakeTempDir() + "/random_q8_0.gguf";
  WriteFile(path, BuildGguf(s));
  return path;
}

// The same of Q8_0: cells of 16, 32 and 64 columns in chunks of 64 (the
// mean's blocks path), regions from a block (32 columns) that is not a
// chunk's first, from a block in a row's middle and rows down, off a
// block (decoded as before), and cells of uneven width (absmax's blocks
// path, the mean decoded).
TEST(HeatmapReferenceTest,
     Q8_0MeanAndAbsmaxFromItsBlocksAreTheStraightforwardReduction) {
  auto ckpt = Checkpoint::Open(WriteRandomQ8_0Gguf());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor* t = (*ckpt)->FindTensor("a.weight");
  ASSERT_NE(t, nullptr);
  // The blocks path is taken (where the CPU has it), not only its answer
  // checked: a whole row of 512 columns in cells of 16, and its maxima.
  ASSERT_NE(StoredQ8Blocks(*t), nullptr);
#if defined(__x86_64__)
  std::vector<int64_t> run;
  for (int64_t c = 0; c <= 512; c += 16) run.push_back(c);
  if (SupportedDecodeSimd() >= DecodeSimd::kAvx512 &&
      __builtin_cpu_supports("avx512dq")) {
    EXPECT_TRUE(Q8MeanLanesApply(DecodeSimd::kAvx512, 0, 512, run));
    EXPECT_TRUE(Q8ColumnMaxApply(DecodeSimd::kAvx512, 0, 512, 512));
  }
  if (SupportedDecodeSimd() >= DecodeSimd::kAvx2 &&
      __builtin_cpu_supports("fma")) {
    EXPECT_TRUE(Q8MeanLanesApply(DecodeSimd::kAvx2, 0, 512, run));
    EXPECT_TRUE(Q8ColumnMaxApply(DecodeSimd::kAvx2, 0, 512, 512));
  }
  EXPECT_FALSE(Q8MeanLanesApply(DecodeSimd::kScalar, 0, 512, run));
#endif
  int nan_cells = 0, finite_cells = 0;
  ExpectMeanAndAbsmaxAreTheReduction(
      *t,
      {
          {32, 300, 0, 0, 0, 0},     // 16 columns, a band per row
          {32, 7, 0, 0, 0, 0},       // bands of 42 and 43 rows across batches
          {16, 1, 0, 0, 0, 0},       // 32 columns, one band of every row
          {8, 19, 0, 0, 0, 0},       // 64 columns
          {4, 6, 0, 0, 32, 288},     // 64 columns from a chunk's second block
          {12, 5, 3, 290, 96, 480},  // 32 columns from row 3
          {4, 2, 7, 11, 448, 512},   // 16 columns, a row's last two blocks
          {20, 3, 0, 0, 16, 336},    // off a block: decoded
          {24, 9, 0, 0, 0, 0},       // cells of 21 and 22: the mean decoded
          {3, 3, 0, 0, 32, 0},       // 160 columns: the mean decoded
      },
      &nan_cells, &finite_cells);
  EXPECT_GT(nan_cells, 0);
  EXPECT_GT(finite_cells, 0);
}

}  // namespace
}  // namespace tensormorph
