// MarkOrdinaryBlocks decides from Q8_0 and Q4_K blocks' bytes what
// MarkOrdinaryRuns decides from their decoded values: held to it on random
// blocks with planted unusual sub-blocks (NaN, Inf, zero, subnormal and
// huge scales, constant, all-zero and saturated sub-blocks, levels that
// round together, random bytes), and the check's findings on GGUF files of
// such blocks are the same with it on and off.
#include "core/check/block_marks.h"

#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/check/check.h"
#include "core/check/run_counts.h"
#include "core/quant/codec.h"
#include "core/quant/decode_simd.h"
#include "core/quant/sub_block_runs.h"
#include "gtest/gtest.h"
#include "tests/support/fixture_copy.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

void PutF16(std::string& s, size_t at, uint16_t h) {
  std::memcpy(s.data() + at, &h, 2);
}

// Q8_0 blocks (34 bytes: fp16 d, 32 int8) of gaussian values, block i
// broken as i % 13 says.
std::string PlantedQ8_0(int64_t nb, uint64_t seed) {
  std::string s = testing::QuantizeQ8_0(testing::Gaussian(32 * nb, seed));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int64_t i = 0; i < nb; ++i) {
    const size_t b = 34 * static_cast<size_t>(i);
    auto code = [&](int k) -> char& { return s[b + 2 + k]; };
    switch (i % 13) {
      case 1:
        PutF16(s, b, 0x7e00);  // NaN
        break;
      case 2:
        PutF16(s, b, i % 2 ? 0x7c00 : 0xfc00);  // +-Inf
        break;
      case 3:
        PutF16(s, b, i % 2 ? 0x0000 : 0x8000);  // +-0
        break;
      case 4:  // 512 * 128 passes 65504, 512 * 127 does not
        PutF16(s, b, 0x6000);
        code(static_cast<int>(rng() % 32)) =
            static_cast<char>(i % 2 ? -128 : 127);
        break;
      case 5:  // constant
        for (int k = 0; k < 32; ++k) code(k) = code(0);
        break;
      case 6:  // all zero
        for (int k = 0; k < 32; ++k) code(k) = 0;
        break;
      case 7:    // a quarter on the end levels
      case 8: {  // and one more
        const int ends = 8 + (i % 13 == 8);
        for (int k = 0; k < ends; ++k) {
          code(k * 3 % 32) = static_cast<char>(k % 2 ? -128 : 127);
        }
        break;
      }
      case 9:
        for (int k = 0; k < 34; ++k) s[b + k] = static_cast<char>(rng());
        break;
      case 10:
        PutF16(s, b, 0x0001);  // the smallest subnormal
        break;
      case 11:
        PutF16(s, b, 0xb800);  // -0.5
        break;
      case 12:  // the first code special, the rest ordinary
        PutF16(s, b, 0x6000);
        code(0) = static_cast<char>(-128);
        break;
      default:
        break;
    }
  }
  return s;
}

