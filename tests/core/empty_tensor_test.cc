// Empty tensors (a zero dimension) in both formats: opened, listed, read as
// an empty array, and skipped by the views with a note, never a division by
// zero.
#include <cmath>
#include <string>
#include <vector>

#include "core/architecture.h"
#include "core/diff/pairing.h"
#include "core/diff/tensor_diff.h"
#include "core/format/checkpoint.h"
#include "core/heatmap.h"
#include "core/raw_slice.h"
#include "core/slice.h"
#include "core/stats.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph::empty_tensor_test {
namespace {

using ::tensormorph::testing::BuildGguf;
using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::GgufSpec;
using ::tensormorph::testing::GgufString;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::WriteFile;
using ::testing::HasSubstr;

constexpr uint32_t kF32 = 0, kQ8_0 = 8, kQ4_K = 12;

// A GGUF with empty tensors of a plain and two block types beside a normal
// one: F32 [0, 8], Q8_0 [0, 32] (no rows), Q4_K [3, 0] (no columns).
// Safetensors likewise: [0, 4], and [0, 2, 3] (no leading index exists).
std::string WriteEmptyGguf() {
  GgufSpec s;
  s.kv.push_back({"general.architecture", GgufString("llama")});
  s.tensors.push_back({"blk.0.empty_f32.weight", {8, 0}, kF32, ""});
  s.tensors.push_back({"blk.0.empty_q8.weight", {32, 0}, kQ8_0, ""});
  s.tensors.push_back(
      {"blk.0.full.weight", {8, 2}, kF32, std::string(64, '\0')});
  // Last, so its offset is the end of the data section.
  s.tensors.push_back({"blk.0.empty_q4k.weight", {0, 3}, kQ4_K, ""});
  const std::string path = MakeTempDir() + "/empty.gguf";
  WriteFile(path, BuildGguf(s));
  return path;
}

std::string WriteEmptySafetensors() {
  const std::string path = MakeTempDir() + "/empty.safetensors";
  WriteFile(path, BuildSafetensors(
                      {{"e.weight", "F32", {0, 4}, ""},
                       {"e3.weight", "BF16", {0, 2, 3}, ""},
                       {"f.weight", "F32", {2, 2}, std::string(16, '\0')}}));
  return path;
}

class EmptyTensorTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    path_ = GetParam() ? WriteEmptyGguf() : WriteEmptySafetensors();
    auto c = Checkpoint::Open(path_);
    ASSERT_TRUE(c.ok()) << c.status();
    ckpt_ = *std::move(c);
    for (const LogicalTensor& t : ckpt_->tensors()) {
      if (t.num_elements == 0) empty_.push_back(&t);
    }
    ASSERT_EQ(empty_.size(), GetParam() ? 3u : 2u);
  }
  std::string path_;
  std::shared_ptr<const Checkpoint> ckpt_;
  std::vector<const LogicalTensor*> empty_;
};

TEST_P(EmptyTensorTest, IsListedWithItsShapeAndNoBytes) {
  for (const LogicalTensor* t : empty_) {
    SCOPED_TRACE(t->name);
    EXPECT_THAT(t->shape, ::testing::Contains(0));
    for (const StoredTensor* part : t->encoding->parts()) {
      EXPECT_EQ(part->nbytes, 0u);
    }
  }
}

TEST_P(EmptyTensorTest, ReadsAsAnEmptyArrayDecodedAndRaw) {
  for (const LogicalTensor* t : empty_) {
    SCOPED_TRACE(t->name);
    auto items = ParseSlice("");
    ASSERT_TRUE(items.ok());
    auto slice = ResolveSlice(*items, t->shape);
    ASSERT_TRUE(slice.ok()) << slice.status();
    EXPECT_EQ(slice->num_elements, 0);
    EXPECT_EQ(slice->result_shape, t->shape);
    auto values = ReadSlice(*t, *slice);
    ASSERT_TRUE(values.ok()) << values.status();
    EXPECT_TRUE(values->empty());
    auto raw = RawSliceReader::Create(*t, *slice);
    ASSERT_TRUE(raw.ok()) << raw.status();
    EXPECT_EQ(raw->total_bytes(), 0);
    // A sub-slice of an empty tensor is empty too; an index into the empty
    // dimension is out of range, as in numpy.
    auto some = ParseSlice("1:5");
    ASSERT_TRUE(some.ok());
    auto sub = ResolveSlice(*some, t->shape);
    ASSERT_TRUE(sub.ok()) << sub.status();
    EXPECT_EQ(sub->num_elements, 0);
  }
}

TEST_P(EmptyTensorTest, StatsCountNothingAndDivideByNothing) {
  for (const LogicalTensor* t : empty_) {
    SCOPED_TRACE(t->name);
    auto st = ComputeStats(*t, nullptr, StatsOptions());
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->count, 0);
    for (double v : {st->min, st->max, st->mean, st->std, st->absmax,
                     st->sparsity, st->hist_min, st->hist_max}) {
      EXPECT_EQ(v, 0);
    }
    EXPECT_EQ(st->levels_used, 0);
    EXPECT_EQ(st->groups, 0);
    for (int64_t c : st->histogram) EXPECT_EQ(c, 0);
  }
}

TEST_P(EmptyTensorTest, HeatmapIsEmptyNotAnError) {
  for (const LogicalTensor* t : empty_) {
    SCOPED_TRACE(t->name);
    auto h = ComputeHeatmap(*t, nullptr, HeatmapOptions());
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->width * h->height, 0);
    EXPECT_TRUE(h->values.empty());
    EXPECT_EQ(h->min, 0);
    EXPECT_EQ(h->max, 0);
  }
}

TEST_P(EmptyTensorTest, ArchitectureCountsNoParamsAndNoBytes) {
  ArchNode root = BuildArchitecture(*ckpt_);
  std::function<void(const ArchNode&)> check = [&](const ArchNode& n) {
    EXPECT_GE(n.params, 0) << n.path;
    EXPECT_GE(n.bytes, 0) << n.path;
    for (const ArchNode& c : n.children) check(c);
  };
  check(root);
  // The one full tensor holds every parameter.
  EXPECT_EQ(root.params, GetParam() ? 16 : 4);
}

TEST_P(EmptyTensorTest, DiffSkipsEmptyTensorsWithANote) {
  auto pairing = PairTensors(*ckpt_, *ckpt_, "");
  ASSERT_TRUE(pairing.ok()) << pairing.status();
  for (const TensorPair& p : pairing->pairs) {
    EXPECT_GT(p.quant->num_elements, 0) << p.quant->name;
  }
  ASSERT_EQ(pairing->empty.size(), empty_.size());
  for (const LogicalTensor* t : empty_) {
    EXPECT_THAT(pairing->empty, ::testing::Contains(t->name));
  }
  // And DiffTensor itself, given one, reports zeros rather than NaN.
  auto d = DiffTensor(*empty_[0], *empty_[0], DiffOptions());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->count, 0);
  for (double v : {d->mse, d->rmse, d->mean_abs_err, d->max_abs_err, d->cosine,
                   d->rel_fro_err, d->max_err_steps, d->p99_err_steps}) {
    EXPECT_FALSE(std::isnan(v));
  }
}

INSTANTIATE_TEST_SUITE_P(BothFormats, EmptyTensorTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Gguf" : "Safetensors";
                         });

}  // namespace
}  // namespace tensormorph::empty_tensor_test
