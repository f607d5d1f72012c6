// Storage facts of each dtype, pinned against ggml's and safetensors' tables.
#include "core/dtype.h"

#include "gtest/gtest.h"

namespace tensormorph {
namespace {

TEST(DTypeTest, GgmlIdsRoundTrip) {
  for (uint32_t id = 0; id < 64; ++id) {
    if (auto d = DTypeFromGgmlTypeId(id)) {
      EXPECT_EQ(GgmlTypeIdOf(*d), id);
    }
  }
  EXPECT_EQ(DTypeFromGgmlTypeId(12), DType::kQ4_K);
  EXPECT_EQ(DTypeFromGgmlTypeId(39), DType::kMXFP4);
  EXPECT_EQ(DTypeFromGgmlTypeId(40), DType::kNVFP4);
  EXPECT_FALSE(DTypeFromGgmlTypeId(4).has_value());
  EXPECT_EQ(DTypeFromGgmlTypeId(41), DType::kQ1_0);
  EXPECT_EQ(DTypeFromGgmlTypeId(42), DType::kQ2_0);
  EXPECT_FALSE(DTypeFromGgmlTypeId(43).has_value());
  EXPECT_FALSE(GgmlTypeIdOf(DType::kGgmlUnknown).has_value());
}

TEST(DTypeTest, BlockSizesMatchGgml) {
  EXPECT_EQ(GetDTypeInfo(DType::kQ4_K).block_elems, 256);
  EXPECT_EQ(GetDTypeInfo(DType::kQ4_K).block_bytes, 144);
  EXPECT_EQ(GetDTypeInfo(DType::kQ8_0).block_bytes, 34);
  EXPECT_EQ(GetDTypeInfo(DType::kTQ1_0).block_bytes, 54);
  EXPECT_EQ(GetDTypeInfo(DType::kNVFP4).block_elems, 64);
  EXPECT_EQ(GetDTypeInfo(DType::kNVFP4).block_bytes, 36);
  EXPECT_EQ(GetDTypeInfo(DType::kQ1_0).block_elems, 128);
  EXPECT_EQ(GetDTypeInfo(DType::kQ1_0).block_bytes, 18);
  EXPECT_EQ(GetDTypeInfo(DType::kQ2_0).block_elems, 64);
  EXPECT_EQ(GetDTypeInfo(DType::kQ2_0).block_bytes, 18);
}

TEST(DTypeTest, SafetensorsNames) {
  EXPECT_EQ(DTypeFromSafetensorsName("F8_E4M3"), DType::kF8E4M3);
  EXPECT_EQ(DTypeFromSafetensorsName("F8_E4M3FNUZ"), DType::kF8E4M3Fnuz);
  EXPECT_EQ(DTypeFromSafetensorsName("F4"), DType::kF4);
  EXPECT_FALSE(DTypeFromSafetensorsName("f32").has_value());
}

// Every type ggml knows decodes; only a type id Tensormorph never heard of
// does not.
TEST(DTypeTest, EveryGgmlTypeIsDecodableButTheUnknownOne) {
  for (uint32_t id = 0; id < 64; ++id) {
    if (auto d = DTypeFromGgmlTypeId(id)) {
      EXPECT_TRUE(GetDTypeInfo(*d).decodable) << DTypeName(*d);
    }
  }
  EXPECT_FALSE(GetDTypeInfo(DType::kGgmlUnknown).decodable);
}

}  // namespace
}  // namespace tensormorph
