// The squared-error heatmap (HeatmapMode::kSqError): each cell is the sum of
// its elements' w * (x - x̂)^2 in double, in heatmap.h's 16 lanes (the term
// at column offset k of its cell into partial sum k % 16, each lane in
// row-major order, then the fixed tree), held bit for bit to a plain loop
// over the test's own values (sources, the float16 codes it wrote, and the
// matrix's weights) at every SIMD level, NaN and infinities included;
// unweighted is weights of 1; a 3-D MoE tensor's view at leading index e
// takes expert e's weights; and a full-resolution map adds up to what the
// weighted diff (DiffTensor) gives.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/diff/tensor_diff.h"
#include "core/diff/weighted_error.h"
#include "core/format/checkpoint.h"
#include "core/heatmap.h"
#include "core/imatrix/importance_matrix.h"
#include "core/quant/decode_simd.h"
#include "core/quant/float_formats.h"
#include "core/util/error_reason.h"
#include "gtest/gtest.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph::heatmap_sq_error_test {
namespace {

using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::testing::AllOf;

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}
template <typename T>
std::string Le(T v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
}

// A source tensor `x` and its "quantization" `q`: x rounded to 1/16, which
// float16 holds exactly for |x| < 64, so the test knows every decoded value
// without decoding (x̂ = q). Written as an F32 and an F16 safetensors file of
// one tensor `name`, with a legacy imatrix entry of `experts` * K values.
// With `specials`, one element in 89 of x is NaN, +inf, -inf, or a value
// float16 rounds to an infinity (1e6, -7e5): terms of NaN (inf - inf
// included) and of +inf.
struct Case {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> x, q;
  std::shared_ptr<const Checkpoint> src, quant;
  std::shared_ptr<const ImportanceMatrix> matrix;
  const LogicalTensor* ref = nullptr;
  const LogicalTensor* tensor = nullptr;
  std::vector<float> w;  // the matrix entry's weights, expert-major
};

std::unique_ptr<Case> MakeCase(const std::string& dir, const std::string& name,
                               std::vector<int64_t> shape, uint64_t seed,
                               bool specials = false) {
  auto c = std::make_unique<Case>();
  c->name = name;
  c->shape = shape;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  c->x = testing::Gaussian(static_cast<size_t>(n), seed, 3.0f);
  if (specials) {
    const float planted[] = {std::numeric_limits<float>::quiet_NaN(),
                             std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(), 1e6f,
                             -7e5f};
    for (size_t i = 5; i < c->x.size(); i += 89) c->x[i] = planted[i % 5];
  }
  std::string f16;
  for (float v : c->x) {
    const uint16_t code = testing::F32ToF16Bits(std::round(v * 16.0f) / 16.0f);
    c->q.push_back(F16ToF32(code));
    f16 += Le<uint16_t>(code);
  }
  std::filesystem::create_directories(dir + "/src");
  std::filesystem::create_directories(dir + "/q");
  testing::WriteFile(
      dir + "/src/model.safetensors",
      testing::BuildSafetensors({{name, "F32", shape, Floats(c->x)}}));
  testing::WriteFile(dir + "/q/model.safetensors",
                     testing::BuildSafetensors({{name, "F16", shape, f16}}));
  // Importances far apart (1/8 to 2^10), distinct per column and expert,
  // so that a wrong column or expert shows.
  const int64_t k = shape.back(), experts = shape.size() == 3 ? shape[0] : 1;
  std::vector<float> sums;
  for (int64_t i = 0; i < experts * k; ++i)
    sums.push_back(
        std::ldexp(1.0f + 0.03f * static_cast<float>(i), i % 14 - 3));
  const std::string entry =
      Le<int32_t>(static_cast<int32_t>(name.size())) + name + Le<int32_t>(4) +
      Le<int32_t>(static_cast<int32_t>(sums.size())) + Floats(sums);
  const std::string bytes = Le<int32_t>(1) + entry;
  auto m = ImportanceMatrix::Parse(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()),
                          bytes.size()),
      "test.imatrix");
  EXPECT_TRUE(m.ok()) << m.status();
  c->matrix = *m;
  c->w = c->matrix->Find(name)->weights;
  auto src = Checkpoint::Open(dir + "/src");
  auto quant = Checkpoint::Open(dir + "/q");
  EXPECT_TRUE(src.ok() && quant.ok());
  c->src = *src;
  c->quant = *quant;
  c->ref = c->src->FindTensor(name);
  c->tensor = c->quant->FindTensor(name);
  return c;
}

