// IntMatrix::GetTile unpacks every layout the conventions store codes in
// (bytes, compressed-tensors' words, GPTQ's and AWQ's transposed words, AWQ's
// interleave, nibble streams either way round, ModelOpt's nibble pairs of
// rows) exactly as Get reads them one
// by one, for tiles that start and end anywhere.
#include "core/quant/matrix_view.h"

#include <array>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tensormorph::matrix_view_test {
namespace {

struct Layout {
  std::string name;
  IntMatrix m;
};

std::vector<Layout> Layouts(const StoredTensor* t8, const StoredTensor* t32) {
  constexpr int64_t R = 40, C = 48;  // logical rows, cols
  std::vector<Layout> out;
  auto add = [&](std::string name, IntMatrix m) {
    out.push_back({std::move(name), m});
  };
  using K = IntMatrix::Kind;
  add("bytes", {.tensor = t8,
                .kind = K::kDirect,
                .bits = 8,
                .rows = R,
                .cols = C,
                .stored_cols = C});
  add("bytes transposed", {.tensor = t8,
                           .kind = K::kDirect,
                           .bits = 8,
                           .rows = R,
                           .cols = C,
                           .transposed = true,
                           .stored_cols = R});
  add("words along cols (compressed-tensors)", {.tensor = t32,
                                                .kind = K::kPackedAlongCols,
                                                .bits = 4,
                                                .per_word = 8,
                                                .rows = R,
                                                .cols = C,
                                                .stored_cols = C / 8});
  add("words along rows transposed (GPTQ)", {.tensor = t32,
                                             .kind = K::kPackedAlongRows,
                                             .bits = 4,
                                             .rows = R,
                                             .cols = C,
                                             .transposed = true,
                                             .stored_cols = R});
  add("words along cols transposed (AWQ)",
      {.tensor = t32,
       .kind = K::kPackedAlongCols,
       .bits = 4,
       .per_word = 8,
       .rows = R,
       .cols = C,
       .transposed = true,
       .stored_cols = R / 8,
       .interleaved = true,
       .slot_of = {0, 4, 1, 5, 2, 6, 3, 7}});
  add("words along cols transposed, in order", {.tensor = t32,
                                                .kind = K::kPackedAlongCols,
                                                .bits = 4,
                                                .per_word = 8,
                                                .rows = R,
                                                .cols = C,
                                                .transposed = true,
                                                .stored_cols = R / 8});
  add("words along rows", {.tensor = t32,
                           .kind = K::kPackedAlongRows,
                           .bits = 4,
                           .per_word = 8,
                           .rows = R,
                           .cols = C,
                           .stored_cols = C});
  add("3-bit stream (GPTQ)", {.tensor = t32,
                              .kind = K::kPackedAlongRows,
                              .bits = 3,
                              .rows = R,
                              .cols = C,
                              .transposed = true,
                              .stored_cols = R});
  add("nibbles, low first (MXFP4)", {.tensor = t8,
                                     .kind = K::kNibbles,
                                     .bits = 4,
                                     .rows = R,
                                     .cols = C,
                                     .stored_cols = C});
  add("nibbles, high first (bitsandbytes)", {.tensor = t8,
                                             .kind = K::kNibbles,
                                             .bits = 4,
                                             .rows = R,
                                             .cols = C,
                                             .stored_cols = C,
                                             .high_nibble_first = true});
  add("nibble pairs of rows (ModelOpt INT4)", {.tensor = t8,
                                               .kind = K::kNibblePairsOfRows,
                                               .bits = 4,
                                               .rows = R,
                                               .cols = C,
                                               .stored_cols = C});
  return out;
}

// ModelOpt's INT4 pairs: byte (k, j) holds rows 2k (low nibble) and 2k+1
// (high nibble) of column j.
TEST(IntMatrixTest, NibblePairsOfRowsHoldTwoRowsAByte) {
  const std::vector<uint8_t> bytes = {0x21, 0x43, 0x65, 0x87};  // [2, 2]
  StoredTensor t{.dtype = DType::kU8, .data = bytes};
  const IntMatrix m = {.tensor = &t,
                       .kind = IntMatrix::Kind::kNibblePairsOfRows,
                       .bits = 4,
                       .rows = 4,
                       .cols = 2,
                       .stored_cols = 2};
  EXPECT_EQ(m.Get(0, 0), 1u);
  EXPECT_EQ(m.Get(1, 0), 2u);
  EXPECT_EQ(m.Get(0, 1), 3u);
  EXPECT_EQ(m.Get(1, 1), 4u);
  EXPECT_EQ(m.Get(2, 0), 5u);
  EXPECT_EQ(m.Get(3, 1), 8u);
}

TEST(IntMatrixTileTest, EveryLayoutMatchesGetOnAnyTile) {
  std::mt19937 rng(5);
  std::vector<uint8_t> bytes(40 * 48 * 4);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  StoredTensor t8{.dtype = DType::kU8, .data = bytes};
  StoredTensor t32{.dtype = DType::kI32, .data = bytes};
  for (const Layout& l : Layouts(&t8, &t32)) {
    SCOPED_TRACE(l.name);
    const IntMatrix& m = l.m;
    std::vector<std::array<int64_t, 4>> tiles = {{0, m.rows, 0, m.cols},
                                                 {0, 16, 0, m.cols},
                                                 {3, 13, 0, m.cols},
                                                 {5, 1, 7, 30},
                                                 {8, 8, 8, 16}};
    for (int i = 0; i < 40; ++i) {
      const int64_t r = rng() % m.rows, c = rng() % m.cols;
      tiles.push_back({r, 1 + static_cast<int64_t>(rng() % (m.rows - r)), c,
                       1 + static_cast<int64_t>(rng() % (m.cols - c))});
    }
    for (const auto& [r, nr, c, n] : tiles) {
      const int64_t stride = n + (r % 3);  // rows packed or padded
      std::vector<uint8_t> tile(static_cast<size_t>(nr * stride));
      m.GetTile(r, nr, c, n, tile.data(), stride);
      for (int64_t i = 0; i < nr; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          ASSERT_EQ(tile[i * stride + j], m.Get(r + i, c + j))
              << "tile (" << r << "+" << nr << ", " << c << "+" << n << ") at ("
              << r + i << ", " << c + j << ")";
        }
      }
    }
  }
}

TEST(FloatMatrixTileTest, MatchesGetStoredEitherWay) {
  std::vector<float> v(12 * 7);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.25f;
  const StoredTensor t{
      .dtype = DType::kF32,
      .data = {reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4}};
  for (bool transposed : {false, true}) {
    const FloatMatrix m{
        .tensor = &t, .rows = 12, .cols = 7, .transposed = transposed};
    std::vector<float> tile(5 * 4);
    m.GetTile(6, 5, 2, 4, tile.data());
    for (int64_t i = 0; i < 5; ++i) {
      for (int64_t j = 0; j < 4; ++j) {
        EXPECT_EQ(tile[i * 4 + j], m.Get(6 + i, 2 + j)) << transposed;
      }
    }
  }
}

}  // namespace
}  // namespace tensormorph::matrix_view_test