// Q4_K blocks (144 bytes: fp16 d and dmin, 12 scale bytes, 128 nibble
// bytes), block i broken as i % 14 says.
std::string PlantedQ4_K(int64_t nb, uint64_t seed) {
  std::string s = testing::QuantizeQ4_K(testing::Gaussian(256 * nb, seed));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int64_t i = 0; i < nb; ++i) {
    const size_t b = 144 * static_cast<size_t>(i);
    const int row = static_cast<int>(rng() % 4);
    const bool high = rng() % 2;
    // Sets every nibble of one sub-block (row, half) to c.
    auto fill = [&](int c) {
      for (int k = 0; k < 32; ++k) {
        char& q = s[b + 16 + 32 * row + k];
        q = high ? static_cast<char>((q & 0x0f) | (c << 4))
                 : static_cast<char>((q & 0xf0) | c);
      }
    };
    switch (i % 14) {
      case 1:
        PutF16(s, b, 0x7e00);  // d NaN
        break;
      case 2:
        PutF16(s, b + 2, 0x7c00);  // dmin Inf
        break;
      case 3:
        PutF16(s, b, 0);  // d zero: every sub-block one value
        break;
      case 4:
        for (int k = 0; k < 144; ++k) s[b + k] = static_cast<char>(rng());
        break;
      case 5:
        fill(static_cast<int>(rng() % 16));  // constant
        break;
      case 6:
        for (int k = 0; k < 12; ++k) s[b + 4 + k] = 0;  // every sc and m 0
        break;
      case 7:  // every m 0: the low end level is zero, code 0 not an end
        for (int k = 4; k < 8; ++k) s[b + 4 + k] &= static_cast<char>(0xc0);
        for (int k = 8; k < 12; ++k) s[b + 4 + k] &= 0x0f;
        for (int k = 0; k < 4; ++k) s[b + 4 + k] &= 0x3f;
        for (int k = 0; k < 12; ++k) {
          char& q = s[b + 16 + 32 * row + 2 * k];
          q = static_cast<char>(high ? (q & 0x0f) : (q & 0xf0));
        }
        break;
      case 8:  // a tiny d under a huge dmin: the levels round together
        PutF16(s, b, 0x0001);
        PutF16(s, b + 2, 0x7b00);
        break;
      case 9:  // values past fp16
        PutF16(s, b, 0x7a00);
        break;
      case 10: {  // saturated: most nibbles on 0 or 15
        for (int k = 0; k < 32; ++k) {
          char& q = s[b + 16 + 32 * row + k];
          const int c = k % 3 == 0 ? 7 : (k % 2 ? 0 : 15);
          q = high ? static_cast<char>((q & 0x0f) | (c << 4))
                   : static_cast<char>((q & 0xf0) | c);
        }
        break;
      }
      case 11:  // d = dmin = 1, every sc = m = 3: code 1 decodes to 0
        PutF16(s, b, 0x3c00);
        PutF16(s, b + 2, 0x3c00);
        for (int k = 0; k < 8; ++k) s[b + 4 + k] = 3;
        for (int k = 8; k < 12; ++k) s[b + 4 + k] = 0x33;
        fill(1);
        break;
      case 12:  // negative d
        PutF16(s, b, 0xbc00);
        break;
      case 13:  // d1 = 8192, m1 = 0: codes 8..15 pass fp16, 0..7 do not;
                // the even sub-blocks use only 0..7
        PutF16(s, b, 0x7000);
        PutF16(s, b + 2, 0);
        for (int k = 0; k < 4; ++k) s[b + 4 + k] = 1;
        for (int k = 4; k < 8; ++k) s[b + 4 + k] = 0;
        for (int k = 8; k < 12; ++k) s[b + 4 + k] = 0x01;
        for (int k = 0; k < 128; ++k) s[b + 16 + k] &= static_cast<char>(0xf7);
        break;
      default:
        break;
    }
  }
  return s;
}

// What MarkOrdinaryRuns makes of the decoded blocks and their runs.
std::vector<uint8_t> Reference(DType dtype, const std::string& s, int64_t nb) {
  const int64_t per_block = dtype == DType::kQ8_0 ? 1 : 8;
  const int64_t block_bytes = dtype == DType::kQ8_0 ? 34 : 144;
  const int64_t n = nb * 32 * per_block;
  std::vector<float> v(static_cast<size_t>(n));
  const auto data =
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  EXPECT_TRUE(DecodeElements(dtype, data, 0, n, v.data()).ok());
  std::vector<QuantRun> runs(static_cast<size_t>(nb * per_block));
  for (int64_t i = 0; i < nb; ++i) {
    GetSubBlockRuns(dtype)(data.data() + i * block_bytes, i * per_block,
                           runs.data() + i * per_block);
  }
  std::vector<uint8_t> out(runs.size(), 9);
  MarkOrdinaryRuns(v.data(), runs.data(), static_cast<int64_t>(runs.size()), 32,
                   out.data());
  return out;
}

