// HQQ checkpoints written by tests/python/writers/hqq.py from the format's
// definition: every quantized weight decodes to the writer's reference bits
// (float64 operations rounded once each to the compute dtype), whole, in
// pieces and per element; the diff against the source equals float64;
// hostile configs and metadata are refused naming the key or tensor.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/diff/pairing.h"
#include "core/diff/tensor_diff.h"
#include "core/format/checkpoint.h"
#include "core/quant/decode_simd.h"
#include "core/quant/hqq_kernels.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/fixture_copy.h"
#include "tests/support/npy_reader.h"
#include "tests/support/process.h"
#include "tests/support/python_writer.h"
#include "tests/support/same_bits.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph::conventions_hqq_test {
namespace {

namespace fs = std::filesystem;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ReadJson;
using ::tensormorph::testing::WriteJson;
using ::testing::AllOf;
using Json = nlohmann::json;

// The writer's fixtures, written once per test binary run.
const std::string& Fixtures() { return testing::WriterOutput("hqq.py"); }

// A fresh copy of fixture `name`, to edit.
std::string CopyOf(const std::string& name) {
  return testing::CopyDir(Fixtures() + "/" + name);
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

class HqqFixtureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(HqqFixtureTest, EveryQuantizedWeightDecodesToTheReferenceBits) {
  const std::string dir = Fixtures() + "/" + GetParam();
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->conventions(), std::vector<std::string>{"hqq"});
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(dir + "/ref")) {
    std::string name = entry.path().filename().string();
    name = name.substr(0, name.size() - 4);
    SCOPED_TRACE(name);
    const LogicalTensor* t = (*ckpt)->FindTensor(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->encoding->info().convention, "hqq");
    const testing::NpyArray ref = testing::ReadNpy(entry.path().string());
    const std::vector<float> want = ref.floats();
    ASSERT_EQ(t->shape, ref.shape);
    std::vector<float> got(want.size());
    ASSERT_TRUE(t->encoding->Decode(0, t->num_elements, got.data()).ok());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(Bits(got[i]), Bits(want[i]))
          << "element " << i << ": " << got[i] << " vs " << want[i];
    }
    for (int64_t first = 0; first < t->num_elements;) {
      const int64_t n = std::min<int64_t>(37, t->num_elements - first);
      std::vector<float> part(n);
      ASSERT_TRUE(t->encoding->Decode(first, n, part.data()).ok());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(Bits(part[i]), Bits(want[first + i])) << first + i;
      }
      first += n;
    }
    for (int64_t i = 0; i < t->num_elements; i += 5) {
      ScalarInfo s;
      ASSERT_TRUE(t->encoding->Inspect(i, &s).ok());
      ASSERT_EQ(Bits(s.value), Bits(want[i])) << "inspect " << i;
      EXPECT_LT(s.code, int64_t{1} << t->encoding->info().bits);
      EXPECT_EQ(s.num_params, 2);
    }
    ++checked;
  }
  EXPECT_GE(checked, 1);
  // The layer's metadata tensors are parts of it, not tensors of their own.
  EXPECT_EQ((*ckpt)->FindTensor("model.layers.0.mlp.down_proj.nbits"), nullptr);
  const LogicalTensor* head = (*ckpt)->FindTensor("lm_head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_FALSE(head->encoding->info().quantized);
}

TEST_P(HqqFixtureTest, DiffAgainstTheSourceMatchesFloat64) {
  const std::string dir = Fixtures() + "/" + GetParam();
  auto quant = Checkpoint::Open(dir);
  auto source = Checkpoint::Open(dir + "/source");
  ASSERT_TRUE(quant.ok() && source.ok());
  auto pairing = PairTensors(**quant, **source);
  ASSERT_TRUE(pairing.ok()) << pairing.status();
  int checked = 0;
  for (const TensorPair& p : pairing->pairs) {
    const std::string ref = dir + "/ref/" + p.quant->name + ".npy";
    if (!fs::exists(ref)) continue;
    SCOPED_TRACE(p.quant->name);
    auto d = DiffTensor(*p.quant, *p.ref, DiffOptions());
    ASSERT_TRUE(d.ok()) << d.status();
    const std::vector<float> xq = testing::ReadNpy(ref).floats();
    std::vector<float> xs(p.ref->num_elements);
    ASSERT_TRUE(
        p.ref->encoding->Decode(0, p.ref->num_elements, xs.data()).ok());
    double sse = 0, sxx = 0, maxabs = 0;
    for (size_t i = 0; i < xq.size(); ++i) {
      const double a = xs[i], e = std::fabs(a - xq[i]);
      sse += e * e;
      sxx += a * a;
      maxabs = std::max(maxabs, e);
    }
    const double n = static_cast<double>(xq.size());
    EXPECT_NEAR(d->mse, sse / n, 1e-12 * sse / n);
    EXPECT_EQ(d->max_abs_err, maxabs);
    EXPECT_NEAR(d->sqnr_db, 10 * std::log10(sxx / sse), 1e-9);
    ++checked;
  }
  EXPECT_GE(checked, 1);
}

