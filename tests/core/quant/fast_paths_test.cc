// Speed never costs correctness: every decoder's bulk path (block kernels
// with their AVX2 clones and their vector paths at every level the CPU runs,
// the conventions' row-at-a-time decoding) agrees bit for bit with the
// element-at-a-time reference, Inspect, on random inputs.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/format/checkpoint.h"
#include "core/quant/codec.h"
#include "core/quant/decode_simd.h"
#include "core/quant/float_formats.h"
#include "core/quant/stored_encoding.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/same_bits.h"
#include "tests/support/simd_levels.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::SameBits;

namespace fs = std::filesystem;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::MakeTempDir;

// Ranges that start and end inside blocks and rows as well as on them.
std::vector<std::pair<int64_t, int64_t>> Ranges(int64_t n, std::mt19937& rng) {
  std::vector<std::pair<int64_t, int64_t>> r = {{0, n}, {1, n - 1}};
  for (int i = 0; i < 6; ++i) {
    const int64_t a = rng() % n;
    r.push_back({a, 1 + static_cast<int64_t>(rng() % (n - a))});
  }
  return r;
}

class DTypeFastPathTest : public ::testing::TestWithParam<int> {};

// Runs the body with the decoders capped at each level in turn.
class SimdLevels {
 public:
  ~SimdLevels() { CapDecodeSimdForTesting(DecodeSimd::kAvx512); }
};

TEST_P(DTypeFastPathTest, BulkDecodeMatchesInspectOnRandomBlocks) {
  const DType d = static_cast<DType>(GetParam());
  const DTypeInfo& info = GetDTypeInfo(d);
  const int64_t n = 8 * 256;  // a multiple of every block size
  std::vector<uint8_t> bytes(
      static_cast<size_t>(n / info.block_elems * info.block_bytes));
  std::mt19937 rng(GetParam() * 7919 + 1);
  SimdLevels restore;
  for (DecodeSimd level : testing::SupportedSimdLevels()) {
    CapDecodeSimdForTesting(level);
    SCOPED_TRACE("simd level " + std::to_string(static_cast<int>(level)));
    for (int trial = 0; trial < 4; ++trial) {
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      for (auto [first, count] : Ranges(n, rng)) {
        std::vector<float> bulk(static_cast<size_t>(count));
        ASSERT_TRUE(DecodeElements(d, bytes, first, count, bulk.data()).ok());
        for (int64_t i = 0; i < count; ++i) {
          ScalarInfo s;
          ASSERT_TRUE(InspectElement(d, bytes, first + i, &s).ok());
          ASSERT_TRUE(SameBits(bulk[i], s.value))
              << info.name << " element " << first + i << ": bulk " << bulk[i]
              << " vs inspect " << s.value;
        }
      }
    }
  }
}

TEST(DecodeSimdTest, TheCapLowersTheLevelInUseAndLiftingItRestoresIt) {
  SimdLevels restore;
  CapDecodeSimdForTesting(DecodeSimd::kScalar);
  EXPECT_EQ(ActiveDecodeSimd(), DecodeSimd::kScalar);
  CapDecodeSimdForTesting(DecodeSimd::kAvx512);
  EXPECT_EQ(ActiveDecodeSimd(), SupportedDecodeSimd());
}

// F16 and BF16 take every one of their 65536 codes (NaNs, infinities,
// subnormals) to the reference's float, at every vector level, over lengths
// that leave every tail size after the vector loops.
TEST(HalfFloatFastPathTest, EveryCodeMatchesTheScalarReference) {
  std::vector<uint8_t> bytes(2 * 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    bytes[2 * h] = static_cast<uint8_t>(h);
    bytes[2 * h + 1] = static_cast<uint8_t>(h >> 8);
  }
  SimdLevels restore;
  for (DType d : {DType::kF16, DType::kBF16}) {
    for (DecodeSimd level : testing::SupportedSimdLevels()) {
      CapDecodeSimdForTesting(level);
      SCOPED_TRACE(std::string(GetDTypeInfo(d).name) + " simd level " +
                   std::to_string(static_cast<int>(level)));
      for (int64_t count : {int64_t{65536}, int64_t{65536 - 3},
                            int64_t{1000 - 63}, int64_t{7}}) {
        const int64_t first = 65536 - count;  // the NaNs sit at the end
        std::vector<float> out(static_cast<size_t>(count));
        ASSERT_TRUE(DecodeElements(d, bytes, first, count, out.data()).ok());
        for (int64_t i = 0; i < count; ++i) {
          const auto h = static_cast<uint16_t>(first + i);
          const float want = d == DType::kF16 ? F16ToF32(h) : BF16ToF32(h);
          ASSERT_EQ(std::memcmp(&out[i], &want, 4), 0)
              << "code 0x" << std::hex << h << ": " << out[i] << " vs " << want;
        }
      }
    }
  }
}

