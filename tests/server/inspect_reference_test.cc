// InspectScalars with a reference, through a live server: a llama GGUF
// written from a Hugging Face source (the demo: llama.cpp's names, Q/K rows
// permuted for RoPE as llama.cpp's converter permutes them) finds, for every
// element, the source element the diff compares it with: through the
// converter's row permutation for attn_q/attn_k, element for element for the
// other tensors; the signed error and the error in steps follow from the
// two values and the element's steps; a reference that cannot be paired is
// refused with a precise status. ComputeStats with the same reference bins
// the source's values by the histogram's own bins (reference_histogram).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/loopback_server.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::testing::AllOf;

constexpr int64_t kHidden = 256, kHeads = 4;  // the demo's attention

// llama.cpp's converter, restated here rather than taken from core: within
// each head of hd rows, HF row half * hd/2 + i is written as GGUF row
// 2i + half.
int64_t HfRowOfGgufRow(int64_t gguf_row) {
  const int64_t hd = kHidden / kHeads, head = gguf_row / hd,
                within = gguf_row % hd;
  return head * hd + (within % 2) * (hd / 2) + within / 2;
}

class InspectReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::MakeTempDir());
    ASSERT_TRUE(testing::WriteDemoCheckpoints(*dir_));
    // A source holding none of the demo's tensors.
    testing::WriteFile(
        *dir_ + "/unrelated.safetensors",
        testing::BuildSafetensors({{"x", "F32", {2}, std::string(8, '\0')}}));
    server_ =
        new testing::LoopbackServer(testing::StartLoopbackServer({*dir_}));
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  Client& client() { return *server_->client; }

  // Every element of `tensor` in `checkpoint`, as float32.
  std::vector<float> ReadAll(const std::string& checkpoint,
                             const std::string& tensor) {
    v1::ReadSliceRequest r;
    r.set_checkpoint(checkpoint);
    r.set_tensor(tensor);
    auto data = client().ReadSliceAll(r);
    EXPECT_TRUE(data.ok()) << data.status();
    if (!data.ok()) return {};
    return std::vector<float>(data->floats().begin(), data->floats().end());
  }

  // Element (row, c) for every row of `tensor` in the Q8_0 GGUF, against
  // the HF source.
  absl::StatusOr<v1::InspectScalarsResponse> InspectColumn(
      const std::string& tensor, int64_t c, const std::string& reference,
      const std::string& reference_tensor = "") {
    v1::InspectScalarsRequest q;
    q.set_checkpoint("model-q8_0.gguf");
    q.set_tensor(tensor);
    q.set_reference(reference);
    q.set_reference_tensor(reference_tensor);
    for (int64_t row = 0; row < kHidden; ++row) {
      q.add_coords(row);
      q.add_coords(c);
    }
    return client().InspectScalars(q);
  }

  static std::string* dir_;
  static testing::LoopbackServer* server_;
};

std::string* InspectReferenceTest::dir_ = nullptr;
testing::LoopbackServer* InspectReferenceTest::server_ = nullptr;

TEST_F(InspectReferenceTest,
       QkRowsFindTheirSourceRowThroughTheRopePermutation) {
  for (const auto& [gguf, hf] :
       {std::pair<std::string, std::string>{
            "blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight"},
        {"blk.1.attn_k.weight", "model.layers.1.self_attn.k_proj.weight"}}) {
    SCOPED_TRACE(gguf);
    const std::vector<float> source = ReadAll("source", hf);
    // The F32 GGUF holds the source's values in the converter's row order.
    const std::vector<float> permuted = ReadAll("model-f32.gguf", gguf);
    ASSERT_EQ(source.size(), static_cast<size_t>(kHidden * kHidden));
    const int64_t c = 37;
    auto r = InspectColumn(gguf, c, "source");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->reference_tensor(), hf);
    EXPECT_TRUE(r->reference_rows_mapped());
    ASSERT_EQ(r->scalars_size(), kHidden);
    int moved = 0;
    for (const v1::ScalarInspection& s : r->scalars()) {
      const int64_t row = s.index(0), hf_row = HfRowOfGgufRow(row);
      ASSERT_TRUE(s.has_source()) << "row " << row;
      ASSERT_THAT(s.source().index(), ::testing::ElementsAre(hf_row, c));
      EXPECT_EQ(s.source().flat_index(), hf_row * kHidden + c);
      EXPECT_EQ(s.source().value(), source[hf_row * kHidden + c])
          << "row " << row;
      EXPECT_EQ(s.source().value(), permuted[row * kHidden + c])
          << "row " << row;
      moved += hf_row != row;
    }
    EXPECT_GT(moved, kHidden / 2);
  }
}

