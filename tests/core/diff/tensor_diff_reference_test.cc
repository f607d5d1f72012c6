// DiffTensor against a plain scalar reference, bit for bit: every reported
// field, on random data (Q8_0, Q4_K) and a convention fixture (GPTQ with
// act-order, AWQ) and plain floats (F16, BF16, F32 quantized sides), at the
// default chunk size and an awkward one. The reference walks element by
// element with Inspect's steps and ranges; it takes from DecodeRuns only
// where runs begin, because the documented summation order (AccumulateErrors)
// is per run, or per chunk for a plain float (AccumulateFloatErrors).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/diff/error_pass.h"
#include "core/diff/pairing.h"
#include "core/diff/tensor_diff.h"
#include "core/format/checkpoint.h"
#include "core/quant/rounding_bound.h"
#include "gtest/gtest.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/same_bits.h"
#include "tests/support/test_paths.h"

namespace tensormorph::tensor_diff_reference_test {
namespace {

using ::tensormorph::testing::SameBits;

struct Element {
  double v;  // error in steps
  int64_t flat;
};

// The report, computed the plain way.
TensorDiff Reference(const LogicalTensor& quant, const LogicalTensor& ref,
                     const DiffOptions& o) {
  const int64_t n = quant.num_elements;
  std::vector<float> xq(n), xs(n), scratch(o.chunk_elements);
  EXPECT_TRUE(quant.encoding->Decode(0, n, xq.data()).ok());
  EXPECT_TRUE(ref.encoding->Decode(0, n, xs.data()).ok());
  ErrorSums s;
  std::vector<double> steps(n);
  std::vector<GroupAcc> groups;
  // A plain float's chunk is one run for the sums.
  const bool plain = !quant.encoding->info().quantized;
  for (int64_t first = 0; first < n; first += o.chunk_elements) {
    const int64_t m = std::min(o.chunk_elements, n - first);
    std::vector<QuantRun> runs;
    EXPECT_TRUE(
        quant.encoding->DecodeRuns(first, m, scratch.data(), &runs).ok());
    double lane[5][4] = {};
    int64_t i = first;
    for (QuantRun& run : runs) {
      ApplyBound(quant.encoding->Bound(), &run);  // as TensorDiff does
      if (quant.encoding->Bound().float_codes) {
        WidenForSourceRounding(SourceRoundingRel(ref.encoding->info()),
                               ref.encoding->info().scheme == "F16", &run);
      }
      const int64_t body = plain ? m - m % 4 : run.count - run.count % 4;
      // Clipping is judged against the run's bound, and a zeroed group
      // (both steps 0) is left out of the step metrics (error_pass.h).
      const RunLimits lim = LimitsOf(run);
      double gs[4] = {}, gm[4] = {};
      int64_t group = -1;
      for (int64_t j = 0; j < run.count; ++j, ++i) {
        const int64_t k = plain ? i - first : j;
        ScalarInfo si;
        EXPECT_TRUE(quant.encoding->Inspect(i, &si).ok());
        group = GroupIdOf(si);
        const double a = xs[i], b = xq[i], err = std::fabs(a - b);
        const double step = a > b ? si.step_above : si.step_below;
        const double v = lim.zeroed ? 0
                         : err == 0 ? 0
                         : step > 0 ? err / step
                                    : INFINITY;
        steps[i] = v;
        const double terms[5] = {err * err, err, a * a, b * b, a * b};
        double* totals[5] = {&s.sum_sq_err, &s.sum_abs_err, &s.sum_xx,
                             &s.sum_hh, &s.sum_xh};
        for (int t = 0; t < 5; ++t) {
          if (k < body) {
            lane[t][k % 4] += terms[t];
          } else {
            *totals[t] += terms[t];
          }
        }
        if (err > s.max_abs_err) {
          s.max_abs_err = err;
          s.max_abs_err_index = i;
        }
        if (!lim.zeroed) {
          s.max_err_steps = std::max(s.max_err_steps, v);
          s.above_half_step += v > 0.5;
          s.clipped += a > lim.clip_hi || a < lim.clip_lo;
        }
        s.source_zeros += a == 0;
        s.decoded_zeros += b == 0;
        s.induced_zeros += a != 0 && b == 0;
        const int l = k < body ? static_cast<int>(k % 4) : 0;
        gs[l] += v;
        gm[l] = std::max(gm[l], v);
      }
      if (group >= 0) {
        if (group >= static_cast<int64_t>(groups.size()))
          groups.resize(group + 1);
        GroupAcc& g = groups[group];
        g.sum += (gs[0] + gs[1]) + (gs[2] + gs[3]);
        g.max = std::max(g.max,
                         static_cast<float>(std::max(std::max(gm[0], gm[1]),
                                                     std::max(gm[2], gm[3]))));
        g.count += static_cast<uint32_t>(run.count);
      }
    }
    double* totals[5] = {&s.sum_sq_err, &s.sum_abs_err, &s.sum_xx, &s.sum_hh,
                         &s.sum_xh};
    for (int t = 0; t < 5; ++t) {
      *totals[t] += (lane[t][0] + lane[t][1]) + (lane[t][2] + lane[t][3]);
    }
  }
  TensorDiff d;
  const double nn = static_cast<double>(std::max<int64_t>(n, 1));
  const double sse = s.sum_sq_err, sxx = s.sum_xx, shh = s.sum_hh;
  d.count = n;
  d.mse = sse / nn;
  d.rmse = std::sqrt(d.mse);
  d.mean_abs_err = s.sum_abs_err / nn;
  d.max_abs_err = s.max_abs_err;
  d.max_abs_err_index = {s.max_abs_err_index};
  d.max_err_steps = s.max_err_steps;
  d.above_half_step = s.above_half_step;
  d.clipped = s.clipped;
  d.source_zeros = s.source_zeros;
  d.decoded_zeros = s.decoded_zeros;
  d.induced_zeros = s.induced_zeros;
  d.sqnr_db = sse == 0 ? INFINITY : 10 * std::log10(sxx / sse);
  d.cosine = sxx == 0 || shh == 0 ? (sxx == shh ? 1 : 0)
                                  : s.sum_xh / std::sqrt(sxx * shh);
  d.rel_fro_err = sxx == 0 ? (sse == 0 ? 0 : INFINITY) : std::sqrt(sse / sxx);
  // numpy.percentile, linear, over all errors sorted.
  std::vector<double> sorted = steps;
  std::sort(sorted.begin(), sorted.end());
  auto pct = [&](double q) {
    const double pos = q * static_cast<double>(n - 1);
    const int64_t lo = static_cast<int64_t>(std::floor(pos));
    const double frac = pos - static_cast<double>(lo);
    const double a = sorted[lo], b = lo + 1 < n ? sorted[lo + 1] : a;
    if (std::isinf(a) || std::isinf(b)) return frac > 0 ? b : a;
    return a + (b - a) * frac;
  };
  d.p99_err_steps = pct(0.99);
  d.p999_err_steps = pct(0.999);
  // The k worst: larger error first, then the earlier element; NaN never.
  std::vector<Element> all;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isnan(steps[i])) all.push_back({steps[i], i});
  }
  std::stable_sort(
      all.begin(), all.end(),
      [](const Element& a, const Element& b) { return a.v > b.v; });
  for (int64_t k = 0; k < std::min<int64_t>(o.top_k, all.size()); ++k) {
    WorstElement w;
    w.flat_index = all[k].flat;
    w.err_steps = all[k].v;
    w.source = xs[all[k].flat];
    w.decoded = xq[all[k].flat];
    w.abs_err = std::fabs(w.source - static_cast<double>(w.decoded));
    d.worst.push_back(w);
  }
  std::vector<WorstGroup> wg;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].count == 0) continue;
    wg.push_back({static_cast<int64_t>(g), groups[g].count,
                  groups[g].sum / groups[g].count, groups[g].max});
  }
  std::stable_sort(wg.begin(), wg.end(),
                   [](const WorstGroup& a, const WorstGroup& b) {
                     return a.mean_err_steps > b.mean_err_steps;
                   });
  wg.resize(std::min<size_t>(wg.size(), o.worst_groups));
  d.worst_groups = wg;
  return d;
}

