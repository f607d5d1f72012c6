// saturated-group says "the scale may clip" only where a format can clip:
// values piled on a min/max group's end levels are the source's own
// (Q4_1), while on an absmax group (Q8_0) they mean a scale too small.
// With a source (check --source) the diff judges clipping, and
// saturated-group stays silent about the tensors it judges.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/check/check.h"
#include "core/check/value_scan.h"
#include "core/quant/rounding_bound.h"
#include "gtest/gtest.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph::saturated_group_test {
namespace {

using testing::BuildGguf;
using testing::F32ToF16Bits;
using testing::GgufSpec;

constexpr uint32_t kGgufF32 = 0, kGgufQ4_1 = 3, kGgufQ8_0 = 8;
constexpr int64_t kRows = 4, kCols = 64;  // 8 groups of 32
const char kTensor[] = "blk.0.ffn_down.weight";

void PutF16(float v, std::string* out) {
  const uint16_t h = F32ToF16Bits(v);
  out->append(reinterpret_cast<const char*>(&h), 2);
}

// Q4_1 as a min/max quantizer writes it: m = min, d = (max - min) / 15.
std::string QuantizeQ4_1(const std::vector<float>& v) {
  std::string out;
  for (size_t b = 0; b < v.size(); b += 32) {
    const auto [lo, hi] =
        std::minmax_element(v.begin() + b, v.begin() + b + 32);
    const float d = (*hi - *lo) / 15, m = *lo;
    PutF16(d, &out);
    PutF16(m, &out);
    uint8_t qs[16] = {};
    for (int j = 0; j < 32; ++j) {
      const int q =
          std::clamp(static_cast<int>(std::lround((v[b + j] - m) / d)), 0, 15);
      qs[j % 16] |= static_cast<uint8_t>(j < 16 ? q : q << 4);
    }
    out.append(reinterpret_cast<const char*>(qs), 16);
  }
  return out;
}

// Q8_0 with its scale divided by `shrink`: codes clamped to int8.
std::string QuantizeQ8_0Shrunk(const std::vector<float>& v, float shrink) {
  std::string out;
  for (size_t b = 0; b < v.size(); b += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[b + j]));
    const float d = amax / 127 / shrink;
    PutF16(d, &out);
    for (int j = 0; j < 32; ++j) {
      const int8_t q = static_cast<int8_t>(
          std::clamp(static_cast<int>(std::lround(v[b + j] / d)), -128, 127));
      out.push_back(static_cast<char>(q));
    }
  }
  return out;
}

std::string WriteGguf(uint32_t type, const std::string& data) {
  GgufSpec spec;
  spec.tensors = {{kTensor, {kCols, kRows}, type, data}};
  const std::string path = testing::MakeTempDir() + "/model.gguf";
  testing::WriteFile(path, BuildGguf(spec));
  return path;
}

std::vector<Finding> Check(const std::string& path,
                           const Checkpoint* source = nullptr) {
  auto ckpt = Checkpoint::Open(path, {.lenient = true});
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  std::vector<Finding> found;
  if (!ckpt.ok()) return found;
  CheckOptions options;
  options.source = source;
  auto summary = CheckCheckpoint(**ckpt, options, nullptr, nullptr,
                                 [&](const Finding& f) { found.push_back(f); });
  EXPECT_TRUE(summary.ok()) << summary.status();
  return found;
}

const Finding* FindRule(const std::vector<Finding>& found,
                        absl::string_view rule) {
  for (const Finding& f : found) {
    if (f.rule == rule) return &f;
  }
  return nullptr;
}

// Every group: ten values at its minimum, ten at its maximum, twelve
// between; a min/max quantizer puts 20 of 32 (62%) on the two end levels.
std::vector<float> TwoEndedGroups() {
  std::vector<float> v(kRows * kCols);
  for (size_t i = 0; i < v.size(); ++i) {
    const int j = static_cast<int>(i % 32);
    v[i] = j < 10 ? -1.0f : j < 20 ? 1.0f : -0.55f + 0.1f * (j - 20);
  }
  return v;
}

