// JudgeElement's contract: each element's verdict is the diff's. Over every
// element of a tensor, the verdicts count exactly what DiffTensor counts
// (not nearest, clipped, clipped beyond the bound, zeroed), and the worst
// excess is its worst; on every ggml fixture against its source, against
// another tensor's source (every kind of verdict), and on the demo's
// Q4_K_M mix against its Hugging Face source through the RoPE row maps.
#include "core/diff/element_verdict.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/diff/pairing.h"
#include "core/diff/row_map.h"
#include "core/diff/tensor_diff.h"
#include "core/format/checkpoint.h"
#include "gtest/gtest.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/test_paths.h"

namespace tensormorph::element_verdict_test {
namespace {

using ::tensormorph::testing::Fixture;
using Kind = ElementVerdict::Kind;

// Every element of `quant` judged against `ref` (through `rows`), counted
// as DiffTensor counts them, and held to its report.
void ExpectVerdictsAreTheDiffs(const LogicalTensor& quant,
                               const LogicalTensor& ref, const RowMap& rows) {
  SCOPED_TRACE(quant.name + " against " + ref.name);
  auto d = DiffTensor(quant, ref, DiffOptions(), rows);
  ASSERT_TRUE(d.ok()) << d.status();
  std::vector<float> source(static_cast<size_t>(quant.num_elements));
  ASSERT_TRUE(
      DecodeMappedRows(ref, rows, 0, quant.num_elements, source.data()).ok());
  int64_t not_nearest = 0, clipped = 0, beyond = 0, zeroed = 0;
  double worst_not_nearest = 0, worst = 0;
  std::vector<QuantRun> runs;
  runs.reserve(1);
  for (int64_t i = 0; i < quant.num_elements; ++i) {
    auto v = JudgeElement(*quant.encoding, ref.encoding->info(), i, source[i],
                          &runs);
    ASSERT_TRUE(v.ok()) << v.status();
    not_nearest += v->kind == Kind::kNotNearest;
    clipped +=
        v->kind == Kind::kClipped || v->kind == Kind::kClippedBeyondBound;
    beyond += v->kind == Kind::kClippedBeyondBound;
    zeroed += v->kind == Kind::kZeroedGroup;
    if (v->kind == Kind::kNotNearest) {
      worst_not_nearest = std::max(worst_not_nearest, v->excess_steps);
    }
    // The report's excess leaves out not-nearest elements of a quantizer
    // that chooses its codes (information), as the verdict's flag says.
    if (v->kind != Kind::kNotNearest || !v->chosen_codes) {
      worst = std::max(worst, v->excess_steps);
    }
    EXPECT_LE(v->bound_steps, d->bound_steps) << "element " << i;
  }
  EXPECT_EQ(not_nearest, d->not_nearest);
  EXPECT_EQ(clipped, d->clipped);
  EXPECT_EQ(beyond, d->clipped_beyond_bound);
  EXPECT_EQ(zeroed, d->zeroed_elements);
  EXPECT_EQ(worst_not_nearest, d->max_excess_not_nearest);
  EXPECT_EQ(worst, d->max_excess_steps);
}

class ElementVerdictTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ElementVerdictTest, EachElementsVerdictIsTheDiffs) {
  auto quant = Checkpoint::Open(Fixture(std::string("gguf/") + GetParam()));
  auto ref = Checkpoint::Open(Fixture("gguf/source_f32.gguf"));
  ASSERT_TRUE(quant.ok() && ref.ok());
  auto pairing = PairTensors(**quant, **ref);
  ASSERT_TRUE(pairing.ok());
  ASSERT_EQ(pairing->pairs.size(), 2u);
  for (const TensorPair& p : pairing->pairs) {
    ExpectVerdictsAreTheDiffs(*p.quant, *p.ref, p.row_map);
  }
  // Against the other tensor's source (the same shape): far from its
  // levels, so every kind of verdict occurs.
  const TensorPair& a = pairing->pairs[0];
  const TensorPair& b = pairing->pairs[1];
  if (a.quant->shape == b.ref->shape) {
    ExpectVerdictsAreTheDiffs(*a.quant, *b.ref, {});
  }
}

INSTANTIATE_TEST_SUITE_P(
    GgmlTypes, ElementVerdictTest,
    ::testing::Values("Q8_0.gguf", "Q4_0.gguf", "Q4_1.gguf", "Q5_0.gguf",
                      "Q5_1.gguf", "Q2_K.gguf", "Q3_K.gguf", "Q4_K.gguf",
                      "Q5_K.gguf", "Q6_K.gguf", "IQ4_NL.gguf", "IQ4_XS.gguf",
                      "TQ1_0.gguf", "TQ2_0.gguf", "MXFP4.gguf", "NVFP4.gguf",
                      "F16.gguf", "BF16.gguf"),
    [](const auto& info) {
      std::string name = info.param;
      return name.substr(0, name.find('.'));
    });

TEST(ElementVerdictDemoTest, TheDemoMixAgreesThroughItsRowMaps) {
  const std::string dir = ::tensormorph::testing::DemoDir();
  auto quant = Checkpoint::Open(dir + "/model-q4_k_m.gguf");
  auto ref = Checkpoint::Open(dir + "/source");
  ASSERT_TRUE(quant.ok() && ref.ok());
  auto pairing = PairTensors(**quant, **ref);
  ASSERT_TRUE(pairing.ok());
  for (const TensorPair& p : pairing->pairs) {
    ExpectVerdictsAreTheDiffs(*p.quant, *p.ref, p.row_map);
  }
}

}  // namespace
}  // namespace tensormorph::element_verdict_test
