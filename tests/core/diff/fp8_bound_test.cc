// The FP8 rounding bound (core/quant/rounding_bound.h, float_codes): half a
// step, plus the source's own rounding taken at each element's level, never
// at the range's end. Held on the shared block-scaled fixture and on what a
// round-to-nearest quantizer writes for every flavour: e4m3 and e5m2,
// per-tensor and block scales, against float32, f16 and bf16 sources.
#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/diff/tensor_diff.h"
#include "core/format/checkpoint.h"
#include "core/quant/float_formats.h"
#include "gtest/gtest.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph::fp8_bound_test {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::Bytes;
using ::tensormorph::testing::F32ToBF16Bits;
using ::tensormorph::testing::F32ToF16Bits;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::Gaussian;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::WriteFile;

absl::StatusOr<TensorDiff> DiffOf(const std::string& quant_dir,
                                  const std::string& source_dir,
                                  const std::string& name) {
  auto quant = Checkpoint::Open(quant_dir);
  auto source = Checkpoint::Open(source_dir);
  if (!quant.ok()) return quant.status();
  if (!source.ok()) return source.status();
  return DiffTensor(*(*quant)->FindTensor(name), *(*source)->FindTensor(name),
                    DiffOptions());
}

// The bound of an element on a float grid whose levels are at most `ratio`
// of their step towards the source (16 for e4m3: a power of two seen from
// below): half a step, and the source's relative rounding `rel` at its level
// and at a step beyond it.
double FloatGridBound(double ratio, double rel) {
  return 0.5 + (ratio + 1) * rel;
}

// DeepSeek-V3's release: e4m3 in 128x128 blocks against a bf16 source.
TEST(Fp8BoundTest, BlockScaledE4M3AgainstBf16IsHalfAStepAndSeventeenHalfUlps) {
  const std::string dir = Fixture("safetensors/fp8_block_sharded");
  for (const char* name : {"model.layers.0.mlp.down_proj.weight",
                           "model.layers.0.self_attn.o_proj.weight"}) {
    SCOPED_TRACE(name);
    auto d = DiffOf(dir, dir + "/source", name);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_NEAR(d->bound_steps, FloatGridBound(16, 0x1p-8), 1e-4);
    EXPECT_LE(d->max_err_steps, d->bound_steps);
    EXPECT_EQ(d->max_excess_steps, 0);
  }
}

struct Flavour {
  const char* dtype;  // safetensors dtype of the codes
  float (*decode)(uint8_t);
  double max_level;  // the largest finite level
  double finest;     // the subnormal step
  double ratio;      // the largest level / step towards it from below
  bool block;        // 128x128 blocks, else one per-tensor scale
  const char* source;
  double rel;  // the source's relative rounding
};

std::string NameOf(const ::testing::TestParamInfo<Flavour>& info) {
  const Flavour& f = info.param;
  return absl::StrCat(f.dtype, f.block ? "_Block_" : "_Tensor_", f.source);
}

void PrintTo(const Flavour& f, std::ostream* os) {
  *os << f.dtype << (f.block ? " block-scaled" : " tensor-scaled")
      << " against " << f.source;
}

class Fp8FlavourBoundTest : public ::testing::TestWithParam<Flavour> {};

constexpr int64_t kRows = 256, kCols = 256, kBlock = 128;

