// Tensormorph's ggml decoders against ggml's own to_float (the pinned
// llama.cpp library, ggml_oracle.h), on blocks ggml's quantizers write from
// Gaussian rows with outliers: every type both know decodes bit for bit the
// same, and every ggml type is known to the reader by its id.
#include "tests/oracle/ggml_oracle.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "core/dtype.h"
#include "core/quant/codec.h"
#include "gtest/gtest.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::GgmlOracle;

const GgmlOracle& Oracle() {
  static const GgmlOracle* oracle = [] {
    auto loaded = GgmlOracle::Load();
    if (!loaded.ok()) {
      ADD_FAILURE() << loaded.status();
      std::abort();
    }
    return loaded->release();
  }();
  return *oracle;
}

// Rows of a weight matrix as real ones look: Gaussian, a few large
// outliers, one zero block.
std::vector<float> Weights(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0, 0.02f);
  std::vector<float> w(rows * cols);
  for (float& x : w) x = g(rng);
  for (int64_t i = 0; i < rows * cols; i += 997) w[i] *= 40;
  std::fill(w.begin(), w.begin() + 256, 0.0f);
  return w;
}

// ggml types the reader does not know yet (issue 29 adds them): Q1_0, Q2_0.
const absl::flat_hash_set<int> kNotYetKnown = {41, 42};

// The ids a ggml type's name maps to in Tensormorph's table.
TEST(GgmlOracleTest, EveryGgmlTypeIdNamesTheSameTypeInTensormorph) {
  for (int id = 0; id < GgmlOracle::kTypeCount; ++id) {
    const auto info = Oracle().Type(id);
    const std::optional<DType> ours = DTypeFromGgmlTypeId(id);
    if (!info) {
      EXPECT_FALSE(ours.has_value()) << "removed ggml id " << id;
      continue;
    }
    SCOPED_TRACE(info->name);
    if (!ours) {
      EXPECT_TRUE(kNotYetKnown.contains(id))
          << "ggml type " << id << " (" << info->name
          << ") is unknown to Tensormorph";
      continue;
    }
    EXPECT_FALSE(kNotYetKnown.contains(id)) << "known now: update the list";
    const DTypeInfo& d = GetDTypeInfo(*ours);
    EXPECT_EQ(absl::AsciiStrToLower(d.name), absl::AsciiStrToLower(info->name));
    EXPECT_EQ(d.block_elems, info->block_elems);
    EXPECT_EQ(d.block_bytes, info->block_bytes);
  }
}

TEST(GgmlOracleTest, EveryDecodableTypeDecodesAsGgmlToFloat) {
  const int64_t rows = 8, cols = 1024;
  const std::vector<float> w = Weights(rows, cols, 29);
  std::vector<float> imatrix(cols);
  for (int64_t c = 0; c < cols; ++c) imatrix[c] = 1.0f + (c % 7);
  int compared = 0;
  for (int id = 0; id < GgmlOracle::kTypeCount; ++id) {
    const auto info = Oracle().Type(id);
    const std::optional<DType> ours = DTypeFromGgmlTypeId(id);
    if (!info || !info->quantized || !info->has_to_float || !ours ||
        !GetDTypeInfo(*ours).decodable) {
      continue;
    }
    SCOPED_TRACE(info->name);
    auto q = Oracle().Quantize(id, w, cols, imatrix);
    ASSERT_TRUE(q.ok()) << q.status();
    auto want = Oracle().ToFloat(id, *q);
    ASSERT_TRUE(want.ok()) << want.status();
    std::vector<float> got(want->size());
    ASSERT_TRUE(DecodeElements(*ours, *q, 0, got.size(), got.data()).ok());
    int64_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      differ += std::memcmp(&got[i], &(*want)[i], 4) != 0;
    }
    EXPECT_EQ(differ, 0) << "elements not bit-exact to ggml's to_float";
    ++compared;
  }
  EXPECT_GE(compared, 15);
}

}  // namespace
}  // namespace tensormorph
