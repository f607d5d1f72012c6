// Heatmap regions and the zeros mode, against direct reductions of the
// fixtures' decoded values and against ComputeStats.
#include "core/heatmap.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/error_grid.h"
#include "core/format/checkpoint.h"
#include "core/stats.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ReadF32File;
using ::testing::AllOf;

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
    const char* field;  // the refused one
    const char* range;  // as the message names it
  };
  for (const Case& c : {Case{0, 5, 0, 0, "rows", "[0, 5)"},
                        Case{0, 0, 0, 257, "cols", "[0, 257)"},
                        Case{3, 3, 0, 0, "rows", "[3, 3)"},
                        Case{0, 0, 100, 50, "cols", "[100, 50)"},
                        Case{-1, 0, 0, 0, "rows", "[-1, 0"},
                        Case{0, -2, 0, 0, "rows", "[0, -2)"},
                        Case{4, 0, 0, 0, "rows", "[4, 0"}}) {
    HeatmapOptions o;
    o.row_begin = c.rb;
    o.row_end = c.re;
    o.col_begin = c.cb;
    o.col_end = c.ce;
    auto h = ComputeHeatmap(*t, nullptr, o);
    EXPECT_THAT(h, AllOf(HasReason(ErrorReason::kRequestInvalid),
                         HasMetadata("field", c.field), MessageNames(c.range),
                         MessageNames("4 rows x 256 cols")));
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
  EXPECT_THAT(ComputeHeatmap(empty, nullptr, o),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    HasMetadata("field", "region"), MessageNames("'empty'")));
}

// f16_special: [0, -0, 1, -2.5, 65504, the largest and the smallest
// subnormal, +inf, -inf, NaN].
class HeatmapNonFiniteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ckpt = Checkpoint::Open(Fixture("safetensors/plain"));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    ckpt_ = *std::move(ckpt);
    t_ = ckpt_->FindTensor("f16_special");
    ASSERT_NE(t_, nullptr);
    want_ = ReadF32File(Fixture("safetensors/plain/expected/f16_special.f32"));
    ASSERT_EQ(want_.size(), 10u);
    ASSERT_EQ(want_[4], 65504);
    ASSERT_TRUE(std::isinf(want_[7]) && want_[7] > 0);
    ASSERT_TRUE(std::isinf(want_[8]) && want_[8] < 0);
    ASSERT_TRUE(std::isnan(want_[9]));
  }
  // The heatmap of columns [col_begin, col_end) in `width` cells.
  Heatmap Map(HeatmapMode mode, int width, int64_t col_begin = 0,
              int64_t col_end = 0, const LogicalTensor* ref = nullptr) {
    HeatmapOptions o;
    o.mode = mode;
    o.width = width;
    o.col_begin = col_begin;
    o.col_end = col_end;
    auto h = ComputeHeatmap(*t_, ref, o);
    EXPECT_TRUE(h.ok()) << h.status();
    return h.ok() ? *std::move(h) : Heatmap();
  }
  std::shared_ptr<const Checkpoint> ckpt_;
  const LogicalTensor* t_ = nullptr;
  std::vector<float> want_;
};

constexpr double kInf = std::numeric_limits<double>::infinity();

// Every NaN cell is the one canonical quiet NaN.
bool IsCanonicalNaN(double v) {
  return std::bit_cast<uint64_t>(v) ==
         std::bit_cast<uint64_t>(std::numeric_limits<double>::quiet_NaN());
}

