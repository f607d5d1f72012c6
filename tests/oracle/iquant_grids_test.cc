// The IQ grids and sign tables (core/quant/ggml_iquant_grids.h) are part of
// the formats' definitions: every entry of every table is recovered here
// through the pinned ggml's own to_float, from a crafted block whose fp16
// scale is 1 and whose index selects entry k (signs clear, delta +1/8), and
// compared with the table.
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/quant/ggml_iquant_grids.h"
#include "gtest/gtest.h"
#include "tests/oracle/ggml_oracle.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::GgmlOracle;

constexpr int kQKK = 256;
constexpr int kIq2Xxs = 16, kIq2Xs = 17, kIq3Xxs = 18, kIq1S = 19, kIq3S = 21,
              kIq2S = 22;

// Block k of `count` (each `bytes` long, fp16 d = 1 at offset 0 unless
// told) from `craft`, decoded by ggml: block k's 256 values.
std::vector<std::vector<float>> DecodeCrafted(
    int type, int count, int bytes,
    const std::function<void(int k, uint8_t* block)>& craft) {
  std::vector<uint8_t> data(static_cast<size_t>(count) * bytes, 0);
  for (int k = 0; k < count; ++k) {
    uint8_t* b = data.data() + static_cast<size_t>(k) * bytes;
    b[0] = 0x00;
    b[1] = 0x3C;  // fp16 1.0
    craft(k, b);
  }
  auto y = GgmlOracle::Shared().ToFloat(type, data);
  EXPECT_TRUE(y.ok()) << y.status();
  std::vector<std::vector<float>> out;
  if (!y.ok()) return out;
  for (int k = 0; k < count; ++k) {
    out.emplace_back(y->begin() + k * kQKK, y->begin() + (k + 1) * kQKK);
  }
  return out;
}

// The entry's `dims` coordinates from the first values: (y - offset) / scale
// must be an integer; packed as the tables pack them (byte j = coordinate j).
uint64_t Entry(const std::vector<float>& y, int dims, float scale,
               float offset = 0) {
  uint64_t packed = 0;
  for (int j = 0; j < dims; ++j) {
    const float q = (y[j] - offset) / scale;
    EXPECT_EQ(q, static_cast<float>(static_cast<int>(q))) << "coordinate " << j;
    packed |= static_cast<uint64_t>(static_cast<uint8_t>(static_cast<int>(q)))
              << (8 * j);
  }
  return packed;
}

template <typename T, size_t N>
void ExpectTable(const T (&table)[N], const std::vector<uint64_t>& got,
                 const std::string& name) {
  ASSERT_EQ(got.size(), N) << name;
  int differ = 0;
  for (size_t k = 0; k < N; ++k) {
    if (static_cast<uint64_t>(table[k]) != got[k]) {
      if (++differ <= 5) {
        ADD_FAILURE() << name << "[" << k << "] = 0x" << std::hex
                      << static_cast<uint64_t>(table[k])
                      << " but ggml decodes 0x" << got[k];
      }
    }
  }
  EXPECT_EQ(differ, 0) << name;
}

TEST(IquantGridsTest, Iq2XxsGridIsGgmls) {
  // Group 0's index is byte 0 of the first word; scale nibble 0: db = 1/8.
  std::vector<uint64_t> got;
  for (const auto& y :
       DecodeCrafted(kIq2Xxs, 256, 66, [](int k, uint8_t*b) { b[2] = k; })) {
    got.push_back(Entry(y, 8, 0.125f));
  }
  ExpectTable(kIq2XxsGrid, got, "iq2xxs_grid");
}

TEST(IquantGridsTest, Iq2XsGridIsGgmls) {
  std::vector<uint64_t> got;
  for (const auto& y : DecodeCrafted(kIq2Xs, 512, 74, [](int k, uint8_t*b) {
         const uint16_t q = k;  // 9-bit index, sign index 0
         std::memcpy(b + 2, &q, 2);
       })) {
    got.push_back(Entry(y, 8, 0.125f));
  }
  ExpectTable(kIq2XsGrid, got, "iq2xs_grid");
}