void ExpectSameReport(const TensorDiff& got, const TensorDiff& want) {
  EXPECT_EQ(got.count, want.count);
  for (auto [name, a, b] :
       {std::tuple{"mse", got.mse, want.mse},
        {"rmse", got.rmse, want.rmse},
        {"mean_abs_err", got.mean_abs_err, want.mean_abs_err},
        {"max_abs_err", got.max_abs_err, want.max_abs_err},
        {"sqnr_db", got.sqnr_db, want.sqnr_db},
        {"cosine", got.cosine, want.cosine},
        {"rel_fro_err", got.rel_fro_err, want.rel_fro_err},
        {"max_err_steps", got.max_err_steps, want.max_err_steps},
        {"p99", got.p99_err_steps, want.p99_err_steps},
        {"p999", got.p999_err_steps, want.p999_err_steps}}) {
    EXPECT_TRUE(SameBits(a, b)) << name;
  }
  EXPECT_EQ(got.above_half_step, want.above_half_step);
  EXPECT_EQ(got.clipped, want.clipped);
  EXPECT_EQ(got.source_zeros, want.source_zeros);
  EXPECT_EQ(got.decoded_zeros, want.decoded_zeros);
  EXPECT_EQ(got.induced_zeros, want.induced_zeros);
  EXPECT_TRUE(got.percentiles_exact);
  EXPECT_TRUE(got.groups_tracked);
  ASSERT_EQ(got.worst.size(), want.worst.size());
  for (size_t i = 0; i < want.worst.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "worst " << i);
    EXPECT_EQ(got.worst[i].flat_index, want.worst[i].flat_index);
    EXPECT_TRUE(SameBits(got.worst[i].err_steps, want.worst[i].err_steps));
    EXPECT_TRUE(SameBits(got.worst[i].source, want.worst[i].source));
    EXPECT_TRUE(SameBits(got.worst[i].decoded, want.worst[i].decoded));
    EXPECT_TRUE(SameBits(got.worst[i].abs_err, want.worst[i].abs_err));
  }
  ASSERT_EQ(got.worst_groups.size(), want.worst_groups.size());
  for (size_t i = 0; i < want.worst_groups.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "worst group " << i);
    EXPECT_EQ(got.worst_groups[i].group, want.worst_groups[i].group);
    EXPECT_EQ(got.worst_groups[i].count, want.worst_groups[i].count);
    EXPECT_TRUE(SameBits(got.worst_groups[i].mean_err_steps,
                         want.worst_groups[i].mean_err_steps));
    EXPECT_TRUE(SameBits(got.worst_groups[i].max_err_steps,
                         want.worst_groups[i].max_err_steps));
  }
}