TEST_F(HeatmapNonFiniteTest, MeanPropagatesAndTheRangeIsTheFiniteCells) {
  const Heatmap h = Map(HeatmapMode::kMean, 10);
  ASSERT_EQ(h.values.size(), 10u);
  EXPECT_EQ(h.values[4], 65504);
  EXPECT_EQ(h.values[7], kInf);
  EXPECT_EQ(h.values[8], -kInf);
  EXPECT_TRUE(IsCanonicalNaN(h.values[9]));
  EXPECT_EQ(h.min, -2.5);
  EXPECT_EQ(h.max, 65504);

  // Two cells: the first five finite, the last five NaN.
  const Heatmap two = Map(HeatmapMode::kMean, 2);
  double sum = 0;
  for (int k = 0; k < 5; ++k) sum += want_[k];
  EXPECT_EQ(two.values[0], sum / 5);
  EXPECT_TRUE(IsCanonicalNaN(two.values[1]));
  EXPECT_EQ(two.min, two.values[0]);
  EXPECT_EQ(two.max, two.values[0]);

  // +inf and -inf together are NaN; +inf with finite values is +inf.
  EXPECT_TRUE(IsCanonicalNaN(Map(HeatmapMode::kMean, 1, 7, 9).values[0]));
  EXPECT_EQ(Map(HeatmapMode::kMean, 1, 5, 8).values[0], kInf);
  EXPECT_EQ(Map(HeatmapMode::kMean, 1, 8, 9).values[0], -kInf);
}

TEST_F(HeatmapNonFiniteTest, NoFiniteCellGivesARangeOfZero) {
  const Heatmap whole = Map(HeatmapMode::kMean, 1);
  EXPECT_TRUE(IsCanonicalNaN(whole.values[0]));
  EXPECT_EQ(whole.min, 0);
  EXPECT_EQ(whole.max, 0);
  const Heatmap infs = Map(HeatmapMode::kAbsmax, 2, 7, 9);
  EXPECT_EQ(infs.values, (std::vector<double>{kInf, kInf}));
  EXPECT_EQ(infs.min, 0);
  EXPECT_EQ(infs.max, 0);
}

TEST_F(HeatmapNonFiniteTest, AbsmaxKeepsTheNaNAndTakesInfinitiesAsPlusInf) {
  const Heatmap h = Map(HeatmapMode::kAbsmax, 10);
  EXPECT_EQ(h.values[7], kInf);
  EXPECT_EQ(h.values[8], kInf);
  EXPECT_TRUE(IsCanonicalNaN(h.values[9]));  // was -inf: std::max dropped it
  EXPECT_EQ(h.min, 0);
  EXPECT_EQ(h.max, 65504);
  // Cells of two: [0,-0] [1,-2.5] [65504,sub] [sub,+inf] [-inf,NaN].
  const Heatmap five = Map(HeatmapMode::kAbsmax, 5);
  EXPECT_EQ(five.values[0], 0);
  EXPECT_EQ(five.values[1], 2.5);
  EXPECT_EQ(five.values[2], 65504);
  EXPECT_EQ(five.values[3], kInf);
  EXPECT_TRUE(IsCanonicalNaN(five.values[4]));
  // The whole tensor in one cell, the NaN last: NaN.
  EXPECT_TRUE(IsCanonicalNaN(Map(HeatmapMode::kAbsmax, 1).values[0]));
}

TEST_F(HeatmapNonFiniteTest, ErrorAgainstItselfIsZeroButNaNStaysNaN) {
  // Against itself: equal values, infinities included, are 0 steps (inf -
  // inf would be NaN); a NaN source or decoded value is NaN.
  const Heatmap h = Map(HeatmapMode::kErrorSteps, 10, 0, 0, t_);
  for (int j = 0; j < 9; ++j) EXPECT_EQ(h.values[j], 0) << "cell " << j;
  EXPECT_TRUE(IsCanonicalNaN(h.values[9]));
  EXPECT_EQ(h.min, 0);
  EXPECT_EQ(h.max, 0);
  EXPECT_TRUE(
      IsCanonicalNaN(Map(HeatmapMode::kErrorSteps, 1, 0, 0, t_).values[0]));
}

TEST_F(HeatmapNonFiniteTest, ZerosAndGroupsStayFinite) {
  const Heatmap z = Map(HeatmapMode::kZeros, 2);
  EXPECT_EQ(z.values, (std::vector<double>{0.4, 0.0}));  // NaN is not zero
  EXPECT_EQ(z.min, 0);
  EXPECT_EQ(z.max, 0.4);
  const Heatmap g = Map(HeatmapMode::kGroup, 10);
  for (double v : g.values) EXPECT_EQ(v, -1);
}