std::vector<int> DecodableDTypes() {
  std::vector<int> out;
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType d = static_cast<DType>(i);
    if (GetDTypeInfo(d).decodable && GetCodec(d) != nullptr) out.push_back(i);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    Every, DTypeFastPathTest, ::testing::ValuesIn(DecodableDTypes()),
    [](const auto& info) {
      std::string name(GetDTypeInfo(static_cast<DType>(info.param)).name);
      std::replace_if(
          name.begin(), name.end(), [](char c) { return !std::isalnum(c); },
          '_');
      return name;
    });

// A copy of a convention fixture whose codes (and zero-points and integer
// scale codes) are random: every integer or FP8 tensor is overwritten,
// except the ones that index (g_idx), describe (weight_shape) or configure
// (quant_state). Float scales keep their values.
std::string RandomizedCopy(const std::string& fixture, uint32_t seed) {
  const std::string dir = MakeTempDir();
  fs::copy(Fixture(fixture), dir, fs::copy_options::recursive);
  for (auto& p : fs::directory_iterator(dir))
    fs::permissions(p.path(), fs::perms::owner_all, fs::perm_options::add);
  std::mt19937 rng(seed);
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    std::string bytes;
    {
      std::ifstream in(e.path(), std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    const auto header = nlohmann::json::parse(bytes.substr(8, n));
    for (const auto& [name, t] : header.items()) {
      if (name == "__metadata__") continue;
      const std::string dtype = t["dtype"];
      const bool codes = dtype == "I32" || dtype == "I8" || dtype == "U8" ||
                         dtype.rfind("F8_", 0) == 0;
      if (!codes || name.find("g_idx") != std::string::npos ||
          name.find("shape") != std::string::npos ||
          name.find("quant_state") != std::string::npos) {
        continue;
      }
      const uint64_t a = t["data_offsets"][0], b = t["data_offsets"][1];
      for (uint64_t i = 8 + n + a; i < 8 + n + b; ++i)
        bytes[i] = static_cast<char>(rng());
    }
    std::ofstream out(e.path(), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  return dir;
}

class ConventionFastPathTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ConventionFastPathTest, DecodeMatchesInspectOnRandomCodes) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    const std::string dir =
        RandomizedCopy(std::string("safetensors/") + GetParam(), seed);
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    std::mt19937 rng(seed);
    int checked = 0;
    for (const LogicalTensor& t : (*ckpt)->tensors()) {
      if (!t.encoding->info().quantized) continue;
      SCOPED_TRACE(t.name);
      for (auto [first, count] : Ranges(t.num_elements, rng)) {
        std::vector<float> bulk(static_cast<size_t>(count));
        ASSERT_TRUE(t.encoding->Decode(first, count, bulk.data()).ok());
        for (int64_t i = 0; i < count; ++i) {
          ScalarInfo s;
          ASSERT_TRUE(t.encoding->Inspect(first + i, &s).ok());
          ASSERT_TRUE(SameBits(bulk[i], s.value))
              << "element " << first + i << ": bulk " << bulk[i]
              << " vs inspect " << s.value;
          ++checked;
        }
      }
    }
    EXPECT_GT(checked, 0);
  }
}