// The nearest finite level to v (ties to the even code), as a cast to fp8
// rounds.
uint8_t NearestCode(const Flavour& f, float v) {
  int best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (int c = 0; c < 256; ++c) {
    const double level = f.decode(static_cast<uint8_t>(c));
    if (!std::isfinite(level)) continue;
    const double err = std::fabs(level - v);
    if (err < best_err || (err == best_err && c % 2 == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

std::string SourceBytes(const std::string& dtype, const std::vector<float>& w) {
  if (dtype == "F32") return Bytes(w);
  std::vector<uint16_t> h;
  for (float v : w)
    h.push_back(dtype == "F16" ? F32ToF16Bits(v) : F32ToBF16Bits(v));
  return Bytes(h);
}

// Float32 weights quantized as the fp8 releases do (scale = group absmax /
// the largest level, codes the nearest level of w / scale), the source
// released in the flavour's dtype beside them.
struct Release {
  std::vector<float> weights, scales;
  std::string codes;
  std::string dir, source;

  explicit Release(const Flavour& f) : weights(Gaussian(kRows * kCols, 11)) {
    // A row of tiny weights puts codes on the subnormals, the finest steps.
    for (int64_t c = 0; c < kCols; ++c) weights[7 * kCols + c] *= 1e-3f;
    const int64_t grid = f.block ? kRows / kBlock : 1;
    auto group = [&](int64_t i) {
      return f.block ? (i / kCols / kBlock) * grid + (i % kCols) / kBlock : 0;
    };
    scales.assign(grid * grid, 0);
    for (int64_t i = 0; i < kRows * kCols; ++i) {
      float& s = scales[group(i)];
      s = std::max(s, std::fabs(weights[i]));
    }
    for (float& s : scales) s = static_cast<float>(s / f.max_level);
    codes.assign(kRows * kCols, '\0');
    for (int64_t i = 0; i < kRows * kCols; ++i) {
      codes[i] =
          static_cast<char>(NearestCode(f, weights[i] / scales[group(i)]));
    }
    source = MakeTempDir();
    WriteFile(source + "/model.safetensors",
              BuildSafetensors({{"l.weight",
                                 f.source,
                                 {kRows, kCols},
                                 SourceBytes(f.source, weights)}}));
    dir = MakeTempDir();
    Write(f);
  }

  // The quantized checkpoint with the codes as they are now.
  void Write(const Flavour& f) const {
    const int64_t grid = f.block ? kRows / kBlock : 1;
    WriteFile(dir + "/model.safetensors",
              BuildSafetensors(
                  {{"l.weight", f.dtype, {kRows, kCols}, codes},
                   {f.block ? "l.weight_scale_inv" : "l.weight_scale", "F32",
                    f.block ? std::vector<int64_t>{grid, grid}
                            : std::vector<int64_t>{1},
                    Bytes(scales)}}));
    WriteFile(dir + "/config.json",
              f.block ? R"({"quantization_config": {"quant_method": "fp8",)"
                        R"( "weight_block_size": [128, 128]}})"
                      : R"({"quantization_config": {"quant_method": "fp8",)"
                        R"( "activation_scheme": "static"}})");
  }
};

TEST_P(Fp8FlavourBoundTest, ARoundToNearestQuantizerIsWithinTheStatedBound) {
  const Flavour& f = GetParam();
  const Release r(f);
  auto d = DiffOf(r.dir, r.source, "l.weight");
  ASSERT_TRUE(d.ok()) << d.status();
  RecordProperty("bound_steps", absl::StrFormat("%.6f", d->bound_steps));
  EXPECT_EQ(d->max_excess_steps, 0);
  EXPECT_LE(d->max_err_steps, d->bound_steps);
  // Reached at a power of two; float arithmetic (2^-20 of each value) aside.
  EXPECT_GE(d->bound_steps, FloatGridBound(f.ratio, f.rel));
  double most = FloatGridBound(f.ratio, f.rel) + 1e-4;
  if (std::string(f.source) == "F16") {
    // Below 2^-14 an f16 rounds by 2^-25 whatever the value: most over the
    // finest step of the smallest scale.
    float least = r.scales[0];
    for (float s : r.scales) least = std::min(least, s);
    most += 0x1p-25 / (least * f.finest);
  }
  EXPECT_LE(d->bound_steps, most);
}

// The bound stays tight enough to see a code one level off where its level
// was hit closely (e5m2's range ends are infinite: a slack taken there would
// pass anything).
TEST_P(Fp8FlavourBoundTest, ACodeOneLevelOffIsNotNearest) {
  const Flavour& f = GetParam();
  Release r(f);
  // In a Gaussian row, an element within a tenth of a step of its level
  // (per-tensor scale, or row 3's first block): one level up is 0.9 steps.
  const float scale = r.scales[0];
  int64_t at = -1;
  for (int64_t i = 3 * kCols; i < 3 * kCols + kBlock && at < 0; ++i) {
    const auto c = static_cast<uint8_t>(r.codes[i]);
    const double level = f.decode(c), up = f.decode(c + 1);
    if (std::fabs(level - r.weights[i] / scale) < 0.1 * std::fabs(up - level)) {
      at = i;
    }
  }
  ASSERT_GE(at, 0);
  r.codes[at] = static_cast<char>(r.codes[at] + 1);
  r.Write(f);
  auto d = DiffOf(r.dir, r.source, "l.weight");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->not_nearest, 1);
  EXPECT_GT(d->max_excess_steps, 0.3);
  ASSERT_TRUE(d->max_excess_element.has_value());
  EXPECT_EQ(d->max_excess_element->flat_index, at);
}

constexpr Flavour Of(const char* dtype, bool block, const char* source) {
  const bool e4m3 = dtype[4] == '4';
  const double rel = source[0] == 'B' ? 0x1p-8 : source[1] == '1' ? 0x1p-11 : 0;
  return e4m3 ? Flavour{dtype, F8E4M3ToF32, 448, 0x1p-9, 16, block, source, rel}
              : Flavour{dtype, F8E5M2ToF32, 57344,  0x1p-16,
                        8,     block,       source, rel};
}

INSTANTIATE_TEST_SUITE_P(
    EveryFlavourAndSource, Fp8FlavourBoundTest,
    ::testing::Values(Of("F8_E4M3", false, "F32"), Of("F8_E4M3", false, "F16"),
                      Of("F8_E4M3", false, "BF16"), Of("F8_E4M3", true, "F32"),
                      Of("F8_E4M3", true, "F16"), Of("F8_E4M3", true, "BF16"),
                      Of("F8_E5M2", false, "F32"), Of("F8_E5M2", false, "F16"),
                      Of("F8_E5M2", false, "BF16"), Of("F8_E5M2", true, "F32"),
                      Of("F8_E5M2", true, "F16"), Of("F8_E5M2", true, "BF16")),
    NameOf);

}  // namespace
}  // namespace tensormorph::fp8_bound_test