void CheckPairs(const Checkpoint& quant, const Checkpoint& ref) {
  auto pairing = PairTensors(quant, ref);
  ASSERT_TRUE(pairing.ok()) << pairing.status();
  ASSERT_FALSE(pairing->pairs.empty());
  for (const TensorPair& p : pairing->pairs) {
    for (int64_t chunk : {int64_t{1} << 13, int64_t{1000}}) {
      SCOPED_TRACE(::testing::Message() << p.quant->name << " chunk " << chunk);
      DiffOptions o;
      o.chunk_elements = chunk;
      o.top_k = 25;
      o.worst_groups = 12;
      auto got = DiffTensor(*p.quant, *p.ref, o);
      ASSERT_TRUE(got.ok()) << got.status();
      ExpectSameReport(*got, Reference(*p.quant, *p.ref, o));
    }
  }
}

// Gaussian weights with an outlier tail, some exact zeros and some values
// far outside their block, 300 K elements: enough that the kept percentile
// candidates are trimmed many times over.
std::vector<float> RandomWeights(size_t n, uint64_t seed) {
  std::vector<float> v = testing::Gaussian(n, seed, 0.02f);
  for (size_t i = 0; i < n; i += 97) v[i] = 0;
  for (size_t i = 13; i < n; i += 1201) v[i] *= 40;
  return v;
}

