// The plain float error pass (core/diff/float_runs.h): every key's run has
// the steps and range Inspect gives each element of that key; the fast path
// agrees with the scalar reference bit for bit on F32, F16, BF16 and FP8
// values with NaN, infinities, subnormals, zeros, the largest finite values
// and sources beyond the range; and a diff split into parts at segment
// boundaries merges to the very bits of the whole diff.
#include "core/diff/float_runs.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/diff/tensor_diff.h"
#include "core/format/checkpoint.h"
#include "gtest/gtest.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/same_bits.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph::float_runs_test {
namespace {

using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::SameBits;

struct Format {
  const char* dtype;
  int bytes;
  double rel;  // a relative error of a few steps
};
constexpr Format kFormats[] = {{"F32", 4, 0x1p-21},
                               {"F16", 2, 0x1p-9},
                               {"BF16", 2, 0x1p-6},
                               {"F8_E4M3", 1, 0x1p-2},
                               {"F8_E5M2", 1, 0x1p-1}};

// Random codes of the format, one in eight of them a special one: zeros of
// both signs, the largest finite, NaN and infinity patterns, subnormals.
std::string RandomCodes(const Format& f, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string bytes(static_cast<size_t>(n * f.bytes), '\0');
  const uint32_t special[] = {0x0,        0x80000000, 0x7F7FFFFF, 0x7F800000,
                              0xFF800000, 0x7FC00000, 0x1,        0x807FFFFF};
  const uint32_t special16[] = {0x0,    0x8000, 0x7BFF, 0x7C00,
                                0xFC00, 0x7E00, 0x0001, 0x83FF};
  const uint32_t special8[] = {0x0, 0x80, 0x7E, 0x7F, 0xFF, 0x7B, 0x01, 0x83};
  for (int64_t i = 0; i < n; ++i) {
    uint32_t c = static_cast<uint32_t>(rng());
    if (rng() % 8 == 0) {
      const int k = static_cast<int>(rng() % 8);
      c = f.bytes == 4 ? special[k] : f.bytes == 2 ? special16[k] : special8[k];
    } else if (f.bytes == 4) {
      // Values around 1 mostly, so that sources near them are meaningful.
      c = (c & 0x807FFFFF) | (static_cast<uint32_t>(100 + rng() % 50) << 23);
    }
    std::memcpy(&bytes[static_cast<size_t>(i * f.bytes)], &c, f.bytes);
  }
  return bytes;
}

// Sources for decoded values: exact, zero, NaN, infinite, beyond any range,
// subnormal, or a few steps off.
std::vector<float> Sources(const std::vector<float>& v, double rel,
                           uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<float> x(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double base = std::isfinite(v[i]) ? v[i] : 1.0;
    switch (rng() % 12) {
      case 0:
        x[i] = v[i];
        break;
      case 1:
        x[i] = 0;
        break;
      case 2:
        x[i] = std::numeric_limits<float>::quiet_NaN();
        break;
      case 3:
        x[i] = rng() % 2 ? INFINITY : -INFINITY;
        break;
      case 4:
        x[i] = rng() % 2 ? 3e38f : -1e36f;
        break;
      case 5:
        x[i] = 1e-40f;
        break;
      default:
        x[i] = static_cast<float>(base * (1 + u(rng) * rel));
        break;
    }
  }
  return x;
}

struct Pair {
  std::string dir;
  std::shared_ptr<const Checkpoint> quant, ref;
};

// quant.safetensors: one [rows, 1000] tensor per format; source: its
// sources as F32 under the same names.
Pair WritePair(int64_t rows, uint32_t seed) {
  Pair p;
  p.dir = testing::MakeTempDir();
  const int64_t n = rows * 1000;
  std::vector<testing::StTensor> q;
  for (const Format& f : kFormats) {
    q.push_back({f.dtype, f.dtype, {rows, 1000}, RandomCodes(f, n, seed)});
  }
  testing::WriteFile(p.dir + "/quant.safetensors",
                     testing::BuildSafetensors(q));
  p.quant = *Checkpoint::Open(p.dir + "/quant.safetensors");
  std::vector<testing::StTensor> s;
  for (const Format& f : kFormats) {
    std::vector<float> v(static_cast<size_t>(n));
    EXPECT_TRUE(
        p.quant->FindTensor(f.dtype)->encoding->Decode(0, n, v.data()).ok());
    s.push_back({f.dtype,
                 "F32",
                 {rows, 1000},
                 testing::Bytes(Sources(v, f.rel, seed + 1))});
  }
  testing::WriteFile(p.dir + "/source.safetensors",
                     testing::BuildSafetensors(s));
  p.ref = *Checkpoint::Open(p.dir + "/source.safetensors");
  return p;
}

TEST(FloatRunsTest, EveryKeysRunHasTheStepsAndRangeInspectGives) {
  const Pair p = WritePair(20, 1);
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.dtype);
    const LogicalTensor& t = *p.quant->FindTensor(f.dtype);
    auto runs = FloatRuns::For(*t.encoding, t.encoding->Bound(), 0, false);
    ASSERT_NE(runs, nullptr);
    for (int64_t i = 0; i < t.num_elements; ++i) {
      ScalarInfo s;
      ASSERT_TRUE(t.encoding->Inspect(i, &s).ok());
      const QuantRun& r = runs->run(FloatRuns::KeyOf(s.value));
      ASSERT_TRUE(SameBits(r.step_below, s.step_below)) << "element " << i;
      ASSERT_TRUE(SameBits(r.step_above, s.step_above)) << "element " << i;
      ASSERT_TRUE(SameBits(r.range_min, s.range_min)) << "element " << i;
      ASSERT_TRUE(SameBits(r.range_max, s.range_max)) << "element " << i;
    }
  }
}

