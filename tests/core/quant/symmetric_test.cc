// EncodingInfo::symmetric means no offset or zero-point term, for every
// ggml type and every convention fixture: checked against the table below
// and against the inspector, which must show an offset or a zero-point
// somewhere exactly when the flag says asymmetric.
#include <cctype>
#include <set>
#include <string>

#include "core/format/checkpoint.h"
#include "core/quant/stored_encoding.h"
#include "gtest/gtest.h"
#include "tests/support/symmetric_cases.h"
#include "tests/support/test_paths.h"

namespace tensormorph::symmetric_test {
namespace {

using ::tensormorph::testing::Fixture;

using Case = ::tensormorph::testing::SymmetricCase;
using ::tensormorph::testing::kSymmetricCases;

class SymmetricTest : public ::testing::TestWithParam<Case> {};

TEST_P(SymmetricTest, TheFlagSaysWhetherValuesHaveAnOffsetOrZeroPoint) {
  const Case& c = GetParam();
  auto ckpt = Checkpoint::Open(Fixture(c.path));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor* t = (*ckpt)->FindTensor(c.tensor);
  ASSERT_NE(t, nullptr) << c.tensor;
  EXPECT_EQ(t->encoding->info().symmetric, c.symmetric);
  // The inspector agrees: some element has a non-zero offset or a
  // zero-point beyond the codes' fixed shift exactly when asymmetric.
  // (Symmetric integers may report their fixed shift as a zero-point, as
  // Q4_0's 8 does: a constant over the whole tensor.)
  bool offset = false;
  double first_zero = 0;
  bool zero_varies = false;
  for (int64_t i = 0; i < t->num_elements; ++i) {
    ScalarInfo s;
    ASSERT_TRUE(t->encoding->Inspect(i, &s).ok());
    offset |= s.offset != 0;
    if (i == 0) first_zero = s.zero_point;
    zero_varies |= s.zero_point != first_zero;
  }
  if (c.symmetric) {
    EXPECT_FALSE(offset);
    EXPECT_FALSE(zero_varies);
  } else {
    EXPECT_TRUE(offset || zero_varies || first_zero != 0);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryGgmlTypeAndConvention, SymmetricTest,
                         ::testing::ValuesIn(kSymmetricCases),
                         [](const auto& info) {
                           std::string name = info.param.path;
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch)))
                               ch = '_';
                           }
                           return name;
                         });

// Every ggml type, fixture or not (the flag depends on the type alone).
TEST(SymmetricGgmlTypesTest, OnlyTypesWithAMinAreAsymmetric) {
  const std::set<DType> with_min = {DType::kQ4_1, DType::kQ5_1, DType::kQ2_K,
                                    DType::kQ4_K, DType::kQ5_K};
  for (int d = static_cast<int>(DType::kQ4_0); d < kNumDTypes; ++d) {
    const DType dtype = static_cast<DType>(d);
    StoredTensor t;
    t.name = "t";
    t.dtype = dtype;
    t.shape = {0};
    const auto enc = MakeStoredEncoding(t, "ggml");
    EXPECT_EQ(enc->info().symmetric, !with_min.contains(dtype))
        << DTypeName(dtype);
  }
}

}  // namespace
}  // namespace tensormorph::symmetric_test