// The fast paths at every vector level the CPU runs (the scalar table path
// included) decode every range to what Inspect, the scalar reference, says
// of each element.
TEST_P(HqqFixtureTest, DecodeAtEveryVectorLevelMatchesInspect) {
  auto ckpt = Checkpoint::Open(Fixtures() + "/" + GetParam());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::mt19937 rng(41);
  struct Restore {  // even when an assertion returns early
    ~Restore() { CapDecodeSimdForTesting(DecodeSimd::kAvx512); }
  } restore;
  for (int l = 0; l <= static_cast<int>(SupportedDecodeSimd()); ++l) {
    CapDecodeSimdForTesting(static_cast<DecodeSimd>(l));
    for (const LogicalTensor& t : (*ckpt)->tensors()) {
      if (!t.encoding->info().quantized) continue;
      SCOPED_TRACE(::testing::Message() << t.name << " level " << l);
      const int64_t n = t.num_elements;
      for (int trial = 0; trial < 8; ++trial) {
        const int64_t first = trial == 0 ? 0 : rng() % n;
        const int64_t count = trial == 0 ? n : 1 + rng() % (n - first);
        std::vector<float> got(count);
        ASSERT_TRUE(t.encoding->Decode(first, count, got.data()).ok());
        for (int64_t i = 0; i < count; ++i) {
          ScalarInfo s;
          ASSERT_TRUE(t.encoding->Inspect(first + i, &s).ok());
          ASSERT_TRUE(testing::SameBits(got[i], s.value)) << first + i;
        }
      }
    }
  }
}