// F32's table is built from a few mantissas of each key (not every code, as
// for the narrower formats): any bit pattern's steps are its key's.
TEST(FloatRunsTest, AnyF32BitPatternHasItsKeysSteps) {
  const std::string dir = testing::MakeTempDir();
  std::mt19937 rng(9);
  std::vector<uint32_t> bits(200000);
  for (uint32_t& b : bits) b = static_cast<uint32_t>(rng());
  testing::WriteFile(dir + "/f32.safetensors",
                     testing::BuildSafetensors(
                         {{"t", "F32", {200, 1000}, testing::Bytes(bits)}}));
  auto c = Checkpoint::Open(dir + "/f32.safetensors");
  ASSERT_TRUE(c.ok());
  const LogicalTensor& t = *(*c)->FindTensor("t");
  auto runs = FloatRuns::For(*t.encoding, t.encoding->Bound(), 0, false);
  ASSERT_NE(runs, nullptr);
  for (int64_t i = 0; i < t.num_elements; ++i) {
    ScalarInfo s;
    ASSERT_TRUE(t.encoding->Inspect(i, &s).ok());
    const QuantRun& r = runs->run(FloatRuns::KeyOf(s.value));
    ASSERT_TRUE(SameBits(r.step_below, s.step_below)) << std::hex << bits[i];
    ASSERT_TRUE(SameBits(r.step_above, s.step_above)) << std::hex << bits[i];
  }
}

TEST(FloatRunsTest, QuantizedEncodingsHaveNoFloatRuns) {
  const std::string dir = testing::Fixture("gguf/Q4_K.gguf");
  auto q = Checkpoint::Open(dir);
  ASSERT_TRUE(q.ok());
  const LogicalTensor& t = *(*q)->FindTensor("blk.0.attn_q.weight");
  EXPECT_EQ(FloatRuns::For(*t.encoding, t.encoding->Bound(), 0, false),
            nullptr);
}

void ExpectSameSums(const ErrorSums& a, const ErrorSums& b) {
  for (auto [x, y] : {std::pair{a.sum_sq_err, b.sum_sq_err},
                      {a.sum_abs_err, b.sum_abs_err},
                      {a.sum_xx, b.sum_xx},
                      {a.sum_hh, b.sum_hh},
                      {a.sum_xh, b.sum_xh},
                      {a.max_abs_err, b.max_abs_err},
                      {a.max_err_steps, b.max_err_steps},
                      {a.max_excess_not_nearest, b.max_excess_not_nearest},
                      {a.max_excess_clipped, b.max_excess_clipped}}) {
    EXPECT_TRUE(SameBits(x, y));
  }
  EXPECT_EQ(a.max_abs_err_index, b.max_abs_err_index);
  EXPECT_EQ(a.above_half_step, b.above_half_step);
  EXPECT_EQ(a.clipped, b.clipped);
  EXPECT_EQ(a.clipped_beyond_bound, b.clipped_beyond_bound);
  EXPECT_EQ(a.not_nearest, b.not_nearest);
  EXPECT_EQ(a.zeroed_elements, b.zeroed_elements);
  EXPECT_EQ(a.source_zeros, b.source_zeros);
  EXPECT_EQ(a.decoded_zeros, b.decoded_zeros);
  EXPECT_EQ(a.induced_zeros, b.induced_zeros);
}