TEST_F(InspectReferenceTest, OtherTensorsPairElementForElement) {
  const std::vector<float> source =
      ReadAll("source", "model.layers.0.self_attn.v_proj.weight");
  auto r = InspectColumn("blk.0.attn_v.weight", 5, "source");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reference_tensor(), "model.layers.0.self_attn.v_proj.weight");
  EXPECT_FALSE(r->reference_rows_mapped());
  for (const v1::ScalarInspection& s : r->scalars()) {
    EXPECT_THAT(s.source().index(), ::testing::ElementsAreArray(s.index()));
    EXPECT_EQ(s.source().flat_index(), s.flat_index());
    EXPECT_EQ(s.source().value(), source[s.flat_index()]);
  }
}

TEST_F(InspectReferenceTest,
       ErrorIsDecodedMinusSourceAndStepsUseTheSourceSide) {
  auto r = InspectColumn("blk.0.attn_q.weight", 11, "source");
  ASSERT_TRUE(r.ok()) << r.status();
  int above = 0, below = 0;
  for (const v1::ScalarInspection& s : r->scalars()) {
    const double src = s.source().value(), err = double{s.value()} - src;
    EXPECT_EQ(s.source().error(), err);
    if (err == 0) {
      EXPECT_EQ(s.source().error_steps(), 0);
      continue;
    }
    // The source above the decoded value: the step above measures.
    const double step = src > s.value() ? s.step_above() : s.step_below();
    (src > s.value() ? above : below)++;
    EXPECT_DOUBLE_EQ(s.source().error_steps(), std::fabs(err) / step);
    // Q8_0 rounds to nearest: within half a step, plus what its F16 scale's
    // rounding (2^-11 relative) moves a level of up to 128 steps.
    EXPECT_LE(s.source().error_steps(), 0.5 + 128.0 / 2048);
  }
  EXPECT_GT(above, 0);
  EXPECT_GT(below, 0);
}

TEST_F(InspectReferenceTest, WithoutAReferenceThereIsNoSource) {
  auto r = InspectColumn("blk.0.attn_q.weight", 0, "");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reference_tensor(), "");
  for (const v1::ScalarInspection& s : r->scalars()) {
    EXPECT_FALSE(s.has_source());
  }
}

TEST_F(InspectReferenceTest, RefTensorNamesTheReferenceTheRulesWouldFind) {
  auto r = InspectColumn("blk.0.attn_q.weight", 3, "source",
                         "model.layers.0.self_attn.q_proj.weight");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reference_tensor(), "model.layers.0.self_attn.q_proj.weight");
  // Named or found, a Hugging Face name lines its rows up the same way.
  auto by_rule = InspectColumn("blk.0.attn_q.weight", 3, "source");
  ASSERT_TRUE(by_rule.ok()) << by_rule.status();
  EXPECT_EQ(r->reference_rows_mapped(), by_rule->reference_rows_mapped());
}

TEST_F(InspectReferenceTest,
       UnpairableReferencesAreRefusedWithPreciseStatuses) {
  EXPECT_THAT(InspectColumn("blk.0.attn_q.weight", 0, "no-such-dir"),
              AllOf(HasReason(ErrorReason::kCheckpointNotFound),
                    MessageNames("no-such-dir")));
  EXPECT_THAT(InspectColumn("blk.0.attn_q.weight", 0, "unrelated.safetensors"),
              AllOf(HasReason(ErrorReason::kNotFound),
                    MessageNames("'model.layers.0.self_attn.q_proj.weight'")));
  EXPECT_THAT(InspectColumn("blk.0.attn_q.weight", 0, "source", "nope.weight"),
              AllOf(HasReason(ErrorReason::kTensorNotFound),
                    HasMetadata("tensor", "nope.weight")));
  EXPECT_THAT(InspectColumn("blk.0.attn_q.weight", 0, "source",
                            "model.layers.0.mlp.up_proj.weight"),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("[512, 256]")));
  EXPECT_THAT(InspectColumn("blk.0.attn_q.weight", 0, "", "x"),
              HasReason(ErrorReason::kRequestInvalid));
}

// The source tensor's own histogram over the same range and bins is the
// reference histogram: the same values (a row permutation moves none in or
// out), binned by the same rule.
TEST_F(InspectReferenceTest, TheSourceHistogramBinsTheSourceByTheSameBins) {
  v1::ComputeStatsRequest q;
  q.set_checkpoint("model-q8_0.gguf");
  q.set_tensor("blk.0.attn_q.weight");
  q.set_reference("source");
  q.set_bins(40);
  auto with = client().ComputeStats(q);
  ASSERT_TRUE(with.ok()) << with.status();
  ASSERT_EQ(with->reference_histogram_size(), 40);
  v1::ComputeStatsRequest s;
  s.set_checkpoint("source");
  s.set_tensor("model.layers.0.self_attn.q_proj.weight");
  s.set_bins(40);
  s.set_range_min(with->hist_min());
  s.set_range_max(with->hist_max());
  auto source = client().ComputeStats(s);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_THAT(with->reference_histogram(),
              ::testing::ElementsAreArray(source->histogram()));
  q.clear_reference();
  auto without = client().ComputeStats(q);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(without->reference_histogram_size(), 0);
}

}  // namespace
}  // namespace tensormorph