TEST(HeatmapLeadingTest, NegativeIndicesCountFromTheEnd) {
  auto ckpt = Checkpoint::Open(Fixture("safetensors/plain"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor* t = (*ckpt)->FindTensor("bf16_3d");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->shape, (std::vector<int64_t>{2, 3, 4}));
  auto at = [&](int64_t leading) {
    HeatmapOptions o;
    o.leading = {leading};
    return ComputeHeatmap(*t, nullptr, o);
  };
  auto last = at(1), minus_one = at(-1), first = at(0), minus_two = at(-2);
  ASSERT_TRUE(last.ok() && minus_one.ok() && first.ok() && minus_two.ok());
  EXPECT_EQ(minus_one->values, last->values);
  EXPECT_EQ(minus_two->values, first->values);
  EXPECT_NE(last->values, first->values);
  for (int64_t bad : {int64_t{2}, int64_t{-3}, INT64_MIN}) {
    EXPECT_THAT(at(bad),
                AllOf(HasReason(ErrorReason::kIndexOutOfRange),
                      HasMetadata("dimension", "0"), HasMetadata("size", "2"),
                      MessageNames(absl::StrCat(bad)), MessageNames("-2..1")));
  }
}

// An index for a dimension the tensor does not have was ignored, and the
// heatmap drawn as if the request had not named it.
TEST(HeatmapLeadingTest, MoreIndicesThanLeadingDimensionsAreRefused) {
  auto plain = Checkpoint::Open(Fixture("safetensors/plain"));
  auto q4k = Checkpoint::Open(Fixture("gguf/Q4_K.gguf"));
  ASSERT_TRUE(plain.ok() && q4k.ok());
  const LogicalTensor* rank3 = (*plain)->FindTensor("bf16_3d");
  const LogicalTensor* rank2 = (*q4k)->FindTensor("blk.0.attn_q.weight");
  ASSERT_TRUE(rank3 != nullptr && rank2 != nullptr);
  ASSERT_EQ(rank3->shape.size(), 3u);
  ASSERT_EQ(rank2->shape.size(), 2u);
  for (const auto& [t, leading] :
       std::vector<std::pair<const LogicalTensor*, std::vector<int64_t>>>{
           {rank2, {99}},
           {rank2, {0}},
           {rank2, std::vector<int64_t>(100000, 0)},
           {rank3, {0, 0}},
           {rank3, {1, 99}}}) {
    HeatmapOptions o;
    o.leading = leading;
    EXPECT_THAT(ComputeHeatmap(*t, nullptr, o),
                AllOf(HasReason(ErrorReason::kRequestInvalid),
                      HasMetadata("field", "leading"),
                      MessageNames(absl::StrCat(leading.size(), " leading"))))
        << t->name << " with " << leading.size() << " indices";
  }
}

// A row wider than a batch (a 1-D tensor) is decoded into the pass's own
// buffer, not a scratch kept by its worker for life (one of 2^30 elements
// kept 4 GiB a worker); a region wider than 4M columns is refused before
// anything is decoded, and a narrower region of the same row is drawn.
TEST(HeatmapWideRowTest, AWideRowIsDrawnAndOnePastTheLimitRefused) {
  const int64_t n = (int64_t{1} << 22) + 1;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 7);
  testing::GgufSpec spec;
  spec.tensors.push_back({"t",
                          {n},
                          0,
                          std::string(reinterpret_cast<const char*>(v.data()),
                                      v.size() * sizeof(float))});
  const std::string path = testing::MakeTempDir() + "/wide.gguf";
  testing::WriteFile(path, testing::BuildGguf(spec));
  auto ckpt = Checkpoint::Open(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor& t = *(*ckpt)->FindTensor("t");
  HeatmapOptions o;
  o.width = 4;
  EXPECT_THAT(ComputeHeatmap(t, nullptr, o),
              AllOf(HasReason(ErrorReason::kLimitExceeded),
                    HasMetadata("limit", "heatmap_region_columns")));
  o.col_end = 700000;  // ten batches wide, in cells of 175,000
  auto h = ComputeHeatmap(t, nullptr, o);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->values.size(), 4u);
  for (int c = 0; c < 4; ++c) {
    double sum = 0;
    for (int64_t i = c * 175000; i < (c + 1) * 175000; ++i) sum += v[i];
    EXPECT_DOUBLE_EQ(h->values[c], sum / 175000) << c;
  }
}