std::string TempDir(const std::string& leaf) {
  const std::string dir = ::testing::TempDir() + "/heatmap_sq_error_" + leaf;
  std::filesystem::remove_all(dir);
  return dir;
}

// The cell [r0, r1) x [c0, c1) of expert `e`'s view, as heatmap.h states
// it: each term w * (x - x̂)^2 into lane (col - c0) % 16, each lane from
// +0.0 in row-major order (rows top to bottom, each left to right), then
// the lanes (0+8) ... (7+15), those as (0+4) ... (3+7), then (0+2), (1+3),
// then the two; every operation in double rounded on its own; w = 1 when
// `weighted` is false; a NaN cell the canonical quiet NaN.
double PlainCell(const Case& c, int64_t e, int64_t r0, int64_t r1, int64_t c0,
                 int64_t c1, bool weighted) {
  const int64_t k = c.shape.back(), rows = c.shape[c.shape.size() - 2];
  double l[16] = {};
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t col = c0; col < c1; ++col) {
      const size_t i = static_cast<size_t>((e * rows + r) * k + col);
      const double d =
          static_cast<double>(c.x[i]) - static_cast<double>(c.q[i]);
      const double term = d * d;
      l[(col - c0) % 16] +=
          weighted ? static_cast<double>(c.w[e * k + col]) * term : term;
    }
  }
  double a[8], b[4];
  for (int t = 0; t < 8; ++t) a[t] = l[t] + l[t + 8];
  for (int t = 0; t < 4; ++t) b[t] = a[t] + a[t + 4];
  const double sum = (b[0] + b[2]) + (b[1] + b[3]);
  return std::isnan(sum) ? std::numeric_limits<double>::quiet_NaN() : sum;
}

// Every cell of `h` against PlainCell, bit for bit.
void ExpectPlainCells(const Case& c, int64_t e, const Heatmap& h,
                      bool weighted) {
  ASSERT_EQ(h.values.size(), static_cast<size_t>(h.width) * h.height);
  for (int i = 0; i < h.height; ++i) {
    for (int j = 0; j < h.width; ++j) {
      const double want =
          PlainCell(c, e, h.row_edges[i], h.row_edges[i + 1], h.col_edges[j],
                    h.col_edges[j + 1], weighted);
      const double got = h.values[static_cast<size_t>(i) * h.width + j];
      EXPECT_EQ(std::bit_cast<uint64_t>(got), std::bit_cast<uint64_t>(want))
          << "cell (" << i << ", " << j << "): " << got << " vs " << want;
    }
  }
}

TEST(HeatmapSqErrorTest, EachCellIsItsElementsWeightedSquaredErrors) {
  auto c = MakeCase(TempDir("2d"), "blk.0.attn_q.weight", {37, 70}, 3);
  const ImatrixMatch m = MatchImatrix(c->matrix.get(), c->name, c->shape);
  ASSERT_EQ(m.use, ImatrixUse::kWeighted);
  HeatmapOptions o;
  o.mode = HeatmapMode::kSqError;
  o.weights = &m.weights;
  // Cells of uneven sizes over the whole view, then over a region.
  o.width = 9;
  o.height = 5;
  auto whole = ComputeHeatmap(*c->tensor, c->ref, o);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->width, 9);
  ExpectPlainCells(*c, 0, *whole, true);
  o.row_begin = 3;
  o.row_end = 30;
  o.col_begin = 11;
  o.col_end = 64;
  auto region = ComputeHeatmap(*c->tensor, c->ref, o);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->row_edges.front(), 3);
  EXPECT_EQ(region->col_edges.back(), 64);
  ExpectPlainCells(*c, 0, *region, true);
  EXPECT_GT(region->max, region->min);
}

