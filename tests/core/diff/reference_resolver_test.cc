// The one set of rules by which a quantized tensor finds its reference, for
// the diff and the views alike: names translated GGUF -> Hugging Face, Q/K
// rows un-permuted, precise errors; and the views' reference math through
// the row map, checked against an independent un-permutation of the demo.
#include "core/diff/reference_resolver.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/diff/pairing.h"
#include "core/diff/tensor_diff.h"
#include "core/format/checkpoint.h"
#include "core/heatmap.h"
#include "core/stats.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph::reference_resolver_test {
namespace {

using ::tensormorph::testing::BuildGguf;
using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::DemoDir;
using ::tensormorph::testing::GgufSpec;
using ::tensormorph::testing::GgufString;
using ::tensormorph::testing::GgufU32;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ToF32Bytes;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;

std::shared_ptr<const Checkpoint> Open(const std::string& path) {
  auto c = Checkpoint::Open(path);
  if (!c.ok()) ADD_FAILURE() << c.status();
  return c.ok() ? *c : nullptr;
}

std::vector<float> DecodeAll(const LogicalTensor& t) {
  std::vector<float> v(static_cast<size_t>(t.num_elements));
  EXPECT_TRUE(t.encoding->Decode(0, t.num_elements, v.data()).ok());
  return v;
}

// The demo's HF source rows in GGUF order, un-permuted here independently
// of LlamaRopeRowMap: llama.cpp's converter views each head's rows as
// [2, head_dim/2] and swaps the axes, so GGUF row h*hd + 2i + half holds HF
// row h*hd + half*hd/2 + i.
std::vector<float> SourceInGgufRowOrder(const std::vector<float>& hf,
                                        int64_t rows, int64_t cols,
                                        int64_t heads) {
  std::vector<float> out(hf.size());
  const int64_t hd = rows / heads;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t half = 0; half < 2; ++half) {
      for (int64_t i = 0; i < hd / 2; ++i) {
        std::copy_n(&hf[(h * hd + half * (hd / 2) + i) * cols], cols,
                    &out[(h * hd + 2 * i + half) * cols]);
      }
    }
  }
  return out;
}

class ReferenceResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    q8_ = Open(DemoDir() + "/model-q8_0.gguf");
    f32_ = Open(DemoDir() + "/model-f32.gguf");
    source_ = Open(DemoDir() + "/source");
    ASSERT_TRUE(q8_ && f32_ && source_);
  }
  const LogicalTensor& Q8(const std::string& name) {
    const LogicalTensor* t = q8_->FindTensor(name);
    EXPECT_NE(t, nullptr) << name;
    return *t;
  }
  std::shared_ptr<const Checkpoint> q8_, f32_, source_;
};

TEST_F(ReferenceResolverTest, GgufFindsItsHuggingFaceSourceAndTheRopeRowMap) {
  const ReferenceResolver r(*q8_, *source_);
  EXPECT_TRUE(r.translates());
  EXPECT_EQ(r.method(), "GGUF -> Hugging Face names (llama)");
  auto q = r.Resolve(Q8("blk.0.attn_q.weight"), "", "source/");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->tensor->name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(q->row_map, LlamaRopeRowMap(256, 4));
  auto k = r.Resolve(Q8("blk.1.attn_k.weight"), "", "source/");
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->tensor->name, "model.layers.1.self_attn.k_proj.weight");
  EXPECT_EQ(k->row_map, LlamaRopeRowMap(256, 4));
  // V, the MLP, embeddings and norms keep their rows.
  for (const auto& [gguf, hf] :
       std::vector<std::pair<std::string, std::string>>{
           {"blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight"},
           {"blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight"},
           {"token_embd.weight", "model.embed_tokens.weight"},
           {"output_norm.weight", "model.norm.weight"}}) {
    auto v = r.Resolve(Q8(gguf), "", "source/");
    ASSERT_TRUE(v.ok()) << gguf << ": " << v.status();
    EXPECT_EQ(v->tensor->name, hf);
    EXPECT_TRUE(v->row_map.empty()) << gguf;
  }
}

TEST_F(ReferenceResolverTest, AnExplicitReferenceNameIsUsedAndKeepsTheRowMap) {
  const ReferenceResolver r(*q8_, *source_);
  auto q = r.Resolve(Q8("blk.0.attn_q.weight"),
                     "model.layers.0.self_attn.q_proj.weight", "source/");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->row_map, LlamaRopeRowMap(256, 4));
  // Another tensor of the same shape: taken as asked.
  auto other = r.Resolve(Q8("blk.0.attn_q.weight"),
                         "model.layers.1.self_attn.q_proj.weight", "source/");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->tensor->name, "model.layers.1.self_attn.q_proj.weight");
  auto missing = r.Resolve(Q8("blk.0.attn_q.weight"), "nope.weight", "source/");
  EXPECT_THAT(missing, AllOf(HasReason(ErrorReason::kTensorNotFound),
                             HasMetadata("checkpoint", "source/"),
                             HasMetadata("tensor", "nope.weight")));
}

