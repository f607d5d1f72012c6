// The quantization diff against every fixture pair: each metric recomputed
// here independently, in double, from the expected and source values.
#include "core/diff/tensor_diff.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "core/diff/pairing.h"
#include "core/format/checkpoint.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace tensormorph::tensor_diff_test {
namespace {

using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::ReadF32File;

namespace fs = std::filesystem;

void ExpectRel(double got, double want, const char* what) {
  if (std::isinf(want)) {
    EXPECT_EQ(got, want) << what;
    return;
  }
  EXPECT_NEAR(got, want, 1e-9 * std::max(1.0, std::fabs(want))) << what;
}

// Recomputes the report of one pair from decoded values and source values.
void CheckAgainstIndependentMath(const TensorDiff& d,
                                 const LogicalTensor& quant,
                                 const std::vector<float>& xq,
                                 const std::vector<float>& xs) {
  ASSERT_EQ(xq.size(), xs.size());
  const size_t n = xq.size();
  double sse = 0, sabs = 0, sxx = 0, shh = 0, sxh = 0, maxabs = 0, maxsteps = 0;
  int64_t pruned = 0, dz = 0, induced = 0, above = 0;
  std::vector<double> steps(n);
  for (size_t i = 0; i < n; ++i) {
    const double a = xs[i], b = xq[i], e = std::fabs(a - b);
    sse += e * e;
    sabs += e;
    sxx += a * a;
    shh += b * b;
    sxh += a * b;
    maxabs = std::max(maxabs, e);
    pruned += a == 0;
    dz += b == 0;
    induced += a != 0 && b == 0;
    ScalarInfo s;
    ASSERT_TRUE(quant.encoding->Inspect(static_cast<int64_t>(i), &s).ok());
    const double step = a > b ? s.step_above : s.step_below;
    // A zeroed group (both steps 0: its scale rounded to 0) is counted
    // apart, and left out of the step metrics.
    const bool zeroed = s.step_above == 0 && s.step_below == 0;
    steps[i] = zeroed || e == 0 ? 0 : e / step;
    maxsteps = std::max(maxsteps, steps[i]);
    above += steps[i] > 0.5;
  }
  ExpectRel(d.mse, sse / n, "mse");
  ExpectRel(d.rmse, std::sqrt(sse / n), "rmse");
  ExpectRel(d.mean_abs_err, sabs / n, "mean_abs_err");
  EXPECT_EQ(d.max_abs_err, maxabs) << "max_abs_err is exact";
  ExpectRel(d.sqnr_db, sse == 0 ? INFINITY : 10 * std::log10(sxx / sse),
            "sqnr");
  ExpectRel(d.cosine, sxh / std::sqrt(sxx * shh), "cosine");
  ExpectRel(d.rel_fro_err, std::sqrt(sse / sxx), "rel_fro");
  EXPECT_EQ(d.max_err_steps, maxsteps) << "max error in steps is exact";
  std::sort(steps.begin(), steps.end());
  auto pct = [&](double q) {
    const double pos = q * (n - 1);
    const size_t lo = static_cast<size_t>(pos);
    const double hi = lo + 1 < n ? steps[lo + 1] : steps[lo];
    // A zero-step group with an error has infinite error in steps; next to
    // it the interpolation takes the infinite neighbour.
    if (std::isinf(steps[lo]) || std::isinf(hi))
      return pos > lo ? hi : steps[lo];
    return steps[lo] + (hi - steps[lo]) * (pos - lo);
  };
  ExpectRel(d.p99_err_steps, pct(0.99), "p99");
  ExpectRel(d.p999_err_steps, pct(0.999), "p99.9");
  EXPECT_EQ(d.above_half_step, above);
  EXPECT_EQ(d.source_zeros, pruned);
  EXPECT_EQ(d.decoded_zeros, dz);
  EXPECT_EQ(d.induced_zeros, induced);
  ASSERT_FALSE(d.worst.empty());
  EXPECT_EQ(d.worst[0].err_steps, maxsteps);
}

const char* kGgufTypes[] = {"F16",   "BF16",  "Q4_0",   "Q4_1",   "Q5_0",
                            "Q5_1",  "Q8_0",  "Q2_K",   "Q3_K",   "Q4_K",
                            "Q5_K",  "Q6_K",  "IQ4_NL", "IQ4_XS", "TQ1_0",
                            "TQ2_0", "MXFP4", "NVFP4"};

class GgufDiffTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufDiffTest, MetricsAgreeWithIndependentMath) {
  const std::string type = GetParam();
  auto quant = Checkpoint::Open(Fixture("gguf/" + type + ".gguf"));
  auto ref = Checkpoint::Open(Fixture("gguf/source_f32.gguf"));
  ASSERT_TRUE(quant.ok() && ref.ok());
  auto pairing = PairTensors(**quant, **ref);
  ASSERT_TRUE(pairing.ok());
  ASSERT_EQ(pairing->pairs.size(), 2u);
  EXPECT_EQ(pairing->only_in_quant,
            std::vector<std::string>{"blk.0.attn_norm.weight"});
  const std::vector<float> src[] = {ReadF32File(Fixture("gguf/src_a.f32")),
                                    ReadF32File(Fixture("gguf/src_b.f32"))};
  for (const TensorPair& p : pairing->pairs) {
    SCOPED_TRACE(p.quant->name);
    auto d = DiffTensor(*p.quant, *p.ref, DiffOptions());
    ASSERT_TRUE(d.ok()) << d.status();
    const bool is_a = p.quant->name == "blk.0.attn_q.weight";
    CheckAgainstIndependentMath(
        *d, *p.quant,
        ReadF32File(Fixture("gguf/" + type + "." + p.quant->name + ".deq.f32")),
        src[is_a ? 0 : 1]);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, GgufDiffTest,
                         ::testing::ValuesIn(kGgufTypes), [](const auto& info) {
                           return std::string(info.param);
                         });

const char* kSafetensorsCases[] = {
    "gptq_4bit_g32",     "gptq_4bit_g32_actorder", "awq_4bit_g32",
    "ct_int8_channel",   "ct_int8_tensor_asym",    "ct_w4a16_group",
    "fp8_block_sharded", "mxfp4_gptoss",           "bnb_nf4"};

class SafetensorsDiffTest : public ::testing::TestWithParam<const char*> {};

TEST_P(SafetensorsDiffTest, MetricsAgreeWithIndependentMath) {
  const std::string dir = Fixture(std::string("safetensors/") + GetParam());
  auto quant = Checkpoint::Open(dir);
  auto ref = Checkpoint::Open(dir + "/source");
  ASSERT_TRUE(quant.ok()) << quant.status();
  ASSERT_TRUE(ref.ok()) << ref.status();
  auto pairing = PairTensors(**quant, **ref);
  ASSERT_TRUE(pairing.ok());
  EXPECT_TRUE(pairing->shape_mismatches.empty());
  int checked = 0;
  for (const TensorPair& p : pairing->pairs) {
    const std::string expected = dir + "/expected/" + p.quant->name + ".f32";
    if (!fs::exists(expected)) continue;
    SCOPED_TRACE(p.quant->name);
    auto d = DiffTensor(*p.quant, *p.ref, DiffOptions());
    ASSERT_TRUE(d.ok()) << d.status();
    std::vector<float> src(p.ref->num_elements);
    ASSERT_TRUE(
        p.ref->encoding->Decode(0, p.ref->num_elements, src.data()).ok());
    CheckAgainstIndependentMath(*d, *p.quant, ReadF32File(expected), src);
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(AllConventions, SafetensorsDiffTest,
                         ::testing::ValuesIn(kSafetensorsCases),
                         [](const auto& info) {
                           return std::string(info.param);
                         });

absl::StatusOr<TensorDiff> DiffOf(const std::string& quant_path,
                                  const std::string& ref_path,
                                  const std::string& name,
                                  const DiffOptions& options = DiffOptions()) {
  auto quant = Checkpoint::Open(quant_path);
  auto ref = Checkpoint::Open(ref_path);
  if (!quant.ok()) return quant.status();
  if (!ref.ok()) return ref.status();
  return DiffTensor(*(*quant)->FindTensor(name), *(*ref)->FindTensor(name),
                    options);
}

TEST(TensorDiffTest, TheReportDoesNotDependOnHowTheTensorIsChunked) {
  const std::string q = Fixture("gguf/Q4_K.gguf");
  const std::string r = Fixture("gguf/source_f32.gguf");
  auto whole = DiffOf(q, r, "blk.0.attn_q.weight");
  ASSERT_TRUE(whole.ok()) << whole.status();
  for (int64_t chunk : {1, 7, 256, 1000}) {
    SCOPED_TRACE(chunk);
    DiffOptions o;
    o.chunk_elements = chunk;
    auto d = DiffOf(q, r, "blk.0.attn_q.weight", o);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->max_abs_err, whole->max_abs_err);
    EXPECT_EQ(d->max_abs_err_index, whole->max_abs_err_index);
    EXPECT_EQ(d->max_err_steps, whole->max_err_steps);
    EXPECT_EQ(d->p99_err_steps, whole->p99_err_steps);
    EXPECT_EQ(d->p999_err_steps, whole->p999_err_steps);
    EXPECT_EQ(d->above_half_step, whole->above_half_step);
    EXPECT_EQ(d->clipped, whole->clipped);
    EXPECT_NEAR(d->mse, whole->mse, 1e-12 * whole->mse);
    ASSERT_EQ(d->worst.size(), whole->worst.size());
    for (size_t i = 0; i < d->worst.size(); ++i) {
      EXPECT_EQ(d->worst[i].flat_index, whole->worst[i].flat_index);
    }
    ASSERT_EQ(d->worst_groups.size(), whole->worst_groups.size());
    for (size_t i = 0; i < d->worst_groups.size(); ++i) {
      EXPECT_EQ(d->worst_groups[i].group, whole->worst_groups[i].group);
      EXPECT_EQ(d->worst_groups[i].max_err_steps,
                whole->worst_groups[i].max_err_steps);
    }
  }
}

TEST(TensorDiffTest, TensorsWithMoreGroupsThanTheLimitTrackNone) {
  const std::string q = Fixture("gguf/Q4_K.gguf");
  const std::string r = Fixture("gguf/source_f32.gguf");
  auto all = DiffOf(q, r, "blk.0.attn_q.weight");
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->groups_tracked);
  EXPECT_FALSE(all->worst_groups.empty());
  DiffOptions o;
  o.max_tracked_groups = 3;  // a Q4_K tensor of 1024 elements has 32
  auto none = DiffOf(q, r, "blk.0.attn_q.weight", o);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->groups_tracked);
  EXPECT_TRUE(none->worst_groups.empty());
  EXPECT_EQ(none->max_err_steps, all->max_err_steps) << "the rest is as before";
  EXPECT_EQ(none->p99_err_steps, all->p99_err_steps);
}

