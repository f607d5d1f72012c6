#include "core/quant/sub_block_runs.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/quant/codec.h"
#include "gtest/gtest.h"
#include "tests/support/same_bits.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::SameBits;

// Every element of every sub-block reports, through InspectElement, the
// step, range and group its run says; on random blocks (random scales
// included: subnormal, infinite and NaN f16 scales too).
TEST(SubBlockRunsTest, AgreesWithInspectElementOnRandomBlocks) {
  for (DType dtype :
       {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kQ5_K,
        DType::kTQ2_0, DType::kQ2_K, DType::kQ3_K}) {
    SCOPED_TRACE(std::string(GetDTypeInfo(dtype).name));
    const SubBlockRunsFn fn = GetSubBlockRuns(dtype);
    ASSERT_NE(fn, nullptr);
    const DTypeInfo& info = GetDTypeInfo(dtype);
    const int subs = SubBlocksPerBlock(dtype);
    ASSERT_EQ(info.sub_block_elems * subs, info.block_elems);
    constexpr int kBlocks = 64;
    std::vector<uint8_t> data(kBlocks * info.block_bytes);
    std::mt19937_64 rng(static_cast<uint64_t>(dtype) + 1);
    for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
    std::vector<QuantRun> runs(subs);
    for (int64_t block = 0; block < kBlocks; ++block) {
      fn(data.data() + block * info.block_bytes, block * subs + 7, runs.data());
      for (int64_t e = 0; e < info.block_elems; ++e) {
        const int64_t index = block * info.block_elems + e;
        ScalarInfo si;
        ASSERT_TRUE(InspectElement(dtype, data, index, &si).ok());
        const QuantRun& r = runs[e / info.sub_block_elems];
        ASSERT_EQ(r.count, info.sub_block_elems);
        ASSERT_EQ(r.group, GroupIdOf(si) + 7) << "element " << index;
        ASSERT_TRUE(SameBits(r.step_below, si.step_below)) << index;
        ASSERT_TRUE(SameBits(r.step_above, si.step_above)) << index;
        ASSERT_TRUE(SameBits(r.range_min, si.range_min)) << index;
        ASSERT_TRUE(SameBits(r.range_max, si.range_max)) << index;
      }
    }
  }
}

// The codebook types' ranges: every element of every sub-block reports,
// through InspectElement, the group and range its run says (the steps,
// which differ from level to level, are not the run's to say).
TEST(SubBlockRunsTest, CodebookRangesAgreeWithInspectElementOnRandomBlocks) {
  for (DType dtype : {DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4}) {
    SCOPED_TRACE(std::string(GetDTypeInfo(dtype).name));
    const SubBlockRunsFn fn = GetSubBlockRanges(dtype);
    ASSERT_NE(fn, nullptr);
    const DTypeInfo& info = GetDTypeInfo(dtype);
    const int subs = SubBlocksPerBlock(dtype);
    const int64_t sub_elems = info.block_elems / subs;
    constexpr int64_t kBlocks = 256;
    std::vector<uint8_t> data(kBlocks * info.block_bytes);
    std::mt19937_64 rng(static_cast<uint64_t>(dtype) + 1);
    for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
    data[0] = 0xff;  // MXFP4's largest scale; an f16 NaN d for the others
    data[1] = 0x7f;
    std::vector<QuantRun> runs(subs);
    for (int64_t block = 0; block < kBlocks; ++block) {
      fn(data.data() + block * info.block_bytes, block * subs + 7, runs.data());
      for (int64_t e = 0; e < info.block_elems; ++e) {
        const int64_t index = block * info.block_elems + e;
        ScalarInfo si;
        ASSERT_TRUE(InspectElement(dtype, data, index, &si).ok());
        const QuantRun& r = runs[e / sub_elems];
        ASSERT_EQ(r.count, sub_elems);
        ASSERT_EQ(r.group, GroupIdOf(si) + 7) << "element " << index;
        ASSERT_TRUE(SameBits(r.range_min, si.range_min)) << index;
        ASSERT_TRUE(SameBits(r.range_max, si.range_max)) << index;
      }
    }
  }
}

TEST(SubBlockRunsTest, RangesAreTheRunsWhereThereAreRuns) {
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K,
                      DType::kQ5_K, DType::kF32}) {
    EXPECT_EQ(GetSubBlockRanges(dtype), GetSubBlockRuns(dtype));
  }
}

TEST(SubBlockRunsTest, TypesWithoutOneInspectElementsInstead) {
  EXPECT_EQ(GetSubBlockRuns(DType::kF32), nullptr);
  EXPECT_EQ(GetSubBlockRuns(DType::kIQ4_NL), nullptr);
}

}  // namespace
}  // namespace tensormorph
