// MakeAffineEncoding validates the whole combination before any decoding:
// a matrix that would index past its stored bytes, a group grid the scales
// do not cover, a zero group size or an act-order index outside the groups
// is DATA_LOSS naming the matrix and the rule; a consistent one decodes.
#include "core/quant/affine_encoding.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;

StoredTensor Stored(const std::string& name, DType dtype,
                    std::vector<int64_t> shape, const std::string& bytes) {
  StoredTensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.num_elements = 1;
  for (int64_t d : t.shape) t.num_elements *= d;
  t.nbytes = bytes.size();
  t.data = {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
  return t;
}

class AffineParamsTest : public ::testing::Test {
 protected:
  // 4 x 8 int8 codes, group size 4 along columns: scales F32 [4, 2].
  AffineParamsTest()
      : code_bytes_(32, '\x02'),
        scale_bytes_(4 * 2 * 4, '\0'),
        codes_(Stored("w", DType::kI8, {4, 8}, code_bytes_)),
        scales_(Stored("w_scale", DType::kF32, {4, 2}, scale_bytes_)) {}

  AffineParams Good() const {
    AffineParams p;
    p.shape = {4, 8};
    p.rows = 4;
    p.cols = 8;
    p.codes = {.tensor = &codes_,
               .kind = IntMatrix::Kind::kDirect,
               .bits = 8,
               .rows = 4,
               .cols = 8,
               .stored_cols = 8};
    p.signed_codes = true;
    p.groups = AffineParams::Groups::kGroup;
    p.group_size = 4;
    p.scale = {.tensor = &scales_, .rows = 4, .cols = 2};
    p.parts = {&codes_, &scales_};
    return p;
  }

  // Refused as DATA_LOSS, the message naming each of `named`: the matrix,
  // and the numbers or shapes that break the rule.
  void ExpectRefused(const AffineParams& p,
                     const std::vector<std::string>& named) {
    auto e = MakeAffineEncoding(p);
    ASSERT_FALSE(e.ok()) << "accepted";
    EXPECT_THAT(e, HasReason(ErrorReason::kDataLoss));
    for (const std::string& value : named) {
      EXPECT_THAT(e, MessageNames(value));
    }
  }

  std::string code_bytes_, scale_bytes_;
  StoredTensor codes_, scales_;
};

TEST_F(AffineParamsTest, AcceptsAConsistentCombination) {
  auto e = MakeAffineEncoding(Good());
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<float> v(32);
  EXPECT_TRUE((*e)->Decode(0, 32, v.data()).ok());
}

TEST_F(AffineParamsTest, RefusesCodesIndexingPastTheirBytes) {
  AffineParams p = Good();
  p.codes.stored_cols = 9;  // row 3 would end at byte 36 of 32
  ExpectRefused(p, {"codes 'w'", "32 bytes"});
  p = Good();
  p.codes.rows = 3;  // fewer rows than the shape
  ExpectRefused(p, {"codes 'w'", "[3,8]", "[4,8]"});
  p = Good();
  p.codes.bits = 16;  // wider than an I8 element
  ExpectRefused(p, {"I8", "16-bit"});
}

TEST_F(AffineParamsTest, RefusesPackedCodesOutsideTheirWords) {
  AffineParams p = Good();
  p.codes.kind = IntMatrix::Kind::kPackedAlongCols;
  p.codes.bits = 4;
  p.codes.per_word = 8;
  p.codes.stored_cols = 1;
  ExpectRefused(p, {"32-bit"});  // I8 is no word
}

TEST_F(AffineParamsTest, RefusesScalesThatDoNotCoverTheGroups) {
  AffineParams p = Good();
  p.group_size = 2;  // 4 groups per row, the scales have 2
  ExpectRefused(p, {"scales 'w_scale'", "[4,2]", "[4,4]"});
  p = Good();
  p.scale.rows = 8;  // more than the tensor holds
  ExpectRefused(p, {"8 values", "[8,2]"});
}

TEST_F(AffineParamsTest, RefusesZeroGroupSizeAndBlocks) {
  AffineParams p = Good();
  p.group_size = 0;
  ExpectRefused(p, {"group size 0"});
  p = Good();
  p.groups = AffineParams::Groups::kBlock;
  p.block_rows = 0;
  p.block_cols = 4;
  ExpectRefused(p, {"block 0x4"});
}

TEST_F(AffineParamsTest, RefusesGIdxOutsideTheGroupsOrOfTheWrongLength) {
  AffineParams p = Good();
  p.g_idx = {0, 0, 1, 1, 0, 0, 2, 1};
  ExpectRefused(p, {"g_idx[6] = 2", "2 groups"});
  p = Good();
  p.g_idx = {0, 1};
  ExpectRefused(p, {"g_idx", "2 entries", "8 columns"});
  p = Good();
  p.g_idx = {0, 0, 1, 1, 0, 0, -1, 1};
  ExpectRefused(p, {"g_idx[6] = -1"});
}

TEST_F(AffineParamsTest, RefusesAShapeThatIsNotRowsByCols) {
  AffineParams p = Good();
  p.shape = {4, 4};
  ExpectRefused(p, {"[4,8]"});
}

TEST_F(AffineParamsTest, RefusesACodebookSmallerThanTheCodes) {
  AffineParams p = Good();
  p.table = std::vector<float>(16, 1.0f);  // 8-bit codes need 256 levels
  ExpectRefused(p, {"16 levels", "8-bit"});
}

TEST_F(AffineParamsTest, RefusesZeroPointsThatDoNotCoverTheGroups) {
  AffineParams p = Good();
  p.has_zero = true;
  p.zeros = {.tensor = &codes_,
             .kind = IntMatrix::Kind::kDirect,
             .bits = 8,
             .rows = 4,
             .cols = 1,
             .stored_cols = 1};
  ExpectRefused(p, {"zero points 'w'", "[4,1]", "[4,2]"});
}

}  // namespace
}  // namespace tensormorph