class GgufReferenceTest : public ::testing::TestWithParam<int> {};

TEST_P(GgufReferenceTest, EveryFieldMatchesTheScalarReferenceBitForBit) {
  const uint32_t type_id = static_cast<uint32_t>(GetParam());
  const std::string dir = testing::MakeTempDir();
  testing::GgufSpec src, quant;
  constexpr int64_t kCols = 1024, kRows = 300;
  for (int t = 0; t < 2; ++t) {
    const std::vector<float> v = RandomWeights(kCols * kRows, 7 + t);
    const std::string name = "blk." + std::to_string(t) + ".ffn_up.weight";
    src.tensors.push_back({name, {kCols, kRows}, 0, testing::ToF32Bytes(v)});
    quant.tensors.push_back(
        {name,
         {kCols, kRows},
         type_id,
         type_id == 8 ? testing::QuantizeQ8_0(v) : testing::QuantizeQ4_K(v)});
  }
  testing::WriteFile(dir + "/src.gguf", testing::BuildGguf(src));
  testing::WriteFile(dir + "/quant.gguf", testing::BuildGguf(quant));
  auto q = Checkpoint::Open(dir + "/quant.gguf");
  auto r = Checkpoint::Open(dir + "/src.gguf");
  ASSERT_TRUE(q.ok() && r.ok());
  CheckPairs(**q, **r);
}

INSTANTIATE_TEST_SUITE_P(Q8_0AndQ4_K, GgufReferenceTest,
                         ::testing::Values(8, 12), [](const auto& info) {
                           return info.param == 8 ? std::string("Q8_0")
                                                  : std::string("Q4_K");
                         });

TEST(ConventionReferenceTest, EveryFieldMatchesTheScalarReferenceBitForBit) {
  for (const char* c : {"gptq_4bit_g32_actorder", "awq_4bit_g32"}) {
    SCOPED_TRACE(c);
    const std::string dir = testing::Fixture(std::string("safetensors/") + c);
    auto q = Checkpoint::Open(dir);
    auto r = Checkpoint::Open(dir + "/source");
    ASSERT_TRUE(q.ok() && r.ok());
    CheckPairs(**q, **r);
  }
}

// Plain float quantized sides: each element the nearest float of its source,
// but every 31st one a level off (not nearest) and every 97th source zero.
TEST(PlainFloatReferenceTest, EveryFieldMatchesTheScalarReferenceBitForBit) {
  const std::string dir = testing::MakeTempDir();
  constexpr int64_t kCols = 1000, kRows = 150;
  const std::vector<float> v = RandomWeights(kCols * kRows, 11);
  std::vector<uint16_t> f16(v.size()), bf16(v.size());
  std::vector<float> f32(v.size()), source(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const bool off = i % 31 == 0;
    f16[i] = testing::F32ToF16Bits(v[i]) + (off ? 1 : 0);
    bf16[i] = testing::F32ToBF16Bits(v[i]) + (off ? 1 : 0);
    f32[i] = off ? std::nextafter(v[i], 1.0f) : v[i];
    source[i] = v[i];
  }
  std::vector<testing::StTensor> q = {
      {"f16", "F16", {kRows, kCols}, testing::Bytes(f16)},
      {"bf16", "BF16", {kRows, kCols}, testing::Bytes(bf16)},
      {"f32", "F32", {kRows, kCols}, testing::Bytes(f32)}};
  std::vector<testing::StTensor> r;
  for (const char* name : {"f16", "bf16", "f32"}) {
    r.push_back({name, "F32", {kRows, kCols}, testing::Bytes(source)});
  }
  testing::WriteFile(dir + "/quant.safetensors", testing::BuildSafetensors(q));
  testing::WriteFile(dir + "/source.safetensors", testing::BuildSafetensors(r));
  auto qc = Checkpoint::Open(dir + "/quant.safetensors");
  auto rc = Checkpoint::Open(dir + "/source.safetensors");
  ASSERT_TRUE(qc.ok() && rc.ok());
  CheckPairs(**qc, **rc);
}

}  // namespace
}  // namespace tensormorph::tensor_diff_reference_test