TEST(FloatRunsTest, FastPathAgreesWithTheScalarReference) {
  const Pair p = WritePair(5, 2);
  // Plain bounds, and a float-grid bound widened for a bf16 or f16 source
  // (a slack that varies with the step).
  RoundingBound widened;
  widened.float_codes = true;
  widened.float_slack = 0x1p-20;
  for (const Format& f : kFormats) {
    const LogicalTensor& t = *p.quant->FindTensor(f.dtype);
    const int64_t total = t.num_elements;
    std::vector<float> v(total), x(total);
    ASSERT_TRUE(t.encoding->Decode(0, total, v.data()).ok());
    ASSERT_TRUE(
        p.ref->FindTensor(f.dtype)->encoding->Decode(0, total, x.data()).ok());
    for (int variant = 0; variant < 3; ++variant) {
      const RoundingBound bound = variant == 0 ? t.encoding->Bound() : widened;
      auto runs = FloatRuns::For(*t.encoding, bound, variant ? 0x1p-8 : 0,
                                 variant == 2);
      ASSERT_NE(runs, nullptr);
      for (int64_t n : {0, 1, 3, 4, 5, 12, 31, 1000, 4099}) {
        SCOPED_TRACE(::testing::Message()
                     << f.dtype << " variant " << variant << " n=" << n);
        std::vector<double> es_ref(n), es_fast(n);
        ErrorSums ref, fast;
        double bound_ref = 0, bound_fast = 0;
        // Two calls each, so state carried between chunks is covered too.
        const int64_t half = n / 2;
        for (auto [from, m] : {std::pair{int64_t{0}, half}, {half, n - half}}) {
          AccumulateFloatErrorsScalar(v.data() + from, x.data() + from, m,
                                      7 + from, *runs, es_ref.data() + from,
                                      &ref, &bound_ref);
          AccumulateFloatErrors(v.data() + from, x.data() + from, m, 7 + from,
                                *runs, es_fast.data() + from, &fast,
                                &bound_fast);
        }
#if defined(__x86_64__)
        // The AVX2 path, which a CPU with AVX-512 would not take.
        if (__builtin_cpu_supports("avx2")) {
          std::vector<double> es_avx2(n);
          ErrorSums avx2;
          double bound_avx2 = 0;
          for (auto [from, m] :
               {std::pair{int64_t{0}, half}, {half, n - half}}) {
            error_pass_internal::AccumulateFloatErrorsAvx2(
                v.data() + from, x.data() + from, m, 7 + from, *runs,
                es_avx2.data() + from, &avx2, &bound_avx2);
          }
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_TRUE(SameBits(es_avx2[i], es_ref[i])) << "element " << i;
          }
          ExpectSameSums(avx2, ref);
          EXPECT_TRUE(SameBits(bound_avx2, bound_ref));
        }
#endif
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_TRUE(SameBits(es_fast[i], es_ref[i])) << "element " << i;
        }
        ExpectSameSums(fast, ref);
        EXPECT_TRUE(SameBits(bound_fast, bound_ref));
      }
    }
  }
}