// Cells of every width against the lanes (narrower than 16, 16 and 17, wide
// ones that wrap them with remainders 1 to 15, a multiple of 16), over the
// view and over regions, weighted and not, at every SIMD level this CPU has
// (CapDecodeSimdForTesting: the scalar statement, AVX2's vectors of four,
// AVX-512's of eight with masked tails), on sources with NaN and
// infinities: the same bits at each.
TEST(HeatmapSqErrorTest, EverySimdLevelAddsInTheLanesOrder) {
  auto c = MakeCase(TempDir("levels"), "blk.0.ffn_down.weight", {29, 203}, 17,
                    /*specials=*/true);
  const ImatrixMatch m = MatchImatrix(c->matrix.get(), c->name, c->shape);
  ASSERT_EQ(m.use, ImatrixUse::kWeighted);
  struct Shape {
    int width, height;
    int64_t row_begin, row_end, col_begin, col_end;
  };
  const std::vector<Shape> shapes = {
      {203, 29, 0, 0, 0, 0},   // one element per cell
      {12, 4, 0, 0, 0, 0},     // 16 and 17 columns
      {5, 3, 0, 0, 0, 0},      // 40 and 41
      {3, 2, 0, 0, 0, 0},      // 67 and 68
      {1, 1, 0, 0, 0, 0},      // 203: 12 sixteens and 11
      {2, 7, 0, 0, 11, 0},     // 96: six sixteens
      {13, 5, 2, 27, 7, 190},  // a region: 14 and 15
      {4, 3, 1, 28, 3, 200},   // a region: 49 and 50
  };
  int64_t nan_cells = 0, inf_cells = 0, finite_cells = 0;
  for (const Shape& shape : shapes) {
    for (bool weighted : {false, true}) {
      HeatmapOptions o;
      o.mode = HeatmapMode::kSqError;
      o.weights = weighted ? &m.weights : nullptr;
      o.width = shape.width;
      o.height = shape.height;
      o.row_begin = shape.row_begin;
      o.row_end = shape.row_end;
      o.col_begin = shape.col_begin;
      o.col_end = shape.col_end;
      for (DecodeSimd level :
           {DecodeSimd::kScalar, DecodeSimd::kAvx2, DecodeSimd::kAvx512}) {
        if (level > SupportedDecodeSimd()) break;
        SCOPED_TRACE(::testing::Message()
                     << shape.width << "x" << shape.height << " from ("
                     << shape.row_begin << ", " << shape.col_begin << ")"
                     << (weighted ? " weighted" : "") << " simd "
                     << static_cast<int>(level));
        CapDecodeSimdForTesting(level);
        auto h = ComputeHeatmap(*c->tensor, c->ref, o);
        CapDecodeSimdForTesting(DecodeSimd::kAvx512);
        ASSERT_TRUE(h.ok()) << h.status();
        ExpectPlainCells(*c, 0, *h, weighted);
        for (double v : h->values)
          ++(std::isnan(v)   ? nan_cells
             : std::isinf(v) ? inf_cells
                             : finite_cells);
      }
    }
  }
  // NaN, +inf and finite cells all met (squares are never negative).
  EXPECT_GT(nan_cells, 0);
  EXPECT_GT(inf_cells, 0);
  EXPECT_GT(finite_cells, 0);
}

TEST(HeatmapSqErrorTest, UnweightedIsWeightsOfOne) {
  auto c = MakeCase(TempDir("ones"), "w", {20, 48}, 5);
  const std::vector<float> ones(48, 1.0f);
  const TensorWeights one{ones.data(), 48, 20 * 48};
  HeatmapOptions o;
  o.mode = HeatmapMode::kSqError;
  o.width = 7;
  o.height = 6;
  auto plain = ComputeHeatmap(*c->tensor, c->ref, o);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ExpectPlainCells(*c, 0, *plain, false);
  o.weights = &one;
  auto by_ones = ComputeHeatmap(*c->tensor, c->ref, o);
  ASSERT_TRUE(by_ones.ok()) << by_ones.status();
  ASSERT_EQ(by_ones->values.size(), plain->values.size());
  for (size_t k = 0; k < plain->values.size(); ++k) {
    EXPECT_EQ(std::bit_cast<uint64_t>(by_ones->values[k]),
              std::bit_cast<uint64_t>(plain->values[k]))
        << k;
  }
}