TEST(MarkOrdinaryBlocksTest, AgreesWithTheMarksOfTheDecodedValues) {
  for (DType dtype : {DType::kQ8_0, DType::kQ4_K}) {
    if (!HasBlockMarks(dtype)) GTEST_SKIP() << "no AVX2";
    SCOPED_TRACE(DTypeName(dtype));
    for (uint64_t seed : {1, 2, 3}) {
      // Q8_0's scales are judged eight blocks at a time: a tail of five.
      const int64_t nb = dtype == DType::kQ8_0 ? 13 * 40 + 5 : 14 * 20;
      const std::string s =
          dtype == DType::kQ8_0 ? PlantedQ8_0(nb, seed) : PlantedQ4_K(nb, seed);
      const std::vector<uint8_t> want = Reference(dtype, s, nb);
      // At each vector level the CPU has: Q4_K's marks read 64 codes at a
      // time with AVX-512.
      for (DecodeSimd level : {DecodeSimd::kAvx2, DecodeSimd::kAvx512}) {
        if (level > SupportedDecodeSimd()) break;
        CapDecodeSimdForTesting(level);
        std::vector<uint8_t> got(want.size(), 9);
        MarkOrdinaryBlocks(dtype, reinterpret_cast<const uint8_t*>(s.data()),
                           nb, got.data());
        CapDecodeSimdForTesting(DecodeSimd::kAvx512);
        for (size_t k = 0; k < want.size(); ++k) {
          EXPECT_EQ(got[k], want[k])
              << "sub-block " << k << " simd " << static_cast<int>(level);
        }
      }
      int64_t marked = 0;
      for (size_t k = 0; k < want.size(); ++k) marked += want[k];
      // Both answers are common, so both were tested.
      EXPECT_GT(marked, static_cast<int64_t>(want.size()) / 4);
      EXPECT_LT(marked, static_cast<int64_t>(want.size()) * 15 / 16);
    }
  }
}

// Blocks of random bytes: d and dmin take every fp16 code, so the levels'
// magnitudes, and those of d1 * 15 against m1, span every exponent apart
// (the AVX-512 kernel takes the runs' ranges from the float levels rather
// than in double); held to the decoded values' marks at each level.
TEST(MarkOrdinaryBlocksTest, AgreesOnRandomQ4_KBlocks) {
  if (!HasBlockMarks(DType::kQ4_K)) GTEST_SKIP() << "no AVX2";
  constexpr int64_t kBlocks = 20000;
  std::mt19937_64 rng(71);
  std::string s(kBlocks * 144, '\0');
  for (size_t k = 0; k < s.size(); k += 8) {
    const uint64_t r = rng();
    std::memcpy(s.data() + k, &r, 8);
  }
  const std::vector<uint8_t> want = Reference(DType::kQ4_K, s, kBlocks);
  for (DecodeSimd level : {DecodeSimd::kAvx2, DecodeSimd::kAvx512}) {
    if (level > SupportedDecodeSimd()) break;
    CapDecodeSimdForTesting(level);
    std::vector<uint8_t> got(want.size(), 9);
    MarkOrdinaryBlocks(DType::kQ4_K, reinterpret_cast<const uint8_t*>(s.data()),
                       kBlocks, got.data());
    CapDecodeSimdForTesting(DecodeSimd::kAvx512);
    int64_t differ = 0;
    for (size_t k = 0; k < want.size(); ++k) differ += got[k] != want[k];
    EXPECT_EQ(differ, 0) << "simd " << static_cast<int>(level);
  }
  int64_t marked = 0;
  for (uint8_t m : want) marked += m;
  EXPECT_GT(marked, 0);
  EXPECT_LT(marked, static_cast<int64_t>(want.size()));
}