TEST(HeatmapLocateTest, OnlyErrorAndAbsmaxModesLocateTheirCellsElement) {
  auto ckpt = Checkpoint::Open(Fixture("gguf/Q4_K.gguf"));
  ASSERT_TRUE(ckpt.ok());
  const LogicalTensor* t = (*ckpt)->FindTensor("blk.0.attn_q.weight");
  ASSERT_NE(t, nullptr);
  for (HeatmapMode mode :
       {HeatmapMode::kMean, HeatmapMode::kGroup, HeatmapMode::kZeros}) {
    HeatmapOptions o;
    o.mode = mode;
    o.locate = true;
    EXPECT_THAT(ComputeHeatmap(*t, nullptr, o),
                AllOf(HasReason(ErrorReason::kRequestInvalid),
                      HasMetadata("field", "locate")));
  }
  HeatmapOptions o;
  o.mode = HeatmapMode::kAbsmax;
  auto plain = ComputeHeatmap(*t, nullptr, o);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->cell_element.empty());
  // One cell over a region: its element is inside the region, and its
  // |value| is the cell's.
  o.locate = true;
  o.width = o.height = 1;
  o.row_begin = 1;
  o.row_end = 3;
  o.col_begin = 40;
  o.col_end = 90;
  auto one = ComputeHeatmap(*t, nullptr, o);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->cell_element.size(), 1u);
  const int64_t at = one->cell_element[0];
  EXPECT_GE(at / 256, 1);
  EXPECT_LT(at / 256, 3);
  EXPECT_GE(at % 256, 40);
  EXPECT_LT(at % 256, 90);
  float v = 0;
  ASSERT_TRUE(t->encoding->Decode(at, 1, &v).ok());
  EXPECT_EQ(std::fabs(double{v}), one->values[0]);
}

TEST(HeatmapCancelTest, ACancelledHeatmapStopsAtItsNextBatchWithCancelled) {
  auto ckpt = Checkpoint::Open(Fixture("gguf/Q4_K.gguf"));
  ASSERT_TRUE(ckpt.ok());
  const LogicalTensor* t = (*ckpt)->FindTensor("blk.0.attn_q.weight");
  ASSERT_NE(t, nullptr);
  int polls = 0;
  HeatmapOptions o;
  o.col_begin = 1;  // not whole rows: a batch per row, 4 rows, 4 polls
  o.cancelled = [&polls] { return ++polls == 2; };
  EXPECT_THAT(
      ComputeHeatmap(*t, nullptr, o),
      AllOf(HasReason(ErrorReason::kCancelled), MessageNames("band 1")));
  EXPECT_EQ(polls, 2);  // nothing after the cancellation was decoded
  o.cancelled = [] { return false; };
  EXPECT_TRUE(ComputeHeatmap(*t, nullptr, o).ok());
}

TEST(ErrorGridTest, ZoomsReduceFromTheGridWithoutDecoding) {
  auto q = Checkpoint::Open(Fixture("gguf/Q4_K.gguf"));
  auto src = Checkpoint::Open(Fixture("gguf/source_f32.gguf"));
  ASSERT_TRUE(q.ok() && src.ok());
  const LogicalTensor* t = (*q)->FindTensor("blk.0.ffn_down.weight");
  const LogicalTensor* x = (*src)->FindTensor("blk.0.ffn_down.weight");
  ASSERT_TRUE(t != nullptr && x != nullptr);
  auto grid = ComputeErrorGrid(*t, *x, {});
  ASSERT_TRUE(grid.ok()) << grid.status();
  // Eight bytes an element: a Q4_K's steps are its scales, so its errors
  // are doubles.
  EXPECT_NE(grid->f64, nullptr);
  EXPECT_EQ(grid->bytes(), ErrorGridBytes(*t));
  EXPECT_EQ(grid->bytes(), t->num_elements * 8);
  // A zoomed region through a recording encoding: the same cells as a
  // decode of it, and not one element decoded.
  LogicalTensor recorded = *t;
  auto recording = std::make_shared<RecordingEncoding>(t->encoding);
  recorded.encoding = recording;
  HeatmapOptions o;
  o.mode = HeatmapMode::kErrorSteps;
  o.width = 7;
  o.height = 3;
  o.row_begin = 1;
  o.col_begin = 30;
  o.col_end = 200;
  auto decoded = ComputeHeatmap(*t, x, o);
  o.errors = &*grid;
  auto reduced = ComputeHeatmap(recorded, x, o);
  ASSERT_TRUE(decoded.ok() && reduced.ok()) << reduced.status();
  EXPECT_EQ(reduced->values, decoded->values);
  EXPECT_TRUE(recording->ranges().empty());
}

