// numpy slicing: parsing, numpy's resolution rules, and reading in pieces.
#include "core/slice.h"

#include <numeric>
#include <vector>

#include "core/format/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::Bytes;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;

absl::StatusOr<ResolvedSlice> Resolve(const std::string& text,
                                      const std::vector<int64_t>& shape) {
  auto items = ParseSlice(text);
  if (!items.ok()) return items.status();
  return ResolveSlice(*items, shape);
}

TEST(SliceTest, ParsesRangesIndicesAndEllipsis) {
  auto items = ParseSlice(" 0:4 , ::-2, 3, ..., 1: ");
  ASSERT_TRUE(items.ok()) << items.status();
  ASSERT_EQ(items->size(), 5u);
  EXPECT_EQ((*items)[0].start, 0);
  EXPECT_EQ((*items)[0].stop, 4);
  EXPECT_FALSE((*items)[0].step.has_value());
  EXPECT_EQ((*items)[1].step, -2);
  EXPECT_EQ((*items)[2].kind, SliceItem::Kind::kIndex);
  EXPECT_EQ((*items)[3].kind, SliceItem::Kind::kEllipsis);
  EXPECT_EQ((*items)[4].start, 1);
}

TEST(SliceTest, RejectsMalformedSlices) {
  EXPECT_EQ(ParseSlice("a:3").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSlice("::0").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSlice("1:2:3:4").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSlice("...,...").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseSlice("1,,2").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SliceTest, FollowsNumpyClampingAndNegativeIndices) {
  // Each expectation is what numpy gives for np.arange(10)[slice].
  struct Case {
    std::string text;
    std::vector<int64_t> picks;
  } cases[] = {
      {"2:7", {2, 3, 4, 5, 6}},
      {"-3:", {7, 8, 9}},
      {"::-3", {9, 6, 3, 0}},
      {"8:2:-2", {8, 6, 4}},
      {"-100:100", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
      {"100:-100:-4", {9, 5, 1}},
      {"5:5", {}},
      {"7:3", {}},
      {"-1", {9}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto r = Resolve(c.text, {10});
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<int64_t> picks;
    for (int64_t k = 0; k < r->dims[0].count; ++k) {
      picks.push_back(r->dims[0].start + k * r->dims[0].step);
    }
    EXPECT_EQ(picks, c.picks);
  }
}

TEST(SliceTest, IntegerIndexDropsTheDimension) {
  auto r = Resolve("1, ..., 2", {3, 4, 5});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->result_shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(r->num_elements, 4);
}

TEST(SliceTest, IndexOutOfRangeNamesTheDimension) {
  auto r = Resolve(":, 7", {3, 5});
  EXPECT_THAT(r, AllOf(HasReason(ErrorReason::kSliceOutOfRange),
                       HasMetadata("dimension", "1"), HasMetadata("size", "5"),
                       MessageNames("index 7")));
  EXPECT_THAT(Resolve("-4", {3}),
              AllOf(HasReason(ErrorReason::kSliceOutOfRange),
                    HasMetadata("dimension", "0"), HasMetadata("size", "3")));
}

TEST(SliceTest, TooManyIndicesIsInvalid) {
  EXPECT_EQ(Resolve("1,2,3", {3, 5}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SliceTest, RankZeroTensorReadsItsOneValue) {
  auto r = Resolve("", {});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->result_shape.empty());
  EXPECT_EQ(r->num_elements, 1);
  EXPECT_EQ(Resolve("...", {}).value().num_elements, 1);
}

// A 3-D I32 tensor whose values are their own flat indices.
class SliceReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<int32_t> v(3 * 40 * 70);
    std::iota(v.begin(), v.end(), 0);
    const std::string path = MakeTempDir() + "/iota.safetensors";
    WriteFile(path, BuildSafetensors({{"t", "I32", {3, 40, 70}, Bytes(v)}}));
    auto c = Checkpoint::Open(path);
    ASSERT_TRUE(c.ok()) << c.status();
    ckpt_ = *c;
    tensor_ = ckpt_->FindTensor("t");
  }
  std::shared_ptr<const Checkpoint> ckpt_;
  const LogicalTensor* tensor_ = nullptr;
};

TEST_F(SliceReadTest, ReadsInArbitraryPiecesLikeAllAtOnce) {
  auto r = Resolve("::-1, 5:37:3, 69:0:-4", tensor_->shape);
  ASSERT_TRUE(r.ok());
  std::vector<float> expected;
  for (int64_t a = 2; a >= 0; --a) {
    for (int64_t b = 5; b < 37; b += 3) {
      for (int64_t c = 69; c > 0; c -= 4)
        expected.push_back(a * 2800 + b * 70 + c);
    }
  }
  auto whole = ReadSlice(*tensor_, *r);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(*whole, expected);
  SliceReader reader(*tensor_, *r);
  std::vector<float> pieces(expected.size());
  for (int64_t at = 0; at < r->num_elements; at += 13) {
    const int64_t n = std::min<int64_t>(13, r->num_elements - at);
    ASSERT_TRUE(reader.Read(at, n, pieces.data() + at).ok());
  }
  EXPECT_EQ(pieces, expected);
}

TEST_F(SliceReadTest, EmptySliceReadsNothing) {
  auto r = Resolve("1:1", tensor_->shape);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->num_elements, 0);
  EXPECT_TRUE(ReadSlice(*tensor_, *r).value().empty());
}

}  // namespace
}  // namespace tensormorph