TEST(IquantGridsTest, Iq2SGridIsGgmls) {
  std::vector<uint64_t> got;
  for (const auto& y : DecodeCrafted(kIq2S, 1024, 82, [](int k, uint8_t*b) {
         b[2] = k & 255;      // qs[0]: low 8 bits
         b[2 + 64] = k >> 8;  // qh[0] bits 0-1: bits 8-9
       })) {
    got.push_back(Entry(y, 8, 0.125f));
  }
  ExpectTable(kIq2SGrid, got, "iq2s_grid");
}

TEST(IquantGridsTest, Iq3XxsGridIsGgmls) {
  std::vector<uint64_t> got;
  for (const auto& y :
       DecodeCrafted(kIq3Xxs, 256, 98, [](int k, uint8_t*b) { b[2] = k; })) {
    got.push_back(Entry(y, 4, 0.25f));  // db = (0.5 + 0) * 0.5
  }
  ExpectTable(kIq3XxsGrid, got, "iq3xxs_grid");
}

TEST(IquantGridsTest, Iq3SGridIsGgmls) {
  std::vector<uint64_t> got;
  for (const auto& y : DecodeCrafted(kIq3S, 512, 110, [](int k, uint8_t*b) {
         b[2] = k & 255;      // qs[0]
         b[2 + 64] = k >> 8;  // qh[0] bit 0: the 9th bit
       })) {
    got.push_back(Entry(y, 4, 1.0f));  // db = 1 + 2 * 0
  }
  ExpectTable(kIq3SGrid, got, "iq3s_grid");
}

TEST(IquantGridsTest, Iq1SGridIsGgmls) {
  std::vector<uint64_t> got;
  for (const auto& y : DecodeCrafted(kIq1S, 2048, 50, [](int k, uint8_t*b) {
         b[2] = k & 255;              // qs[0]
         const uint16_t qh = k >> 8;  // bits 0-2; scale 0 (dl = 1), delta +
         std::memcpy(b + 2 + 32, &qh, 2);
       })) {
    got.push_back(Entry(y, 8, 1.0f, kIq1Delta));
  }
  ExpectTable(kIq1SGrid, got, "iq1s_grid");
}

TEST(IquantGridsTest, SignTablesAreGgmls) {
  // IQ2_XXS group 0 on entry 0 with sign index s: negated elements are the
  // set bits of ksigns_iq2xs[s].
  std::vector<uint64_t> signs;
  for (const auto& y : DecodeCrafted(kIq2Xxs, 128, 66, [](int s, uint8_t*b) {
         const uint32_t aux = s;
         std::memcpy(b + 2 + 4, &aux, 4);
       })) {
    uint64_t bits = 0;
    for (int j = 0; j < 8; ++j) bits |= static_cast<uint64_t>(y[j] < 0) << j;
    signs.push_back(bits);
  }
  ExpectTable(kIq2SignsOfIndex, signs, "ksigns_iq2xs");
  // IQ2_S keeps its sign bytes raw: the byte 1 << b negates one element n
  // alone, so kmask_iq2xs[n] = 1 << b.
  std::vector<uint64_t> masks(8, 0);
  int b = 0;
  for (const auto& y : DecodeCrafted(kIq2S, 8, 82, [](int bit, uint8_t*blk) {
         blk[2 + 32] = static_cast<uint8_t>(1 << bit);
       })) {
    int negated = -1, count = 0;
    for (int j = 0; j < 8; ++j) {
      if (y[j] < 0) negated = j, ++count;
    }
    EXPECT_EQ(count, 1) << "sign byte bit " << b;
    if (negated >= 0) masks[negated] = uint64_t{1} << b;
    ++b;
  }
  ExpectTable(kIq2SignMask, masks, "kmask_iq2xs");
}

}  // namespace
}  // namespace tensormorph