TEST(ErrorGridTest, AGridOfAnotherViewOrModeIsRefused) {
  auto q = Checkpoint::Open(Fixture("gguf/Q4_K.gguf"));
  auto src = Checkpoint::Open(Fixture("gguf/source_f32.gguf"));
  ASSERT_TRUE(q.ok() && src.ok());
  const LogicalTensor* t = (*q)->FindTensor("blk.0.ffn_down.weight");
  const LogicalTensor* x = (*src)->FindTensor("blk.0.ffn_down.weight");
  ASSERT_TRUE(t != nullptr && x != nullptr);
  auto grid = ComputeErrorGrid(*t, *x, {});
  auto other = ComputeErrorGrid(*t, *x, {});
  ASSERT_TRUE(grid.ok() && other.ok());
  other->view.base = 1;
  HeatmapOptions o;
  o.mode = HeatmapMode::kErrorSteps;
  o.errors = &*other;
  EXPECT_THAT(ComputeHeatmap(*t, x, o),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    HasMetadata("field", "errors")));
  o.errors = &*grid;
  o.mode = HeatmapMode::kAbsmax;
  EXPECT_THAT(ComputeHeatmap(*t, x, o),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    HasMetadata("field", "mode")));
}

TEST(ErrorGridTest, ACancelledGridStopsAtItsNextBatch) {
  auto q = Checkpoint::Open(Fixture("gguf/Q4_K.gguf"));
  auto src = Checkpoint::Open(Fixture("gguf/source_f32.gguf"));
  ASSERT_TRUE(q.ok() && src.ok());
  const LogicalTensor* t = (*q)->FindTensor("blk.0.ffn_down.weight");
  const LogicalTensor* x = (*src)->FindTensor("blk.0.ffn_down.weight");
  ASSERT_TRUE(t != nullptr && x != nullptr);
  ErrorGridOptions o;
  o.cancelled = [] { return true; };
  EXPECT_THAT(ComputeErrorGrid(*t, *x, o),
              AllOf(HasReason(ErrorReason::kCancelled), MessageNames("row 0")));
}

TEST(FloatStepTableTest, HalfFormatsHaveATableAndOthersInspect) {
  // The table is checked against InspectElement on every code as it is
  // built; there is none where a code disagrees (or for wider formats).
  EXPECT_NE(FloatStepTable::For(DType::kF16), nullptr);
  EXPECT_NE(FloatStepTable::For(DType::kBF16), nullptr);
  EXPECT_EQ(FloatStepTable::For(DType::kF32), nullptr);
  EXPECT_EQ(FloatStepTable::For(DType::kQ8_0), nullptr);
  const FloatStepTable& f16 = *FloatStepTable::For(DType::kF16);
  EXPECT_EQ(f16.Of(1.0f).above, 0x1p-10);  // F16's step above 1
  EXPECT_EQ(f16.Of(1.0f).below, 0x1p-11);  // and the finer one below
  EXPECT_EQ(f16.Of(-1.0f).above, 0x1p-11);
  EXPECT_TRUE(std::isnan(f16.Of(INFINITY).above));
}

}  // namespace
}  // namespace tensormorph