TEST(SaturatedGroupTest, AMinMaxQ4_1GroupWithManyEndValuesIsNoFinding) {
  const std::vector<Finding> found =
      Check(WriteGguf(kGgufQ4_1, QuantizeQ4_1(TwoEndedGroups())));
  EXPECT_EQ(FindRule(found, "saturated-group"), nullptr)
      << "a min/max quantizer cannot clip: its ends are the source's";
}

TEST(SaturatedGroupTest, AQ8_0GroupWhoseScaleIsTooSmallIsAFinding) {
  const std::vector<float> source = testing::Gaussian(kRows * kCols, 7);
  const std::vector<Finding> found =
      Check(WriteGguf(kGgufQ8_0, QuantizeQ8_0Shrunk(source, 4)));
  const Finding* f = FindRule(found, "saturated-group");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->tensor, kTensor);
  EXPECT_EQ(f->severity, Severity::kWarning);
  EXPECT_GT(f->count, 0);
  EXPECT_GE(f->worst_group, 0);
  // It may clip: values at the end levels are not clipping by themselves.
  EXPECT_TRUE(absl::StrContains(f->hint, "may clip")) << f->hint;
  EXPECT_FALSE(absl::StrContains(f->hint, "clips these")) << f->hint;
}

TEST(SaturatedGroupTest, ACorrectQ8_0OfTheSameValuesIsNoFinding) {
  const std::vector<float> source = testing::Gaussian(kRows * kCols, 7);
  const std::vector<Finding> found =
      Check(WriteGguf(kGgufQ8_0, testing::QuantizeQ8_0(source)));
  EXPECT_EQ(FindRule(found, "saturated-group"), nullptr);
}

TEST(SaturatedGroupTest, WithASourceTheDiffJudgesTheClippingAlone) {
  const std::vector<float> source = testing::Gaussian(kRows * kCols, 7);
  const std::string quant = WriteGguf(kGgufQ8_0, QuantizeQ8_0Shrunk(source, 4));
  auto src = Checkpoint::Open(WriteGguf(kGgufF32, testing::ToF32Bytes(source)));
  ASSERT_TRUE(src.ok()) << src.status();
  const std::vector<Finding> found = Check(quant, src->get());
  EXPECT_EQ(FindRule(found, "saturated-group"), nullptr)
      << "reported twice: by the end levels and by the diff";
  const Finding* f = FindRule(found, "source-err-steps");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->tensor, kTensor);
  EXPECT_EQ(f->severity, Severity::kError);
}

// Which formats the rule judges, from their bounds.
TEST(SaturatedGroupTest, OnlyFormatsThatCanClipAreJudged) {
  auto judged = [](const char* scheme, const char* convention, bool symmetric) {
    EncodingInfo info;
    info.scheme = scheme;
    info.convention = convention;
    info.quantized = true;
    info.symmetric = symmetric;
    return SaturatedGroupJudged(BoundOfEncoding(info), info);
  };
  // min/max ranges: cannot clip.
  EXPECT_FALSE(judged("Q4_1", "ggml", false));
  EXPECT_FALSE(judged("Q5_1", "ggml", false));
  EXPECT_FALSE(judged("int8", "compressed-tensors", false));
  // Error feedback moves later columns past the range GPTQ set: may clip.
  EXPECT_TRUE(judged("int4", "gptq", false));
  // absmax ranges and designed or searched clipping: may clip.
  EXPECT_TRUE(judged("Q8_0", "ggml", true));
  EXPECT_TRUE(judged("Q4_0", "ggml", true));
  EXPECT_TRUE(judged("Q4_K", "ggml", false));
  EXPECT_TRUE(judged("Q6_K", "ggml", true));
  EXPECT_TRUE(judged("IQ4_NL", "ggml", true));
  EXPECT_TRUE(judged("int4", "awq-gemm", false));
  EXPECT_TRUE(judged("int8", "compressed-tensors", true));
}

}  // namespace
}  // namespace tensormorph::saturated_group_test