std::vector<Finding> CheckFindings(const std::string& path) {
  auto ckpt = Checkpoint::Open(path, {.lenient = true});
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  std::vector<Finding> out;
  if (!ckpt.ok()) return out;
  CheckOptions o;
  o.values.piece_elements = 4096;  // several pieces
  auto summary = CheckCheckpoint(**ckpt, o, nullptr, nullptr,
                                 [&](const Finding& f) { out.push_back(f); });
  EXPECT_TRUE(summary.ok()) << summary.status();
  return out;
}

TEST(MarkOrdinaryBlocksTest, TheCheckFindsTheSameWithAndWithout) {
  // 64 x 1024 tensors of planted blocks; one whose codes use few levels
  // (dead levels stay undecided, so its groups go the slow way).
  const std::string dir = testing::MakeTempDir();
  constexpr int64_t kRows = 64, kCols = 1024;
  testing::GgufSpec spec;
  spec.kv.push_back({"general.architecture", testing::GgufString("llama")});
  spec.tensors.push_back(
      {"blk.0.q8", {kCols, kRows}, 8, PlantedQ8_0(kRows * kCols / 32, 5)});
  spec.tensors.push_back(
      {"blk.0.q4k", {kCols, kRows}, 12, PlantedQ4_K(kRows * kCols / 256, 6)});
  std::vector<float> few = testing::Gaussian(kRows * kCols, 7);
  for (float& x : few) x = x > 0 ? 1.0f : -1.0f;
  few[5] = 0.5f;
  spec.tensors.push_back(
      {"blk.0.few", {kCols, kRows}, 8, testing::QuantizeQ8_0(few)});
  spec.tensors.push_back(
      {"blk.1.q4k",
       {kCols, kRows},
       12,
       testing::QuantizeQ4_K(testing::Gaussian(kRows * kCols, 8))});
  const std::string path = dir + "/planted.gguf";
  testing::WriteFile(path, testing::BuildGguf(spec));

  SetBlockMarks(false);
  const std::vector<Finding> slow = CheckFindings(path);
  SetBlockMarks(true);
  std::set<std::string> rules;
  // With the marks at each vector level the CPU has (Q4_K's AVX-512 kernel,
  // and its AVX2 one).
  for (DecodeSimd level : {DecodeSimd::kAvx2, DecodeSimd::kAvx512}) {
    if (level > SupportedDecodeSimd()) break;
    SCOPED_TRACE(static_cast<int>(level));
    CapDecodeSimdForTesting(level);
    const std::vector<Finding> fast = CheckFindings(path);
    CapDecodeSimdForTesting(DecodeSimd::kAvx512);
    ASSERT_EQ(fast.size(), slow.size());
    for (size_t i = 0; i < fast.size(); ++i) {
      SCOPED_TRACE(slow[i].rule + " " + slow[i].tensor);
      rules.insert(slow[i].rule);
      EXPECT_EQ(fast[i].rule, slow[i].rule);
      EXPECT_EQ(fast[i].tensor, slow[i].tensor);
      EXPECT_EQ(fast[i].actual, slow[i].actual);
      EXPECT_EQ(fast[i].expected, slow[i].expected);
      EXPECT_EQ(fast[i].count, slow[i].count);
      EXPECT_EQ(fast[i].worst_group, slow[i].worst_group);
    }
  }
  // The planted groups fire their rules.
  for (const char* r : {"nan-scale", "inf-scale", "zero-scale", "nan-value",
                        "all-zero-group", "constant-group", "saturated-group",
                        "fp16-saturated-scale", "dead-levels"}) {
    EXPECT_TRUE(rules.contains(r)) << r;
  }
}