void ExpectSameReport(const TensorDiff& got, const TensorDiff& want) {
  for (auto [name, a, b] :
       {std::tuple{"mse", got.mse, want.mse},
        {"mean_abs_err", got.mean_abs_err, want.mean_abs_err},
        {"max_abs_err", got.max_abs_err, want.max_abs_err},
        {"sqnr_db", got.sqnr_db, want.sqnr_db},
        {"cosine", got.cosine, want.cosine},
        {"rel_fro_err", got.rel_fro_err, want.rel_fro_err},
        {"max_err_steps", got.max_err_steps, want.max_err_steps},
        {"p99", got.p99_err_steps, want.p99_err_steps},
        {"p999", got.p999_err_steps, want.p999_err_steps},
        {"bound_steps", got.bound_steps, want.bound_steps},
        {"max_excess", got.max_excess_steps, want.max_excess_steps}}) {
    EXPECT_TRUE(SameBits(a, b)) << name;
  }
  EXPECT_EQ(got.max_abs_err_index, want.max_abs_err_index);
  EXPECT_EQ(got.above_half_step, want.above_half_step);
  EXPECT_EQ(got.clipped, want.clipped);
  EXPECT_EQ(got.clipped_beyond_bound, want.clipped_beyond_bound);
  EXPECT_EQ(got.not_nearest, want.not_nearest);
  EXPECT_EQ(got.source_zeros, want.source_zeros);
  EXPECT_EQ(got.induced_zeros, want.induced_zeros);
  EXPECT_EQ(got.percentiles_exact, want.percentiles_exact);
  ASSERT_EQ(got.worst.size(), want.worst.size());
  for (size_t i = 0; i < want.worst.size(); ++i) {
    EXPECT_EQ(got.worst[i].flat_index, want.worst[i].flat_index) << i;
    EXPECT_TRUE(SameBits(got.worst[i].err_steps, want.worst[i].err_steps));
  }
  ASSERT_EQ(got.max_excess_element.has_value(),
            want.max_excess_element.has_value());
  if (want.max_excess_element.has_value()) {
    EXPECT_EQ(got.max_excess_element->flat_index,
              want.max_excess_element->flat_index);
  }
}

TEST(FloatRunsTest, PartsAtSegmentBoundariesMergeToTheWholeDiff) {
  const Pair p = WritePair(60, 3);  // 60,000 elements a tensor
  for (const Format& f : kFormats) {
    const LogicalTensor& q = *p.quant->FindTensor(f.dtype);
    const LogicalTensor& r = *p.ref->FindTensor(f.dtype);
    ASSERT_TRUE(DiffSplits(q, r, {}));
    // Exact percentiles (the 601 largest of 60,000 kept: the floor rises
    // many times),
    // and a histogram.
    for (int64_t limit : {int64_t{1} << 22, int64_t{100}}) {
      SCOPED_TRACE(::testing::Message() << f.dtype << " limit " << limit);
      DiffOptions o;
      o.top_k = 25;
      o.chunk_elements = 1000;
      o.segment_elements = 4096;
      o.exact_percentile_limit = limit;
      auto whole = DiffTensor(q, r, o);
      ASSERT_TRUE(whole.ok()) << whole.status();
      const int64_t n = q.num_elements;
      for (std::vector<int64_t> cuts : {std::vector<int64_t>{0, n},
                                        {0, 4096, n},
                                        {0, 8192, 12288, 40960, n}}) {
        // Alone, and sharing the percentile floor (the later parts then
        // keep fewer candidates).
        for (bool share : {false, true}) {
          std::atomic<double> floor{0};
          std::vector<DiffPart> parts;
          for (size_t k = 0; k + 1 < cuts.size(); ++k) {
            auto part =
                DiffTensorPart(q, r, o, cuts[k], cuts[k + 1], {}, nullptr, {},
                               nullptr, share ? &floor : nullptr);
            ASSERT_TRUE(part.ok()) << part.status();
            parts.push_back(*std::move(part));
          }
          auto merged = MergeDiffParts(q, r, o, {}, std::move(parts));
          ASSERT_TRUE(merged.ok()) << merged.status();
          ExpectSameReport(*merged, *whole);
        }
      }
    }
  }
}

TEST(FloatRunsTest, PartsThatLeaveAGapAreRefused) {
  const Pair p = WritePair(10, 4);
  const LogicalTensor& q = *p.quant->FindTensor("F16");
  const LogicalTensor& r = *p.ref->FindTensor("F16");
  DiffOptions o;
  o.segment_elements = 4096;
  std::vector<DiffPart> parts;
  parts.push_back(*DiffTensorPart(q, r, o, 0, 4096));
  parts.push_back(*DiffTensorPart(q, r, o, 8192, q.num_elements));
  EXPECT_THAT(MergeDiffParts(q, r, o, {}, std::move(parts)),
              HasReason(ErrorReason::kRequestInvalid));
}

}  // namespace
}  // namespace tensormorph::float_runs_test
