// Two-dimensional views of stored tensors as conventions index them: packed
// integer codes (GPTQ, AWQ, compressed-tensors), nibble streams (bitsandbytes,
// MXFP4) and float parameter matrices (scales), optionally transposed.
#ifndef TENSORMORPH_CORE_QUANT_MATRIX_VIEW_H_
#define TENSORMORPH_CORE_QUANT_MATRIX_VIEW_H_

#include <array>
#include <cstdint>

#include "core/format/stored_tensor.h"

namespace tensormorph {

// A logical [rows, cols] matrix of unsigned integer codes.
// REQUIRES (established by the convention resolvers, which validate the
// stored shapes at open): every (r, c) inside [rows, cols] maps inside the
// stored tensor's bytes.
struct IntMatrix {
  enum class Kind {
    kDirect,             // one integer element per code (I8, U8, I32, ...)
    kPackedAlongCols,    // int32 words [srows, words]; codes of a stored row
                         // form an LSB-first bit stream
    kPackedAlongRows,    // int32 words [words, scols]; codes of a stored
                         // column form an LSB-first bit stream
    kNibbles,            // U8, two 4-bit codes per byte, row-major stream
    kNibblePairsOfRows,  // U8 [ceil(rows/2), stored_cols]: byte (r/2, c)
                         // holds rows r and r+1 of column c, the even row
                         // in the low nibble (ModelOpt's INT4 AWQ packing)
  };
  const StoredTensor* tensor = nullptr;
  Kind kind = Kind::kDirect;
  int bits = 8;
  // Packed kinds: codes per 32-bit word when they never straddle words
  // (compressed-tensors packs 32/bits per word, leaving spare bits for
  // 3-bit); 0 = a continuous bit stream (GPTQ, where 3-bit codes straddle).
  int per_word = 0;
  int64_t rows = 0, cols = 0;  // logical
  bool transposed = false;     // logical (r, c) is stored (c, r)
  int64_t stored_cols = 0;     // stored row length in elements or words
  bool high_nibble_first = false;
  // AWQ's interleave: the code of column 8w + j sits in slot slot_of[j].
  bool interleaved = false;
  std::array<uint8_t, 8> slot_of = {0, 1, 2, 3, 4, 5, 6, 7};

  uint32_t Get(int64_t r, int64_t c) const;
  // Codes of logical rows [r, r + nr), columns [c, c + n), as Get would
  // return them, into out[(i - r) * stride + (j - c)]. The layouts conventions
  // store weights in are unpacked a word or a 16-byte vector at a time, and
  // transposed ones a tile of rows at once so every cache line read is used
  // whole (GPTQ's codes of one row are a column of words).
  // REQUIRES: bits <= 8; 0 <= r, r + nr <= rows; 0 <= c, c + n <= cols;
  // stride >= n.
  void GetTile(int64_t r, int64_t nr, int64_t c, int64_t n, uint8_t* out,
               int64_t stride) const;
};

// A logical [rows, cols] matrix of float parameters (any decodable dtype).
struct FloatMatrix {
  const StoredTensor* tensor = nullptr;
  int64_t rows = 0, cols = 0;
  bool transposed = false;

  float Get(int64_t r, int64_t c) const;
  // Rows [r, r + nr), columns [c, c + n) into out[(i - r) * n + (j - c)],
  // decoded a stored row at a time.
  // REQUIRES: the tile lies inside [rows, cols].
  void GetTile(int64_t r, int64_t nr, int64_t c, int64_t n, float* out) const;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_MATRIX_VIEW_H_