TEST(TensorDiffTest, AWorkspaceCarriesNothingFromOneTensorToTheNext) {
  auto quant = Checkpoint::Open(Fixture("gguf/Q4_K.gguf"));
  auto ref = Checkpoint::Open(Fixture("gguf/source_f32.gguf"));
  ASSERT_TRUE(quant.ok() && ref.ok());
  DiffWorkspace workspace;
  for (const char* name : {"blk.0.attn_q.weight", "blk.0.ffn_down.weight",
                           "blk.0.attn_q.weight"}) {
    SCOPED_TRACE(name);
    const LogicalTensor* q = (*quant)->FindTensor(name);
    const LogicalTensor* r = (*ref)->FindTensor(name);
    ASSERT_TRUE(q != nullptr && r != nullptr);
    auto fresh = DiffTensor(*q, *r, DiffOptions());
    auto reused =
        DiffTensor(*q, *r, DiffOptions(), {}, nullptr, {}, &workspace);
    ASSERT_TRUE(fresh.ok() && reused.ok());
    EXPECT_EQ(reused->p99_err_steps, fresh->p99_err_steps);
    EXPECT_EQ(reused->p999_err_steps, fresh->p999_err_steps);
    EXPECT_EQ(reused->mse, fresh->mse);
    ASSERT_EQ(reused->worst_groups.size(), fresh->worst_groups.size());
    for (size_t i = 0; i < fresh->worst_groups.size(); ++i) {
      EXPECT_EQ(reused->worst_groups[i].group, fresh->worst_groups[i].group);
      EXPECT_EQ(reused->worst_groups[i].mean_err_steps,
                fresh->worst_groups[i].mean_err_steps);
    }
  }
}

