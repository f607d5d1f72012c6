// Heatmap regions and the zeros mode, against direct reductions of the
// fixtures' decoded values and against ComputeStats.
#include "core/heatmap.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/format/checkpoint.h"
#include "core/stats.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::ReadF32File;
using ::tensormorph::testing::StatusIs;

// A real encoding that records which element ranges were decoded (a fake in
// the sense of the house style: it forwards to the real decoder).
class RecordingEncoding final : public Encoding {
 public:
  explicit RecordingEncoding(std::shared_ptr<const Encoding> real)
      : real_(std::move(real)) {}
  const EncodingInfo& info() const override { return real_->info(); }
  std::vector<const StoredTensor*> parts() const override {
    return real_->parts();
  }
  absl::Status Decode(int64_t first, int64_t count, float* out) const override {
    Record(first, count);
    return real_->Decode(first, count, out);
  }
  absl::Status Inspect(int64_t index, ScalarInfo* out) const override {
    return real_->Inspect(index, out);
  }
  absl::Status DecodeRuns(int64_t first, int64_t count, float* values,
                          std::vector<QuantRun>* runs) const override {
    Record(first, count);
    return real_->DecodeRuns(first, count, values, runs);
  }
  std::vector<std::pair<int64_t, int64_t>> ranges() const {
    std::lock_guard<std::mutex> l(mu_);
    return ranges_;
  }

 private:
  void Record(int64_t first, int64_t count) const {
    std::lock_guard<std::mutex> l(mu_);
    ranges_.push_back({first, count});
  }
  std::shared_ptr<const Encoding> real_;
  mutable std::mutex mu_;
  mutable std::vector<std::pair<int64_t, int64_t>> ranges_;
};

TEST(HeatmapRegionTest, CellsDivideTheRegionInViewCoordinates) {
  auto ckpt = Checkpoint::Open(Fixture("gguf/Q4_K.gguf"));
  ASSERT_TRUE(ckpt.ok());
  const LogicalTensor* t = (*ckpt)->FindTensor("blk.0.attn_q.weight");
  ASSERT_EQ(t->shape, (std::vector<int64_t>{4, 256}));
  const auto want =
      ReadF32File(Fixture("gguf/Q4_K.blk.0.attn_q.weight.deq.f32"));
  HeatmapOptions o;
  o.width = 8;
  o.height = 2;
  o.row_begin = 1;
  o.row_end = 3;
  o.col_begin = 64;
  o.col_end = 192;
  auto h = ComputeHeatmap(*t, nullptr, o);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->rows, 4);
  EXPECT_EQ(h->cols, 256);
  EXPECT_EQ(h->row_edges, (std::vector<int64_t>{1, 2, 3}));
  ASSERT_EQ(h->col_edges.size(), 9u);
  EXPECT_EQ(h->col_edges.front(), 64);
  EXPECT_EQ(h->col_edges.back(), 192);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 8; ++j) {
      double sum = 0;
      for (int64_t c = h->col_edges[j]; c < h->col_edges[j + 1]; ++c)
        sum += want[(1 + i) * 256 + c];
      EXPECT_NEAR(h->values[i * 8 + j], sum / 16, 1e-12) << i << "," << j;
    }
  }
  // An end of 0 reaches the view's end.
  o.row_end = 0;
  o.col_end = 0;
  auto to_end = ComputeHeatmap(*t, nullptr, o);
  ASSERT_TRUE(to_end.ok());
  EXPECT_EQ(to_end->row_edges.back(), 4);
  EXPECT_EQ(to_end->col_edges.back(), 256);
}

TEST(HeatmapRegionTest, DecodesOnlyTheRegionOnce) {
  auto ckpt = Checkpoint::Open(Fixture("gguf/Q4_K.gguf"));
  ASSERT_TRUE(ckpt.ok());
  LogicalTensor t = *(*ckpt)->FindTensor("blk.0.attn_q.weight");
  auto rec = std::make_shared<RecordingEncoding>(t.encoding);
  t.encoding = rec;
  HeatmapOptions o;
  o.width = 1024;  // more cells than the region: one per element
  o.height = 1024;
  o.row_begin = 2;
  o.row_end = 4;
  o.col_begin = 32;
  o.col_end = 96;
  for (HeatmapMode mode :
       {HeatmapMode::kMean, HeatmapMode::kAbsmax, HeatmapMode::kZeros}) {
    o.mode = mode;
    auto h = ComputeHeatmap(t, nullptr, o);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->width, 64);
    EXPECT_EQ(h->height, 2);
  }
  int64_t decoded = 0;
  for (auto [first, count] : rec->ranges()) {
    const int64_t r = first / 256, c = first % 256;
    EXPECT_TRUE(r >= 2 && r < 4 && c >= 32 && c + count <= 96)
        << "decoded [" << first << ", " << first + count << ")";
    decoded += count;
  }
  EXPECT_EQ(decoded, 3 * 2 * 64);  // three modes, each the region once
}

