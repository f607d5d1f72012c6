// The test and demo quantizers (tests/support/quantize.h) write what ggml's
// reference quantizers write, byte for byte: ggml_quantize_chunk without an
// importance matrix runs quantize_row_*_ref for these types.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/oracle/ggml_oracle.h"
#include "tests/support/quantize.h"

namespace tensormorph::quantize_ref_test {
namespace {

using ::tensormorph::testing::Gaussian;
using ::tensormorph::testing::GgmlOracle;

// Rows that exercise every branch: Gaussian, heavy-tailed, outliers of
// either sign, all-zero blocks and super-blocks, one lone non-zero value,
// constant runs, tiny values next to large ones, ties on a block's extreme.
std::vector<std::vector<float>> Inputs() {
  std::vector<std::vector<float>> in;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    std::vector<float> g = Gaussian(4096, seed, 0.02f);
    for (size_t i = seed; i < g.size(); i += 97) g[i] *= -30.0f * seed;
    in.push_back(g);
  }
  std::vector<float> tails = Gaussian(4096, 9, 1.0f);
  const std::vector<float> scale = Gaussian(4096, 10, 1.5f);
  for (size_t i = 0; i < tails.size(); ++i) tails[i] *= std::exp(scale[i]);
  in.push_back(tails);
  std::vector<float> sparse(4096, 0.0f);
  sparse[300] = 0.5f;
  sparse[1000] = -3.0f;
  for (int i = 2048; i < 2048 + 256; ++i) sparse[i] = 0.25f;  // constant
  for (int i = 3072; i < 3072 + 32; ++i) sparse[i] = i % 2 ? 1.0f : -1.0f;
  in.push_back(sparse);
  std::vector<float> mixed = Gaussian(4096, 11, 1e-6f);
  for (size_t i = 0; i < mixed.size(); i += 61) mixed[i] = 100.0f;
  std::fill(mixed.begin() + 512, mixed.begin() + 1024, 0.0f);
  in.push_back(mixed);
  return in;
}

struct Case {
  const char* name;
  int ggml_type;
  std::string (*quantize)(const std::vector<float>&);
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
};

class QuantizeRefTest : public ::testing::TestWithParam<Case> {};

TEST_P(QuantizeRefTest, WritesTheBytesOfGgmlsReferenceQuantizer) {
  const Case& c = GetParam();
  int input = 0;
  for (const std::vector<float>& x : Inputs()) {
    SCOPED_TRACE(::testing::Message() << "input " << input++);
    auto want = GgmlOracle::Shared().Quantize(c.ggml_type, x, 256);
    ASSERT_TRUE(want.ok()) << want.status();
    const std::string got = c.quantize(x);
    ASSERT_EQ(got.size(), want->size());
    const auto info = GgmlOracle::Shared().Type(c.ggml_type);
    int64_t blocks_differ = 0, first = -1;
    for (size_t b = 0; b < got.size(); b += info->block_bytes) {
      if (std::memcmp(got.data() + b, want->data() + b, info->block_bytes)) {
        if (first < 0) first = static_cast<int64_t>(b / info->block_bytes);
        ++blocks_differ;
      }
    }
    EXPECT_EQ(blocks_differ, 0) << "first differing block: " << first;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, QuantizeRefTest,
    ::testing::Values(Case{"Q8_0", 8, testing::QuantizeQ8_0},
                      Case{"Q4_0", 2, testing::QuantizeQ4_0},
                      Case{"Q4_K", 12, testing::QuantizeQ4_K},
                      Case{"Q6_K", 14, testing::QuantizeQ6_K}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace tensormorph::quantize_ref_test