TEST(TensorDiffTest, LargeTensorsTakePercentilesFromAHistogramWithinItsBins) {
  const std::string q = Fixture("gguf/Q4_0.gguf");
  const std::string r = Fixture("gguf/source_f32.gguf");
  auto exact = DiffOf(q, r, "blk.0.attn_q.weight");
  DiffOptions o;
  o.exact_percentile_limit = 0;  // as if the tensor were too large
  auto hist = DiffOf(q, r, "blk.0.attn_q.weight", o);
  ASSERT_TRUE(exact.ok() && hist.ok());
  EXPECT_TRUE(exact->percentiles_exact);
  EXPECT_FALSE(hist->percentiles_exact);
  // Bins are 2^-10 wide relative to the value they hold.
  EXPECT_NEAR(hist->p99_err_steps, exact->p99_err_steps,
              exact->p99_err_steps / 1024);
  EXPECT_NEAR(hist->p999_err_steps, exact->p999_err_steps,
              exact->p999_err_steps / 1024);
  EXPECT_EQ(hist->max_err_steps, exact->max_err_steps) << "maxima stay exact";
}

TEST(TensorDiffTest, TorchInt8WithItsOwnScaleStaysWithinHalfAStep) {
  const std::string dir = Fixture("safetensors/ct_int8_channel");
  for (const char* name : {"model.layers.0.mlp.down_proj.weight",
                           "model.layers.0.self_attn.q_proj.weight"}) {
    auto d = DiffOf(dir, dir + "/source", name);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_LE(d->max_err_steps, 0.5 + 1e-6) << name;
    EXPECT_EQ(d->clipped, 0) << name;
  }
}