// DecodeRuns: the values are Decode's, and each run's parameters are what
// Inspect says of every element the run covers.
void ExpectRunsMatchInspect(const Encoding& enc, int64_t first, int64_t count) {
  std::vector<float> values(static_cast<size_t>(count));
  std::vector<QuantRun> runs;
  ASSERT_TRUE(enc.DecodeRuns(first, count, values.data(), &runs).ok());
  int64_t i = 0;
  for (const QuantRun& r : runs) {
    ASSERT_GT(r.count, 0);
    for (const int64_t end = i + r.count; i < end; ++i) {
      ASSERT_LT(i, count);
      ScalarInfo s;
      ASSERT_TRUE(enc.Inspect(first + i, &s).ok());
      ASSERT_TRUE(SameBits(values[i], s.value)) << "element " << first + i;
      ASSERT_EQ(r.group, GroupIdOf(s)) << "element " << first + i;
      // (Random scales make NaN steps and ranges too: NaN matches NaN.)
      for (auto [got, want] : {std::pair{r.step_below, s.step_below},
                               {r.step_above, s.step_above},
                               {r.range_min, s.range_min},
                               {r.range_max, s.range_max}}) {
        ASSERT_TRUE(got == want || (got != got && want != want))
            << "element " << first + i << ": " << got << " vs " << want;
      }
    }
  }
  EXPECT_EQ(i, count);
}

TEST_P(DTypeFastPathTest, RunsCarryWhatInspectSaysOfEachElement) {
  const DType d = static_cast<DType>(GetParam());
  const DTypeInfo& info = GetDTypeInfo(d);
  const int64_t n = 8 * 256;
  std::vector<uint8_t> bytes(
      static_cast<size_t>(n / info.block_elems * info.block_bytes));
  std::mt19937 rng(GetParam() * 31 + 5);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  StoredTensor t{.name = "t",
                 .dtype = d,
                 .shape = {n},
                 .num_elements = n,
                 .nbytes = bytes.size(),
                 .data = bytes};
  const auto enc = MakeStoredEncoding(t, "ggml");
  for (auto [first, count] : Ranges(n, rng)) {
    ExpectRunsMatchInspect(*enc, first, count);
  }
}

TEST_P(ConventionFastPathTest, RunsCarryWhatInspectSaysOfEachElement) {
  const std::string dir =
      RandomizedCopy(std::string("safetensors/") + GetParam(), 7);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::mt19937 rng(7);
  for (const LogicalTensor& t : (*ckpt)->tensors()) {
    if (!t.encoding->info().quantized) continue;
    SCOPED_TRACE(t.name);
    for (auto [first, count] : Ranges(t.num_elements, rng)) {
      ExpectRunsMatchInspect(*t.encoding, first, count);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryConvention, ConventionFastPathTest,
    ::testing::Values("gptq_4bit_g32", "gptq_4bit_g32_actorder", "awq_4bit_g32",
                      "ct_int8_channel", "ct_int8_tensor_asym",
                      "ct_w4a16_group", "fp8_block_sharded", "mxfp4_gptoss",
                      "bnb_nf4"),
    [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace tensormorph

namespace tensormorph {
namespace {

// The IQ types' fast paths (float grids, sign bits flipped 8 wide) and
// Q2_0's (a level table) against their scalar references, on random
// blocks: any scale, NaN and infinity included, every bit the same.
TEST(IquantFastPathTest, FastPathsMatchTheScalarReferencesOnRandomBlocks) {
  std::mt19937 rng(29);
  for (DType d :
       {DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S, DType::kIQ3_XXS,
        DType::kIQ3_S, DType::kIQ1_S, DType::kIQ1_M}) {
    const DTypeInfo& info = GetDTypeInfo(d);
    SCOPED_TRACE(std::string(info.name));
    const Codec* fast = GetCodec(d);
    const Codec* reference = d == DType::kQ2_0 ? GgmlLowBitReferenceCodec(d)
                                               : GgmlIquantReferenceCodec(d);
    ASSERT_NE(fast, nullptr);
    ASSERT_NE(reference, nullptr);
    ASSERT_NE(fast->decode_blocks, reference->decode_blocks);
    const int64_t nb = 256;
    std::vector<uint8_t> bytes(static_cast<size_t>(nb * info.block_bytes));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    std::vector<float> got(nb * info.block_elems), want(got.size());
    fast->decode_blocks(bytes.data(), nb, got.data());
    reference->decode_blocks(bytes.data(), nb, want.data());
    int64_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      differ += std::memcmp(&got[i], &want[i], 4) != 0;
    }
    EXPECT_EQ(differ, 0);
  }
}

}  // namespace
}  // namespace tensormorph