TEST(HeatmapSqErrorTest, AnExpertsViewTakesThatExpertsWeights) {
  auto c = MakeCase(TempDir("moe"), "blk.0.ffn_up_exps.weight", {3, 9, 40}, 9);
  const ImatrixMatch m = MatchImatrix(c->matrix.get(), c->name, c->shape);
  ASSERT_EQ(m.use, ImatrixUse::kWeighted);
  HeatmapOptions o;
  o.mode = HeatmapMode::kSqError;
  o.weights = &m.weights;
  o.width = 6;
  o.height = 4;
  for (int64_t e : {0, 1, 2, -1}) {
    SCOPED_TRACE(e);
    o.leading = {e};
    auto h = ComputeHeatmap(*c->tensor, c->ref, o);
    ASSERT_TRUE(h.ok()) << h.status();
    ExpectPlainCells(*c, e < 0 ? 3 + e : e, *h, true);
  }
}

// At one cell per element, a whole tensor's cells (every expert's view)
// summed in row-major order give the diff's weighted_sq_err, and unweighted
// its mse times the count, up to the order of the additions.
TEST(HeatmapSqErrorTest, FullResolutionCellsSumToTheWeightedDiff) {
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{33, 64}, std::vector<int64_t>{3, 8, 32}}) {
    SCOPED_TRACE(shape.size());
    auto c = MakeCase(TempDir(std::to_string(shape.size())), "t", shape, 11);
    const ImatrixMatch m = MatchImatrix(c->matrix.get(), c->name, c->shape);
    ASSERT_EQ(m.use, ImatrixUse::kWeighted);
    const int64_t experts = shape.size() == 3 ? shape[0] : 1;
    double weighted = 0, plain = 0;
    for (int64_t e = 0; e < experts; ++e) {
      HeatmapOptions o;
      o.mode = HeatmapMode::kSqError;
      o.width = static_cast<int>(shape.back());
      o.height = static_cast<int>(shape[shape.size() - 2]);
      if (shape.size() == 3) o.leading = {e};
      auto u = ComputeHeatmap(*c->tensor, c->ref, o);
      o.weights = &m.weights;
      auto h = ComputeHeatmap(*c->tensor, c->ref, o);
      ASSERT_TRUE(h.ok() && u.ok()) << h.status() << u.status();
      ASSERT_EQ(h->values.size(), static_cast<size_t>(o.width) * o.height);
      for (double v : h->values) weighted += v;
      for (double v : u->values) plain += v;
    }
    DiffOptions d;
    d.imatrix = c->matrix;
    auto diff = DiffTensor(*c->tensor, *c->ref, d);
    ASSERT_TRUE(diff.ok()) << diff.status();
    ASSERT_EQ(diff->imatrix_use, ImatrixUse::kWeighted);
    ASSERT_GT(diff->weighted.sum_w_sq_err, 0);
    EXPECT_NEAR(weighted, diff->weighted.sum_w_sq_err,
                1e-12 * diff->weighted.sum_w_sq_err);
    const double n = static_cast<double>(c->x.size());
    EXPECT_NEAR(plain, diff->mse * n, 1e-12 * diff->mse * n);
  }
}

TEST(HeatmapSqErrorTest, RefusesWhatItCannotWeighOrMeasure) {
  auto c = MakeCase(TempDir("refusals"), "w", {4, 32}, 13);
  const ImatrixMatch m = MatchImatrix(c->matrix.get(), c->name, c->shape);
  HeatmapOptions o;
  o.mode = HeatmapMode::kSqError;
  // No reference: nothing to measure against.
  EXPECT_THAT(ComputeHeatmap(*c->tensor, nullptr, o).status(),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    HasMetadata("field", "ref")));
  // Weights in another mode.
  o.mode = HeatmapMode::kMean;
  o.weights = &m.weights;
  EXPECT_THAT(ComputeHeatmap(*c->tensor, c->ref, o).status(),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    HasMetadata("field", "weights")));
  // Weights sized for another tensor: 16 columns where it has 32.
  o.mode = HeatmapMode::kSqError;
  const TensorWeights narrow{m.weights.weights, 16, 4 * 16};
  o.weights = &narrow;
  EXPECT_THAT(ComputeHeatmap(*c->tensor, c->ref, o).status(),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    HasMetadata("field", "weights")));
  // Nor does it locate elements.
  o.weights = &m.weights;
  o.locate = true;
  EXPECT_THAT(ComputeHeatmap(*c->tensor, c->ref, o).status(),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    HasMetadata("field", "locate")));
}

}  // namespace
}  // namespace tensormorph::heatmap_sq_error_test