TEST_F(ReferenceResolverTest, AShapeMismatchNamesBothTensorsAndBothShapes) {
  const ReferenceResolver r(*q8_, *source_);
  auto s = r.Resolve(Q8("blk.0.ffn_down.weight"),
                     "model.layers.0.mlp.up_proj.weight", "source/");
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kRequestInvalid),
                       MessageNames("'model.layers.0.mlp.up_proj.weight'"),
                       MessageNames("[512, 256]"),
                       MessageNames("'blk.0.ffn_down.weight'"),
                       MessageNames("[256, 512]")));
}

TEST_F(ReferenceResolverTest, BothGgufPairByNameWithRowsAsTheyAre) {
  const ReferenceResolver r(*q8_, *f32_);
  EXPECT_FALSE(r.translates());
  EXPECT_EQ(r.method(), "by name");
  auto q = r.Resolve(Q8("blk.0.attn_q.weight"), "", "model-f32.gguf");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->tensor->name, "blk.0.attn_q.weight");
  EXPECT_TRUE(q->row_map.empty());
}

// A small llama GGUF and a safetensors source written here: one Q of 8 rows
// in heads that cannot divide them, and a source lacking the other tensors.
class ReferenceResolverErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = MakeTempDir();
    GgufSpec g;
    g.kv.push_back({"general.architecture", GgufString("llama")});
    g.kv.push_back({"llama.attention.head_count", GgufU32(3)});
    const std::vector<float> v(32, 0.5f);
    g.tensors.push_back({"blk.0.attn_q.weight", {4, 8}, 0, ToF32Bytes(v)});
    g.tensors.push_back({"blk.0.attn_v.weight", {4, 8}, 0, ToF32Bytes(v)});
    WriteFile(dir + "/q.gguf", BuildGguf(g));
    WriteFile(dir + "/src.safetensors",
              BuildSafetensors({{"model.layers.0.self_attn.q_proj.weight",
                                 "F32",
                                 {8, 4},
                                 ToF32Bytes(v)}}));
    quant_ = Open(dir + "/q.gguf");
    ref_ = Open(dir + "/src.safetensors");
    ASSERT_TRUE(quant_ && ref_);
  }
  std::shared_ptr<const Checkpoint> quant_, ref_;
};

TEST_F(ReferenceResolverErrorsTest, NotFoundNamesEveryNameTriedAndTheOverride) {
  const ReferenceResolver r(*quant_, *ref_);
  auto v = r.Resolve(*quant_->FindTensor("blk.0.attn_v.weight"), "", "src/");
  EXPECT_THAT(v, AllOf(HasReason(ErrorReason::kNotFound),
                       MessageNames("'model.layers.0.self_attn.v_proj.weight'"),
                       MessageNames("'blk.0.attn_v.weight'"),
                       MessageNames("'src/'"), MessageNames("--ref-tensor")));
}

TEST_F(ReferenceResolverErrorsTest, HeadsThatDoNotDivideTheRowsAreRefused) {
  const ReferenceResolver r(*quant_, *ref_);
  auto q = r.Resolve(*quant_->FindTensor("blk.0.attn_q.weight"), "", "src/");
  EXPECT_THAT(q, AllOf(HasReason(ErrorReason::kRequestInvalid),
                       MessageNames("8 rows"), MessageNames("3 heads"),
                       MessageNames("llama.attention.head_count")));
  // The diff's pairing applies the same rule.
  EXPECT_EQ(PairTensors(*quant_, *ref_).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The views' reference math follows the row map: against the HF source, the
// permuted Q of the demo splits its zeros and measures its error exactly as
// against the source un-permuted by hand, and as the diff does.
TEST_F(ReferenceResolverTest, StatsAndHeatmapCompareRowsThroughTheRowMap) {
  const ReferenceResolver r(*q8_, *source_);
  for (const std::string name :
       {"blk.0.attn_q.weight", "blk.1.attn_k.weight"}) {
    SCOPED_TRACE(name);
    const LogicalTensor& q = Q8(name);
    auto ref = r.Resolve(q, "", "source/");
    ASSERT_TRUE(ref.ok()) << ref.status();
    const std::vector<float> xq = DecodeAll(q);
    const std::vector<float> xs =
        SourceInGgufRowOrder(DecodeAll(*ref->tensor), 256, 256, 4);
    int64_t pruned = 0, induced = 0;
    double max_steps = 0;
    for (size_t i = 0; i < xq.size(); ++i) {
      pruned += xq[i] == 0 && xs[i] == 0;
      induced += xq[i] == 0 && xs[i] != 0;
      ScalarInfo s;
      ASSERT_TRUE(q.encoding->Inspect(static_cast<int64_t>(i), &s).ok());
      const double e = std::fabs(static_cast<double>(xs[i]) - xq[i]);
      const double step = xs[i] > xq[i] ? s.step_above : s.step_below;
      max_steps = std::max(max_steps, e == 0 ? 0 : e / step);
    }
    EXPECT_GT(pruned, 5000);  // every 13th source value is 0
    EXPECT_LT(max_steps, 0.6);

    StatsOptions so;
    so.ref_rows = ref->row_map;
    auto st = ComputeStats(q, ref->tensor, so);
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->pruned_zeros, pruned);
    EXPECT_EQ(st->induced_zeros, induced);
    HeatmapOptions ho;
    ho.mode = HeatmapMode::kErrorSteps;
    ho.ref_rows = ref->row_map;
    auto h = ComputeHeatmap(q, ref->tensor, ho);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->max, max_steps);
    auto d = DiffTensor(q, *ref->tensor, DiffOptions(), ref->row_map);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->max_err_steps, h->max);
    EXPECT_EQ(d->induced_zeros, st->induced_zeros);

    // Without the row map the rows are other weights: errors of many steps,
    // and most pruned zeros look induced.
    auto wrong_stats = ComputeStats(q, ref->tensor, StatsOptions());
    ASSERT_TRUE(wrong_stats.ok());
    EXPECT_GT(wrong_stats->induced_zeros, 4 * induced);
    HeatmapOptions wrong = ho;
    wrong.ref_rows.clear();
    auto wh = ComputeHeatmap(q, ref->tensor, wrong);
    ASSERT_TRUE(wh.ok());
    EXPECT_GT(wh->max, 10);
  }
}

