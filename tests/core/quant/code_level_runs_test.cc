// Encoding::CodeLevelRuns: each run's 16 levels are Decode's values of its
// codes, bit for bit, and its runs carry DecodeRuns' groups and ranges, on
// every encoding that offers it (conventions' integer codes, the 16-level
// codebooks, MLX, HQQ along axis 1): on the fixtures, and on copies whose
// codes and scales are random bytes (so NaN, infinite, zero and subnormal
// scales, E8M0 255, every code), whole and in ranges that start and end
// inside groups, at every SIMD level. The others answer UNIMPLEMENTED.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/format/checkpoint.h"
#include "core/quant/decode_simd.h"
#include "gtest/gtest.h"
#include "tests/support/fixture_copy.h"
#include "tests/support/python_writer.h"
#include "tests/support/same_bits.h"
#include "tests/support/test_paths.h"

namespace tensormorph::code_level_runs_test {
namespace {

using ::tensormorph::testing::SameBits;

void ExpectLevelsAreDecodes(const LogicalTensor& t, int64_t first,
                            int64_t count) {
  SCOPED_TRACE(absl::StrCat(t.name, " [", first, ", +", count, ")"));
  Encoding::LevelCodes got;
  ASSERT_TRUE(t.encoding->CodeLevelRuns(first, count, &got).ok());
  std::vector<float> values(static_cast<size_t>(count));
  std::vector<QuantRun> runs;
  ASSERT_TRUE(t.encoding->DecodeRuns(first, count, values.data(), &runs).ok());
  std::vector<uint8_t> codes(static_cast<size_t>(count));
  ASSERT_TRUE(t.encoding->RawCodes(first, count, codes.data()).ok());
  ASSERT_EQ(got.codes, codes);
  ASSERT_EQ(got.level.size(), 16 * got.runs.size());
  // DecodeRuns' run of each element.
  std::vector<const QuantRun*> run_of;
  for (const QuantRun& r : runs) run_of.insert(run_of.end(), r.count, &r);
  ASSERT_EQ(run_of.size(), static_cast<size_t>(count));
  int64_t at = 0;
  for (size_t k = 0; k < got.runs.size(); ++k) {
    const QuantRun& r = got.runs[k];
    ASSERT_GT(r.count, 0) << "run " << k;
    ASSERT_LE(at + r.count, count) << "run " << k;
    for (int64_t i = at; i < at + r.count; ++i) {
      ASSERT_LT(got.codes[i], 16) << "element " << i;
      ASSERT_TRUE(SameBits(got.level[16 * k + got.codes[i]], values[i]))
          << "element " << i << " (code " << int{got.codes[i]} << ", run " << k
          << ")";
      ASSERT_EQ(r.group, run_of[i]->group) << "element " << i;
      ASSERT_TRUE(SameBits(r.range_min, run_of[i]->range_min)) << i;
      ASSERT_TRUE(SameBits(r.range_max, run_of[i]->range_max)) << i;
    }
    at += r.count;
  }
  EXPECT_EQ(at, count);
}

// The whole tensor, from a partial row to a partial row, and random ranges.
void ExpectLevelsAreDecodes(const LogicalTensor& t) {
  const int64_t n = t.num_elements, cols = t.shape.back();
  std::mt19937 rng(7);
  for (DecodeSimd level :
       {DecodeSimd::kScalar, DecodeSimd::kAvx2, DecodeSimd::kAvx512}) {
    if (level > SupportedDecodeSimd()) break;
    SCOPED_TRACE(absl::StrCat("simd level ", static_cast<int>(level)));
    CapDecodeSimdForTesting(level);
    ExpectLevelsAreDecodes(t, 0, n);
    if (n > 2 * cols) ExpectLevelsAreDecodes(t, cols / 2 + 1, n - cols - 3);
    for (int trial = 0; trial < 4; ++trial) {
      const int64_t first = static_cast<int64_t>(rng() % n);
      ExpectLevelsAreDecodes(t, first, 1 + rng() % (n - first));
    }
    CapDecodeSimdForTesting(DecodeSimd::kAvx512);
  }
}

// Codes, scales, zero-points and biases (never a layout's metadata:
// g_idx, shapes, codebooks, HQQ's settings) of a fixture's copy replaced
// by random bytes.
std::string RandomizedCopy(const std::string& dir, const std::string& file,
                           uint32_t seed) {
  const std::string copy = testing::CopyDir(dir);
  std::mt19937 rng(seed);
  testing::EditSafetensors(
      copy + "/" + file, [&](std::vector<testing::StTensor>& ts) {
        for (testing::StTensor& t : ts) {
          bool parameters = false;
          for (const char* suffix :
               {"qweight", "qzeros", "scales", "weight_packed", "weight_scale",
                ".absmax", "_blocks", ".biases", ".W_q", ".scale", ".zero"}) {
            parameters |= absl::EndsWith(t.name, suffix);
          }
          parameters |= absl::EndsWith(t.name, ".weight") &&
                        (t.dtype == "U8" || t.dtype == "U32");
          if (!parameters) continue;
          for (char& c : t.data) c = static_cast<char>(rng());
        }
      });
  return copy;
}

struct Case {
  std::string dir, file;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (const char* name : {"gptq_4bit_g32", "awq_4bit_g32", "ct_w4a16_group",
                           "bnb_nf4", "mxfp4_gptoss"}) {
    cases.push_back({testing::Fixture(std::string("safetensors/") + name),
                     "model.safetensors"});
  }
  cases.push_back(
      {testing::WriterOutput("mlx_writer.py") + "/model", "model.safetensors"});
  for (const char* name : {"hqq_4bit_g64", "hqq_mixed_bits"}) {
    cases.push_back(
        {testing::WriterOutput("hqq.py") + "/" + name, "model.safetensors"});
  }
  return cases;
}

// Whether `t` is one that offers the levels: a convention's (not ggml's
// blocks), quantized, codes of 4 bits or fewer, groups in regular runs (not
// act-order, not HQQ's axis 0, whose groups are columns).
bool Offers(const LogicalTensor& t) {
  const EncodingInfo& info = t.encoding->info();
  return info.convention != "ggml" && info.quantized && info.bits <= 4 &&
         !info.act_order && !(info.convention == "hqq" && info.axis == "out");
}

TEST(CodeLevelRunsTest, LevelsAreDecodesOnEveryEncodingThatOffersThem) {
  int checked = 0;
  for (const Case& c : Cases()) {
    for (bool random : {false, true}) {
      SCOPED_TRACE(absl::StrCat(c.dir, random ? " randomized" : ""));
      auto ckpt = Checkpoint::Open(
          random ? RandomizedCopy(c.dir, c.file, 3 + checked) : c.dir);
      ASSERT_TRUE(ckpt.ok()) << ckpt.status();
      for (const LogicalTensor& t : (*ckpt)->tensors()) {
        if (!Offers(t)) continue;
        ExpectLevelsAreDecodes(t);
        ++checked;
      }
    }
  }
  // Every fixture's quantized tensors, twice; MLX's int2, int3 (two), int4
  // (two), mxfp4 and nvfp4; HQQ's 1- to 4-bit ones.
  EXPECT_GE(checked, 2 * (5 + 7 + 5));
}

TEST(CodeLevelRunsTest, OtherEncodingsAnswerUnimplemented) {
  std::vector<std::string> dirs;
  for (const char* name : {"gptq_4bit_g32_actorder", "fp8_block_sharded",
                           "ct_int8_channel", "plain"}) {
    dirs.push_back(testing::Fixture(std::string("safetensors/") + name));
  }
  dirs.push_back(testing::WriterOutput("mlx_writer.py") + "/model");
  dirs.push_back(testing::WriterOutput("hqq.py") + "/hqq_axis0_bf16");
  dirs.push_back(testing::WriterOutput("hqq.py") + "/hqq_mixed_bits");
  dirs.push_back(testing::Fixture("gguf/Q4_K.gguf"));
  int checked = 0;
  for (const std::string& dir : dirs) {
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    for (const LogicalTensor& t : (*ckpt)->tensors()) {
      if (Offers(t) || t.num_elements == 0) continue;
      Encoding::LevelCodes codes;
      EXPECT_EQ(t.encoding->CodeLevelRuns(0, t.num_elements, &codes).code(),
                absl::StatusCode::kUnimplemented)
          << dir << " " << t.name;
      ++checked;
    }
  }
  EXPECT_GT(checked, 8);
}

}  // namespace
}  // namespace tensormorph::code_level_runs_test