// The first and last levels are the range's ends as decoded (float16 or
// bfloat16 arithmetic), so every element on them counts as at an end level.
TEST_P(HqqFixtureTest, ElementsOnTheEndLevelsAreTheRangesEnds) {
  auto ckpt = Checkpoint::Open(Fixtures() + "/" + GetParam());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  for (const LogicalTensor& t : (*ckpt)->tensors()) {
    if (!t.encoding->info().quantized) continue;
    SCOPED_TRACE(t.name);
    int64_t on_ends = 0;
    for (int64_t i = 0; i < t.num_elements; ++i) {
      ScalarInfo s;
      ASSERT_TRUE(t.encoding->Inspect(i, &s).ok());
      ASSERT_GE(s.value, s.range_min) << i;
      ASSERT_LE(s.value, s.range_max) << i;
      if (s.code != 0 && s.code != (1 << s.code_width) - 1) continue;
      ++on_ends;
      EXPECT_TRUE(s.value == s.range_min || s.value == s.range_max)
          << i << " code " << s.code << " value " << s.value << " range ["
          << s.range_min << ", " << s.range_max << "]";
    }
    EXPECT_GT(on_ends, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryLayout, HqqFixtureTest,
                         ::testing::Values("hqq_4bit_g64", "hqq_axis0_bf16",
                                           "hqq_mixed_bits"),
                         [](const auto& info) {
                           return std::string(info.param);
                         });

TEST(HqqTest, RoundToDTypeRoundsOnceToNearestEven) {
  EXPECT_EQ(RoundToDType(1.0 + 0x1p-11, DType::kF16), 1.0);  // tie: even
  EXPECT_EQ(RoundToDType(1.0 + 3 * 0x1p-11, DType::kF16), 1.0 + 0x1p-9);
  EXPECT_EQ(RoundToDType(0x1p-25, DType::kF16), 0.0);  // half the least
  EXPECT_EQ(RoundToDType(0x1.8p-25, DType::kF16), 0x1p-24);
  EXPECT_EQ(RoundToDType(65520.0, DType::kF16), INFINITY);
  EXPECT_EQ(RoundToDType(1.0 + 0x1p-8, DType::kBF16), 1.0);
  EXPECT_EQ(RoundToDType(-3.0, DType::kBF16), -3.0);
  EXPECT_TRUE(std::signbit(RoundToDType(-0x1p-30, DType::kF16)));
  EXPECT_EQ(RoundToDType(0x1.0000018p0, DType::kF32), 0x1.000002p0);
  EXPECT_EQ(RoundToDType(-1e-300, DType::kBF16), 0.0);
}

TEST(HqqTest, GroupValuesFastPathEqualsTheScalarReference) {
  std::mt19937 rng(23);
  std::uniform_real_distribution<double> u(-1, 1);
  const double scales[] = {1e-3, 0.0123, -0.5, 3e4, 1e-8, 0.0};
  // Zeros on both sides of the float16 fast path's range (2^-6, 2^15).
  const double zeros[] = {7.5,   0.0,      -0.0,    1e-7,     15.999,
                          300.0, -2.25,    0x1p-6,  0x1p-7,   0x1.ffcp14,
                          4e4,   0x1.8p-6, -0x1p-6, 0.0078125};
  for (DType d : {DType::kF16, DType::kBF16, DType::kF32}) {
    for (int bits : {2, 3, 4, 8}) {
      for (double s0 : scales) {
        for (double z0 : zeros) {
          const double s = RoundToDType(s0 * (1 + 0.1 * u(rng)), d);
          const double z = RoundToDType(z0 * (1 + 0.1 * u(rng)), d);
          float fast[256], ref[256];
          HqqGroupValues(s, z, bits, d, fast);
          HqqGroupValuesScalar(s, z, bits, d, ref);
          for (int c = 0; c < (1 << bits); ++c) {
            ASSERT_EQ(Bits(fast[c]), Bits(ref[c]))
                << DTypeName(d) << " bits " << bits << " s " << s << " z " << z
                << " code " << c;
          }
        }
      }
    }
  }
}

TEST(HqqConfigTest, HostileValuesAreDataLossNamingTheKey) {
  const std::string wq = "quantization_config.quant_config.weight_quant_params";
  const struct {
    const char* what;
    std::function<void(Json&)> edit;
    std::string key;       // the key path the message names
    std::string expected;  // and what it names as allowed
    std::string got;       // and the value it got
  } cases[] = {
      {"bits hqq lacks", [](Json& w) { w["nbits"] = 7; }, wq + ".nbits",
       "1, 2, 3, 4, 5, 6, 8", "integer 7"},
      {"ternary as a float", [](Json& w) { w["nbits"] = 1.58; }, wq + ".nbits",
       "[1, 8]", "number 1.58"},
      {"absurd group", [](Json& w) { w["group_size"] = int64_t{1} << 40; },
       wq + ".group_size", "[1, 1048576]", ""},
      {"axis 2", [](Json& w) { w["axis"] = 2; }, wq + ".axis", "[0, 1]",
       "integer 2"},
      {"group string", [](Json& w) { w["group_size"] = "64"; },
       wq + ".group_size", "[1, 1048576]", "string"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string dir = CopyOf("hqq_4bit_g64");
    Json j = ReadJson(dir + "/config.json");
    c.edit(j["quantization_config"]["quant_config"]["weight_quant_params"]);
    WriteJson(dir + "/config.json", j);
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_FALSE(ckpt.ok());
    EXPECT_THAT(ckpt, AllOf(HasReason(ErrorReason::kHeaderInvalid),
                            HasMetadata("file", "config.json"),
                            HasMetadata("rule", "config-key"),
                            MessageNames(c.key + ": "),
                            MessageNames(c.expected), MessageNames(c.got)));
  }
}

TEST(HqqConfigTest, ConfigThatContradictsTheStoredLayerIsDataLoss) {
  const std::string dir = CopyOf("hqq_4bit_g64");
  Json j = ReadJson(dir + "/config.json");
  j["quantization_config"]["quant_config"]["weight_quant_params"]["nbits"] = 2;
  WriteJson(dir + "/config.json", j);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_THAT(
      ckpt,
      AllOf(HasReason(ErrorReason::kConventionMismatch),
            MessageNames("nbits 4"),
            MessageNames(
                "quantization_config.quant_config.weight_quant_params.nbits"),
            MessageNames("is 2")));
}

TEST(HqqConfigTest, QuantizedScalesAreUnimplemented) {
  const std::string dir = CopyOf("hqq_4bit_g64");
  Json j = ReadJson(dir + "/config.json");
  j["quantization_config"]["quant_config"]["zero_quant_params"] = {
      {"nbits", 8}, {"group_size", Json()}};
  WriteJson(dir + "/config.json", j);
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_THAT(ckpt,
              AllOf(HasReason(ErrorReason::kUnimplemented),
                    MessageNames(
                        "quantization_config.quant_config.zero_quant_params")));
}

}  // namespace
}  // namespace tensormorph::conventions_hqq_test