TEST_F(ReferenceResolverTest, ViewsRefuseARowMapThatDoesNotFitTheTensor) {
  const LogicalTensor& q = Q8("blk.0.attn_q.weight");
  const LogicalTensor* ref =
      source_->FindTensor("model.layers.0.self_attn.q_proj.weight");
  StatsOptions so;
  so.ref_rows = {0, 1, 2};
  EXPECT_EQ(ComputeStats(q, ref, so).status().code(),
            absl::StatusCode::kInvalidArgument);
  HeatmapOptions ho;
  ho.mode = HeatmapMode::kErrorSteps;
  ho.ref_rows = RowMap(256, 256);  // row 256 of 256
  EXPECT_THAT(
      ComputeHeatmap(q, ref, ho),
      AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames("256 rows")));
}

// CheckPairing: a diff that would pass vacuously, or measure nonsense, is
// refused with the reason.
TEST_F(ReferenceResolverTest, ReversedArgumentsAreRefusedEvenWhenTheyPair) {
  auto p = PairTensors(*source_, *q8_);
  ASSERT_TRUE(p.ok());
  absl::Status s =
      CheckPairing(*p, *source_, *q8_, "", "source/", "model-q8_0.gguf");
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kRequestInvalid),
                       MessageNames("'source/'"), MessageNames("16")));
  // Unquantized against unquantized is a fair diff (F32 GGUF vs source).
  auto f = PairTensors(*f32_, *source_);
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(CheckPairing(*f, *f32_, *source_, "", "f32", "source").ok());
}

TEST_F(ReferenceResolverTest, AFilterMatchingNothingIsRefusedNamingIt) {
  auto p = PairTensors(*q8_, *source_, "blk.9.*");
  ASSERT_TRUE(p.ok());
  absl::Status s = CheckPairing(*p, *q8_, *source_, "blk.9.*", "q8", "src");
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kRequestInvalid),
                       MessageNames("'blk.9.*'"), MessageNames("21")));
}

TEST_F(ReferenceResolverErrorsTest, NoNameMatchedSaysWhichNamesWereTried) {
  // q.gguf holds no quantized tensor: the reversal check has nothing to
  // say (the source holds none either).
  auto p = PairTensors(*quant_, *ref_, "blk.0.attn_v*");
  ASSERT_TRUE(p.ok());
  absl::Status names =
      CheckPairing(*p, *quant_, *ref_, "blk.0.attn_v*", "q.gguf", "src");
  EXPECT_THAT(names,
              AllOf(HasReason(ErrorReason::kFailedPrecondition),
                    MessageNames("'blk.0.attn_v*'"),
                    MessageNames("'model.layers.0.self_attn.v_proj.weight'")));
}

TEST_F(ReferenceResolverTest, EveryShapeMismatchedIsRefusedListingThem) {
  // The demo's Q8_0 GGUF against the fixtures' F32 GGUF: the two names they
  // share have other shapes.
  auto ref = Open(::tensormorph::testing::Fixture("gguf/source_f32.gguf"));
  ASSERT_TRUE(ref);
  const std::string glob = "blk.0.*_[qd]*";  // attn_q and ffn_down
  auto p = PairTensors(*q8_, *ref, glob);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->shape_mismatches.size(), 2u);
  absl::Status s = CheckPairing(*p, *q8_, *ref, glob, "q8", "f32");
  EXPECT_THAT(
      s, AllOf(HasReason(ErrorReason::kFailedPrecondition),
               MessageNames("blk.0.attn_q.weight: [256,256] vs [4,256]"),
               MessageNames("blk.0.ffn_down.weight: [256,512] vs [4,256]")));
}

}  // namespace
}  // namespace tensormorph::reference_resolver_test