TEST(HeatmapRegionTest, RefusesARegionOutsideEmptyOrNegative) {
  auto ckpt = Checkpoint::Open(Fixture("gguf/Q4_K.gguf"));
  ASSERT_TRUE(ckpt.ok());
  const LogicalTensor* t = (*ckpt)->FindTensor("blk.0.attn_q.weight");
  struct Case {
    int64_t rb, re, cb, ce;
    const char* says;
  };
  for (const Case& c :
       {Case{0, 5, 0, 0, "rows [0, 5)"}, Case{0, 0, 0, 257, "cols [0, 257)"},
        Case{3, 3, 0, 0, "rows [3, 3)"}, Case{0, 0, 100, 50, "cols [100, 50)"},
        Case{-1, 0, 0, 0, "rows [-1, 0"}, Case{0, -2, 0, 0, "rows [0, -2)"},
        Case{4, 0, 0, 0, "rows [4, 0 (= to the end))"}}) {
    HeatmapOptions o;
    o.row_begin = c.rb;
    o.row_end = c.re;
    o.col_begin = c.cb;
    o.col_end = c.ce;
    auto h = ComputeHeatmap(*t, nullptr, o);
    EXPECT_THAT(h, StatusIs(absl::StatusCode::kInvalidArgument, c.says));
    EXPECT_THAT(
        h, StatusIs(absl::StatusCode::kInvalidArgument, "4 rows x 256 cols"));
  }
}

TEST(HeatmapZerosTest, FractionOfExactZerosPerCell) {
  auto ckpt = Checkpoint::Open(Fixture("gguf/Q4_0.gguf"));
  ASSERT_TRUE(ckpt.ok());
  const LogicalTensor* t = (*ckpt)->FindTensor("blk.0.attn_q.weight");
  const auto want =
      ReadF32File(Fixture("gguf/Q4_0.blk.0.attn_q.weight.deq.f32"));
  HeatmapOptions o;
  o.mode = HeatmapMode::kZeros;
  o.width = 4;
  o.height = 2;
  auto h = ComputeHeatmap(*t, nullptr, o);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE(h->pruned.empty());
  const int64_t cols = t->shape.back();
  for (int i = 0; i < h->height; ++i) {
    for (int j = 0; j < h->width; ++j) {
      int64_t zeros = 0, n = 0;
      for (int64_t r = h->row_edges[i]; r < h->row_edges[i + 1]; ++r) {
        for (int64_t c = h->col_edges[j]; c < h->col_edges[j + 1]; ++c) {
          zeros += want[r * cols + c] == 0;
          ++n;
        }
      }
      EXPECT_DOUBLE_EQ(h->values[i * h->width + j],
                       static_cast<double>(zeros) / n);
    }
  }
}

// One element per cell: the cells' induced and pruned counts are
// ComputeStats' induced_zeros and pruned_zeros.
TEST(HeatmapZerosTest, OneElementCellsAgreeWithStatsAgainstAReference) {
  int64_t all_induced = 0, all_pruned = 0;
  for (const char* type : {"Q4_K", "Q4_0", "Q2_K", "TQ1_0"}) {
    auto q = Checkpoint::Open(Fixture(std::string("gguf/") + type + ".gguf"));
    auto ref = Checkpoint::Open(Fixture("gguf/source_f32.gguf"));
    ASSERT_TRUE(q.ok() && ref.ok());
    const LogicalTensor* t = (*q)->FindTensor("blk.0.ffn_down.weight");
    const LogicalTensor* x = (*ref)->FindTensor("blk.0.ffn_down.weight");
    ASSERT_NE(t, nullptr);
    ASSERT_NE(x, nullptr);
    HeatmapOptions o;
    o.mode = HeatmapMode::kZeros;
    o.height = static_cast<int>(t->shape[0]);
    o.width = static_cast<int>(t->shape[1]);
    auto h = ComputeHeatmap(*t, x, o);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_EQ(static_cast<int64_t>(h->values.size()), t->num_elements);
    ASSERT_EQ(h->pruned.size(), h->values.size());
    int64_t induced = 0, pruned = 0;
    for (size_t k = 0; k < h->values.size(); ++k) {
      ASSERT_TRUE(h->values[k] == 0 || h->values[k] == 1);
      ASSERT_TRUE(h->pruned[k] == 0 || h->pruned[k] == 1);
      induced += h->values[k] == 1;
      pruned += h->pruned[k] == 1;
    }
    auto st = ComputeStats(*t, x, StatsOptions());
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(induced, st->induced_zeros) << type;
    EXPECT_EQ(pruned, st->pruned_zeros) << type;
    all_induced += induced;
    all_pruned += pruned;
  }
  // The fixtures hold both kinds, so the agreement is not of zeros alone.
  EXPECT_GT(all_induced, 0);
  EXPECT_GT(all_pruned, 0);
}

TEST(HeatmapZerosTest, AnEmptyTensorHasNoCellsAndNoRegion) {
  auto ckpt = Checkpoint::Open(Fixture("gguf/Q4_0.gguf"));
  ASSERT_TRUE(ckpt.ok());
  LogicalTensor empty = *(*ckpt)->FindTensor("blk.0.attn_q.weight");
  empty.name = "empty";
  empty.shape = {0, 32};
  empty.num_elements = 0;
  HeatmapOptions o;
  o.mode = HeatmapMode::kZeros;
  auto h = ComputeHeatmap(empty, nullptr, o);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->width, 0);
  EXPECT_EQ(h->height, 0);
  EXPECT_TRUE(h->values.empty());
  o.col_end = 8;
  EXPECT_THAT(
      ComputeHeatmap(empty, nullptr, o),
      StatusIs(absl::StatusCode::kInvalidArgument, "tensor 'empty' is empty"));
}

}  // namespace
}  // namespace tensormorph