TEST(TensorDiffTest, Q8_0ExceedsHalfAStepBecauseTheScaleIsStoredAsFloat16) {
  auto d = DiffOf(Fixture("gguf/Q8_0.gguf"), Fixture("gguf/source_f32.gguf"),
                  "blk.0.attn_q.weight");
  ASSERT_TRUE(d.ok());
  EXPECT_GT(d->max_err_steps, 0.5);
  EXPECT_LT(d->max_err_steps, 0.55);  // a little: float16 rounding of d
  EXPECT_GT(d->above_half_step, 0);
}

TEST(TensorDiffTest, Q8_0StaysWithinItsF16ScaleBound) {
  auto d = DiffOf(Fixture("gguf/Q8_0.gguf"), Fixture("gguf/source_f32.gguf"),
                  "blk.0.attn_q.weight");
  ASSERT_TRUE(d.ok());
  EXPECT_GT(d->bound_steps, 0.5);
  EXPECT_EQ(d->not_nearest, 0);
  EXPECT_EQ(d->clipped, 0);
  EXPECT_EQ(d->max_excess_steps, 0);
}

// Q4_0's quantizer puts the block's signed extreme on level -8, so the other
// side's extreme needs level +8, one past the last: clipped by design, within
// the bound (the short end's extra step), and leading the top-k.
TEST(TensorDiffTest, Q4_0ClipsOppositeTheBlockMaximumAndThoseLeadTheTopK) {
  auto d = DiffOf(Fixture("gguf/Q4_0.gguf"), Fixture("gguf/source_f32.gguf"),
                  "blk.0.attn_q.weight");
  ASSERT_TRUE(d.ok());
  EXPECT_GT(d->clipped, 0) << "by design";
  EXPECT_EQ(d->clipped_beyond_bound, 0) << "within the bound";
  EXPECT_EQ(d->max_excess_steps, 0);
  ASSERT_FALSE(d->worst.empty());
  const WorstElement& w = d->worst[0];
  // The worst element lies beyond its group's outermost level.
  EXPECT_TRUE(w.source > w.quant.range_max + 0.5 * w.quant.step_above ||
              w.source < w.quant.range_min - 0.5 * w.quant.step_below);
  EXPECT_GT(w.err_steps, 0.5);
  EXPECT_EQ(w.quant.code == 15 || w.quant.code == 0, true);  // saturated code
}

TEST(TensorDiffTest, InducedZerosAreCountedApartFromPrunedOnes) {
  const std::vector<float> src = ReadF32File(Fixture("gguf/src_b.f32"));
  const std::vector<float> deq =
      ReadF32File(Fixture("gguf/Q4_K.blk.0.ffn_down.weight.deq.f32"));
  int64_t pruned = 0, induced = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    pruned += src[i] == 0;
    induced += src[i] != 0 && deq[i] == 0;
  }
  auto d = DiffOf(Fixture("gguf/Q4_K.gguf"), Fixture("gguf/source_f32.gguf"),
                  "blk.0.ffn_down.weight");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->source_zeros, pruned);
  EXPECT_GT(pruned, 70);  // every 13th value of 1024
  EXPECT_EQ(d->induced_zeros, induced);
}

TEST(TensorDiffTest, RopeRowMapUndoesTheConvertersPermutation) {
  // Two heads of four rows: HF rows (0,1 | 2,3) interleave as (0,2,1,3).
  const RowMap m = LlamaRopeRowMap(8, 2);
  EXPECT_EQ(m, (RowMap{0, 2, 1, 3, 4, 6, 5, 7}));
  EXPECT_EQ(GgufToHfName("blk.7.attn_k.weight"),
            "model.layers.7.self_attn.k_proj.weight");
  EXPECT_EQ(GgufToHfName("output.weight"), "lm_head.weight");
  EXPECT_EQ(GgufToHfName("blk.0.ffn_norm.weight"),
            "model.layers.0.post_attention_layernorm.weight");
  EXPECT_FALSE(GgufToHfName("rope_freqs.weight").has_value());
}

}  // namespace
}  // namespace tensormorph::tensor_diff_test