std::vector<Finding> SmallPieceFindings(const std::string& dir) {
  auto ckpt = Checkpoint::Open(dir, {.lenient = true});
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  std::vector<Finding> out;
  if (!ckpt.ok()) return out;
  CheckOptions o;
  o.values.piece_elements = 64;  // a row or less a piece: most by codes
  auto summary = CheckCheckpoint(**ckpt, o, nullptr, nullptr,
                                 [&](const Finding& f) { out.push_back(f); });
  EXPECT_TRUE(summary.ok()) << summary.status();
  return out;
}

void ExpectSame(const std::vector<Finding>& slow,
                const std::vector<Finding>& fast) {
  ASSERT_EQ(fast.size(), slow.size());
  for (size_t i = 0; i < fast.size(); ++i) {
    SCOPED_TRACE(slow[i].rule + " " + slow[i].tensor);
    EXPECT_EQ(fast[i].rule, slow[i].rule);
    EXPECT_EQ(fast[i].tensor, slow[i].tensor);
    EXPECT_EQ(fast[i].actual, slow[i].actual);
    EXPECT_EQ(fast[i].count, slow[i].count);
    EXPECT_EQ(fast[i].worst_group, slow[i].worst_group);
  }
}

TEST(MarkOrdinaryAffineRunsTest, TheCheckFindsTheSameWithAndWithout) {
  // The integer-code fixtures, and GPTQ's with planted groups: a constant
  // group, a saturated one, NaN, Inf, zero and huge scales.
  std::vector<std::string> dirs;
  for (const char* name : {"gptq_4bit_g32", "awq_4bit_g32", "ct_int8_channel",
                           "ct_int8_tensor_asym", "ct_w4a16_group"}) {
    dirs.push_back(testing::Fixture(std::string("safetensors/") + name));
  }
  const std::string planted = testing::MakeTempDir();
  testing::CopyFixtureInto("gptq_4bit_g32", planted);
  testing::EditSafetensors(
      planted + "/model.safetensors", [](std::vector<testing::StTensor>& ts) {
        for (testing::StTensor& t : ts) {
          if (t.name == "model.layers.0.self_attn.q_proj.qweight") {
            // [16 words of 8 codes along in, 64 out]: group k of output o
            // is words 4k..4k+3 of column o.
            auto word = [&](int w, int o) -> uint32_t* {
              return reinterpret_cast<uint32_t*>(t.data.data()) + w * 64 + o;
            };
            for (int w = 4; w < 8; ++w) *word(w, 3) = 0x88888888u;
            for (int w = 8; w < 12; ++w) *word(w, 5) = 0xf0f0f0f0u;
            for (int w = 0; w < 4; ++w) *word(w, 6) = 0x77777777u;
            *word(1, 6) = 0x77777778u;  // one code off a constant group
          }
          if (t.name == "model.layers.0.self_attn.q_proj.scales") {
            // [4 groups, 64 out] F16.
            auto put = [&](int g, int o, uint16_t h) {
              std::memcpy(t.data.data() + 2 * (g * 64 + o), &h, 2);
            };
            put(0, 9, 0x7e00);   // NaN
            put(1, 10, 0x7c00);  // Inf
            put(2, 11, 0x0000);  // zero
            put(3, 12, 0x7753);  // 30000: values past fp16
            put(0, 13, 0x0001);  // the smallest subnormal
          }
        }
      });
  dirs.push_back(planted);
  for (const std::string& dir : dirs) {
    SCOPED_TRACE(dir);
    SetBlockMarks(false);
    const std::vector<Finding> slow = SmallPieceFindings(dir);
    SetBlockMarks(true);
    ExpectSame(slow, SmallPieceFindings(dir));
    if (dir == planted) {
      std::set<std::string> rules;
      for (const Finding& f : slow) rules.insert(f.rule);
      for (const char* r : {"nan-value", "inf-value", "constant-group",
                            "saturated-group", "fp16-saturated-scale"}) {
        EXPECT_TRUE(rules.contains(r)) << r;
      }
    }
  }
}

}  // namespace
}  // namespace tensormorph
