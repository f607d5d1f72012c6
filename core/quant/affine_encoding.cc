#include "core/quant/affine_encoding.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "core/quant/affine_kernels.h"
#include "core/quant/block_util.h"
#include "core/quant/decode_simd.h"
#include "core/quant/float_formats.h"
#include "core/util/checked_math.h"
#include "core/util/status_macros.h"

namespace tensormorph {
namespace {

// out[j] = row[j] * m[j]: AWQ's column scales over a decoded row. One IEEE
// float32 multiply an element, so every path gives the same bits; AVX2 only
// widens the loop. Rows are decoded a piece at a time into a scratch buffer
// that stays in L1, so the output is written once (a second pass over it
// cost a third of W4A8_AWQ's decode time).
void MultiplyColumnsScalar(const float* __restrict row,
                           const float* __restrict m, int64_t n,
                           float* __restrict out) {
  for (int64_t j = 0; j < n; ++j) out[j] = row[j] * m[j];
}
#if defined(__x86_64__)
__attribute__((target("avx2"))) void MultiplyColumnsAvx2(
    const float* __restrict row, const float* __restrict m, int64_t n,
    float* __restrict out) {
  for (int64_t j = 0; j < n; ++j) out[j] = row[j] * m[j];
}
#endif
void MultiplyColumns(const float* row, const float* m, int64_t n, float* out) {
#if defined(__x86_64__)
  if (ActiveDecodeSimd() >= DecodeSimd::kAvx2) {
    return MultiplyColumnsAvx2(row, m, n, out);
  }
#endif
  MultiplyColumnsScalar(row, m, n, out);
}

// row[j] *= m[j]: MultiplyColumns in place, for rows already decoded into
// the output (still in L1).
void ScaleColumnsScalar(float* __restrict row, const float* __restrict m,
                        int64_t n) {
  for (int64_t j = 0; j < n; ++j) row[j] *= m[j];
}
#if defined(__x86_64__)
__attribute__((target("avx2"))) void ScaleColumnsAvx2(float* __restrict row,
                                                      const float* __restrict m,
                                                      int64_t n) {
  for (int64_t j = 0; j < n; ++j) row[j] *= m[j];
}
#endif
void ScaleColumns(float* row, const float* m, int64_t n) {
#if defined(__x86_64__)
  if (ActiveDecodeSimd() >= DecodeSimd::kAvx2) {
    return ScaleColumnsAvx2(row, m, n);
  }
#endif
  ScaleColumnsScalar(row, m, n);
}

// Integer codes with a column scale in one pass: out[i] =
// (scale[g] * float(int(codes[i] ^ flip) - bias[g])) * m[i], group g as in
// DecodeAffineRuns (affine_kernels.h), the same two float32 roundings as
// that kernel followed by MultiplyColumns, so every path gives their bits.
// Fused because the output's stores, not the arithmetic, bound W4A8_AWQ.
inline int64_t ColumnRunEnd(int64_t n, Runs runs, int64_t g, int64_t i) {
  return std::min(n, i + (g == 0 ? runs.run - runs.skip : runs.run));
}
void DecodeAffineColumnRunsScalar(const uint8_t* codes, int64_t n, Runs runs,
                                  uint8_t flip, const int32_t* bias,
                                  const float* scale, const float* m,
                                  float* out) {
  for (int64_t g = 0, i = 0; i < n; ++g) {
    for (const int64_t end = ColumnRunEnd(n, runs, g, i); i < end; ++i) {
      const float v =
          scale[g] *
          static_cast<float>(static_cast<int32_t>(codes[i] ^ flip) - bias[g]);
      out[i] = v * m[i];
    }
  }
}
#if defined(__x86_64__)
__attribute__((target("avx2"))) void DecodeAffineColumnRunsAvx2(
    const uint8_t* codes, int64_t n, Runs runs, uint8_t flip,
    const int32_t* bias, const float* scale, const float* m, float* out) {
  const __m256i vflip = _mm256_set1_epi32(flip);
  for (int64_t g = 0, i = 0; i < n; ++g) {
    const int64_t end = ColumnRunEnd(n, runs, g, i);
    const __m256i vbias = _mm256_set1_epi32(bias[g]);
    const __m256 vscale = _mm256_set1_ps(scale[g]);
    for (; i + 8 <= end; i += 8) {
      const __m256i c = _mm256_cvtepu8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)));
      const __m256i q = _mm256_sub_epi32(_mm256_xor_si256(c, vflip), vbias);
      const __m256 v = _mm256_mul_ps(vscale, _mm256_cvtepi32_ps(q));
      _mm256_storeu_ps(out + i, _mm256_mul_ps(v, _mm256_loadu_ps(m + i)));
    }
    for (; i < end; ++i) {
      const float v =
          scale[g] *
          static_cast<float>(static_cast<int32_t>(codes[i] ^ flip) - bias[g]);
      out[i] = v * m[i];
    }
  }
}
#endif
// Sixteen-level codebooks (NVFP4's E2M1) likewise: out[i] =
// (scale[g] * table[codes[i]]) * m[i], as DecodeTableRuns then
// MultiplyColumns round it.
void DecodeTable16ColumnRunsScalar(const uint8_t* codes, int64_t n, Runs runs,
                                   const float* table, const float* scale,
                                   const float* m, float* out) {
  for (int64_t g = 0, i = 0; i < n; ++g) {
    for (const int64_t end = ColumnRunEnd(n, runs, g, i); i < end; ++i) {
      const float v = scale[g] * table[codes[i]];
      out[i] = v * m[i];
    }
  }
}
#if defined(__x86_64__)
// The sixteen levels in two registers, a permute of each chosen by bit 3.
__attribute__((target("avx2"))) void DecodeTable16ColumnRunsAvx2(
    const uint8_t* codes, int64_t n, Runs runs, const float* table,
    const float* scale, const float* m, float* out) {
  const __m256 lo = _mm256_loadu_ps(table), hi = _mm256_loadu_ps(table + 8);
  const __m256i seven = _mm256_set1_epi32(7);
  for (int64_t g = 0, i = 0; i < n; ++g) {
    const int64_t end = ColumnRunEnd(n, runs, g, i);
    const __m256 vscale = _mm256_set1_ps(scale[g]);
    for (; i + 8 <= end; i += 8) {
      const __m256i c = _mm256_cvtepu8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)));
      const __m256 upper = _mm256_castsi256_ps(_mm256_cmpgt_epi32(c, seven));
      const __m256 level =
          _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, c),
                           _mm256_permutevar8x32_ps(hi, c), upper);
      const __m256 v = _mm256_mul_ps(vscale, level);
      _mm256_storeu_ps(out + i, _mm256_mul_ps(v, _mm256_loadu_ps(m + i)));
    }
    for (; i < end; ++i) {
      const float v = scale[g] * table[codes[i]];
      out[i] = v * m[i];
    }
  }
}
#endif
void DecodeTable16ColumnRuns(const uint8_t* codes, int64_t n, Runs runs,
                             const float* table, const float* scale,
                             const float* m, float* out) {
#if defined(__x86_64__)
  if (ActiveDecodeSimd() >= DecodeSimd::kAvx2) {
    return DecodeTable16ColumnRunsAvx2(codes, n, runs, table, scale, m, out);
  }
#endif
  DecodeTable16ColumnRunsScalar(codes, n, runs, table, scale, m, out);
}

void DecodeAffineColumnRuns(const uint8_t* codes, int64_t n, Runs runs,
                            uint8_t flip, const int32_t* bias,
                            const float* scale, const float* m, float* out) {
#if defined(__x86_64__)
  if (ActiveDecodeSimd() >= DecodeSimd::kAvx2) {
    return DecodeAffineColumnRunsAvx2(codes, n, runs, flip, bias, scale, m,
                                      out);
  }
#endif
  DecodeAffineColumnRunsScalar(codes, n, runs, flip, bias, scale, m, out);
}

class AffineEncoding final : public Encoding {
 public:
  explicit AffineEncoding(AffineParams p) : p_(std::move(p)) {
    // Columns of the group grid (as Validate derives it), so that group ids
    // are dense even where the scales are stored wider than the grid.
    switch (p_.groups) {
      case AffineParams::Groups::kGroup:
        grid_cols_ = p_.g_idx.empty()
                         ? (p_.cols + p_.group_size - 1) / p_.group_size
                         : ScaleCols();
        break;
      case AffineParams::Groups::kBlock:
        grid_cols_ = (p_.cols + p_.block_cols - 1) / p_.block_cols;
        break;
      default:
        grid_cols_ = 1;
        break;
    }
    for (float t : p_.table) {
      if (!std::isnan(t)) levels_.push_back(t);  // FP8 NaN codes are no level
    }
    if (p_.column_scale.tensor != nullptr) {  // a few KiB, read once
      column_scale_.resize(static_cast<size_t>(p_.cols));
      p_.column_scale.GetTile(0, 1, 0, p_.cols, column_scale_.data());
    }
    // Per code, the gaps to the neighbouring levels, for DecodeRuns.
    for (float t : p_.table) {
      ScalarInfo s;
      if (std::isnan(t)) {
        gaps_.push_back({NAN, NAN});
        continue;
      }
      FillCodebookSteps(1.0, levels_.data(), static_cast<int>(levels_.size()),
                        t, &s);
      gaps_.push_back({s.step_below, s.step_above});
      lo_level_ = std::min(lo_level_, static_cast<double>(t));
      hi_level_ = std::max(hi_level_, static_cast<double>(t));
    }
  }

  // Values from Decode; one run per group segment of a row, with the
  // group's step and range (codebooks: a run per element, the gaps around
  // its level).
  absl::Status DecodeRuns(int64_t first, int64_t count, float* values,
                          std::vector<QuantRun>* runs) const override {
    if (absl::Status s = Decode(first, count, values); !s.ok()) return s;
    runs->clear();
    for (int64_t i = 0; i < count;) {
      const int64_t flat = first + i;
      const int64_t r = flat / p_.cols, c = flat % p_.cols;
      int64_t gr = 0, gc = 0;
      GroupOf(r, c, flat, &gr, &gc);
      const int64_t len =
          RunOfGroup(c, flat, gc, std::min(count - i, p_.cols - c));
      const float scale = ScaleOf(gr, gc);
      const double step = std::fabs(static_cast<double>(scale));
      QuantRun run = RunOf(len, gr, gc, scale, ZeroOf(gr, gc));
      if (p_.table.empty() && column_scale_.empty()) {
        runs->push_back(run);
      } else {
        // One element a run: a codebook's gaps depend on the code, a
        // column scale's factor on the column.
        run.count = 1;
        for (int64_t k = 0; k < len; ++k) {
          QuantRun e = run;
          if (!p_.table.empty()) {
            const auto& g = gaps_[p_.codes.Get(r, c + k)];
            e.step_below = step * (scale < 0 ? g.second : g.first);
            e.step_above = step * (scale < 0 ? g.first : g.second);
          }
          if (!column_scale_.empty()) ScaleRun(column_scale_[c + k], &e);
          runs->push_back(e);
        }
      }
      i += len;
    }
    return absl::OkStatus();
  }

  const EncodingInfo& info() const override { return p_.info; }
  std::vector<const StoredTensor*> parts() const override { return p_.parts; }

  // A tile of whole rows at a time (a partial row alone): the tile's codes
  // unpacked at once, one byte each, and its groups' scales and zero-points
  // fetched at once; then each run of one group goes through a vector kernel.
  // Every value is the same float expression as Inspect's, so the two agree
  // bit for bit (tests hold them to it on random codes).
  absl::Status Decode(int64_t first, int64_t count, float* out) const override {
    if (!tiled_) return DecodeEach(first, count, out);
    thread_local std::vector<uint8_t> codes;
    thread_local TileGroups groups;
    while (count > 0) {
      const Tile t = NextTile(first, count);
      const int64_t r = t.r, nr = t.nr, c0 = t.c0, n = t.n;
      if (DecodeNibbleTile(r, nr, c0, n, first, &groups, out)) {
        out += nr * n;
        first += nr * n;
        count -= nr * n;
        continue;
      }
      // Codes stored a byte each, row-major (FP8, int8), are read in place:
      // a copy into the tile would be one more pass over every byte.
      const uint8_t* tile = DirectCodes(r, c0);
      int64_t stride = p_.codes.stored_cols;
      if (tile == nullptr) {
        stride = PaddedStride(nr, n);
        codes.resize(static_cast<size_t>(nr * stride));
        p_.codes.GetTile(r, nr, c0, n, codes.data(), stride);
        tile = codes.data();
      }
      FetchGroups(r, nr, c0, n, first, &groups);
      for (int64_t i = 0; i < nr; ++i) {
        if (column_scale_.empty()) {
          DecodeRow(r + i, c0, n, first + i * p_.cols, tile + i * stride,
                    groups, out + i * n);
          continue;
        }
        if (DecodeRowColumns(r + i, c0, n, first + i * p_.cols,
                             tile + i * stride, groups, out + i * n)) {
          continue;
        }
        // A piece at a time through a scratch row that stays in L1 with its
        // column scales, so the output is written once.
        float piece[kColumnPiece];
        for (int64_t j = 0; j < n; j += kColumnPiece) {
          const int64_t m = std::min(kColumnPiece, n - j);
          DecodeRow(r + i, c0 + j, m, first + i * p_.cols + j,
                    tile + i * stride + j, groups, piece);
          MultiplyColumns(piece, column_scale_.data() + c0 + j, m,
                          out + i * n + j);
        }
      }
      out += nr * n;
      first += nr * n;
      count -= nr * n;
    }
    return absl::OkStatus();
  }

  // Codes a tile of whole rows at a time (a partial row alone), as Decode
  // unpacks them; codes wider than a byte are Inspect's (the default).
  absl::Status RawCodes(int64_t first, int64_t count,
                        uint8_t* out) const override {
    if (p_.codes.bits > 8) return Encoding::RawCodes(first, count, out);
    while (count > 0) {
      const Tile t = NextTile(first, count);
      const int64_t r = t.r, nr = t.nr, c0 = t.c0, n = t.n;
      p_.codes.GetTile(r, nr, c0, n, out, n);
      out += nr * n;
      first += nr * n;
      count -= nr * n;
    }
    return absl::OkStatus();
  }

  // The tiles Decode reads, and runs walked as DecodeRuns walks them, with
  // the scales and biases FetchGroups gives the kernels.
  absl::Status AffineCodeRuns(int64_t first, int64_t count,
                              AffineCodes* out) const override {
    if (!tiled_ || !p_.table.empty() || p_.float_codes ||
        !column_scale_.empty()) {
      return Encoding::AffineCodeRuns(first, count, out);
    }
    out->flip = Flip();
    out->codes.resize(static_cast<size_t>(count));
    out->runs.clear();
    out->scale.clear();
    out->bias.clear();
    const bool regular = WalkCodeRuns(
        first, count, out->codes.data(),
        [&](const QuantRun& run, const TileGroups& groups, size_t g) {
          out->runs.push_back(run);
          out->scale.push_back(groups.scale[g]);
          out->bias.push_back(groups.bias[g]);
        });
    return regular ? absl::OkStatus()
                   : Encoding::AffineCodeRuns(first, count, out);
  }

  // Integer codes of 4 bits or fewer, or 4-bit codes of a 16-level
  // codebook (NF4, FP4, MXFP4, NVFP4): walked as AffineCodeRuns, then every
  // run's 16 levels decoded at once by Decode's own kernel, from codes
  // 0..15 a run and the runs' scales (and biases).
  absl::Status CodeLevelRuns(int64_t first, int64_t count,
                             LevelCodes* out) const override {
    const bool table16 = p_.table.size() == 16;
    if (!tiled_ || p_.codes.bits > 4 || (!p_.table.empty() && !table16) ||
        !column_scale_.empty()) {
      return Encoding::CodeLevelRuns(first, count, out);
    }
    thread_local std::vector<float> scale;
    thread_local std::vector<int32_t> bias;
    out->codes.resize(static_cast<size_t>(count));
    out->runs.clear();
    scale.clear();
    bias.clear();
    const bool regular = WalkCodeRuns(
        first, count, out->codes.data(),
        [&](const QuantRun& run, const TileGroups& groups, size_t g) {
          out->runs.push_back(run);
          scale.push_back(groups.scale[g]);
          bias.push_back(groups.bias[g]);
        });
    if (!regular) return Encoding::CodeLevelRuns(first, count, out);
    const int64_t n = 16 * static_cast<int64_t>(out->runs.size());
    out->level.resize(static_cast<size_t>(n));
    const uint8_t* codes = SixteenCodesRepeated(n);
    const Runs runs{.run = 16, .skip = 0};
    if (table16) {
      DecodeTableRuns(codes, n, runs, p_.table.data(), 16, codebook_,
                      scale.data(), out->level.data());
    } else {
      DecodeAffineRuns(codes, n, runs, Flip(), bias.data(), scale.data(),
                       out->level.data());
    }
    return absl::OkStatus();
  }

  // Inspect's group, from the index alone (act-order: through g_idx).
  absl::Status GroupIds(absl::Span<const int64_t> indices,
                        int64_t* out) const override {
    for (size_t i = 0; i < indices.size(); ++i) {
      const int64_t flat = indices[i];
      int64_t gr = 0, gc = 0;
      GroupOf(flat / p_.cols, flat % p_.cols, flat, &gr, &gc);
      out[i] = GroupIndex(gr, gc);
    }
    return absl::OkStatus();
  }

  absl::Status Inspect(int64_t flat, ScalarInfo* s) const override {
    const int64_t r = flat / p_.cols, c = flat % p_.cols;
    int64_t gr = 0, gc = 0;
    GroupOf(r, c, flat, &gr, &gc);
    const uint32_t code = p_.codes.Get(r, c);
    const float scale = ScaleOf(gr, gc);
    const int64_t zero = ZeroOf(gr, gc);
    *s = ScalarInfo();
    s->code_bits_value = code;
    s->code = p_.signed_codes ? SignExtend(code, p_.codes.bits) : code;
    s->code_width = p_.codes.bits;
    s->code_is_float = p_.float_codes;
    s->block = GroupIndex(gr, gc);
    s->group = s->block;
    s->scale = scale;
    s->level = Level(code, zero);
    s->value = scale * static_cast<float>(s->level);
    if (p_.table.empty()) {
      s->zero_point = static_cast<double>(zero + p_.code_offset);
      const int64_t lo =
          p_.signed_codes ? -(int64_t{1} << (p_.codes.bits - 1)) : 0;
      const int64_t hi = lo + (int64_t{1} << p_.codes.bits) - 1;
      FillUniformSteps(scale, static_cast<double>(lo - p_.code_offset - zero),
                       static_cast<double>(hi - p_.code_offset - zero), 0, s);
    } else {
      FillCodebookSteps(scale, levels_.data(), static_cast<int>(levels_.size()),
                        s->level, s);
    }
    if (p_.groups == AffineParams::Groups::kGroup && !p_.g_idx.empty()) {
      s->AddParam("g_idx", p_.g_idx[c]);
    }
    if (p_.multiply_scale) {
      s->AddParam("block_scale", ScaleOf(gr, gc, false));
      s->AddParam("global_scale", p_.scale_multiplier);
    }
    s->AddParam("scale", scale);
    if (p_.has_zero) s->AddParam("zero", static_cast<double>(zero));
    if (!std::isnan(p_.shown_weight_scale_2)) {
      s->AddParam("weight_scale_2", p_.shown_weight_scale_2);
    }
    if (!column_scale_.empty()) {
      const float m = column_scale_[static_cast<size_t>(c)];
      s->AddParam("pre_quant_scale", m);
      s->value = s->value * m;
      s->scale = static_cast<double>(scale) * m;
      const double f = std::fabs(static_cast<double>(m));
      s->step *= f;
      s->step_below *= f;
      s->step_above *= f;
      const double lo = s->range_min * m, hi = s->range_max * m;
      s->range_min = std::min(lo, hi);
      s->range_max = std::max(lo, hi);
    }
    return absl::OkStatus();
  }

 private:
  static constexpr int64_t kGroupStride = int64_t{1} << 32;
  // 32 rows of 4096 codes are 128 KiB, at home in L2, and GPTQ's and AWQ's
  // transposed words are read two whole cache lines at a time (16 was 15%
  // slower on GPTQ, 64 no faster: decode_bench's ConventionLayer).
  static constexpr int64_t kTileRows = 32;
  // Columns of a row decoded at once before their column scales apply:
  // 4 KiB of values beside 4 KiB of scales.
  static constexpr int64_t kColumnPiece = 1024;

  // The tile that [first, first + count) starts with: rows [r, r + nr),
  // columns [c0, c0 + n); several rows only when whole rows are asked for,
  // and never across a kTileRows boundary.
  struct Tile {
    int64_t r, nr, c0, n;
  };
  Tile NextTile(int64_t first, int64_t count) const {
    const int64_t r = first / p_.cols, c0 = first % p_.cols;
    const int64_t n = std::min(count, p_.cols - c0);
    int64_t nr = 1;
    if (c0 == 0 && n == p_.cols) {
      nr = std::min(count / p_.cols, kTileRows - r % kTileRows);
    }
    return {r, nr, c0, n};
  }
  // Where code (r, c0) sits when codes are stored one byte each in the
  // logical layout (IntMatrix::GetTile's memcpy case), else nullptr.
  const uint8_t* DirectCodes(int64_t r, int64_t c0) const {
    const IntMatrix& m = p_.codes;
    if (m.kind != IntMatrix::Kind::kDirect || m.bits != 8 || m.transposed ||
        GetDTypeInfo(m.tensor->dtype).block_bytes != 1) {
      return nullptr;
    }
    return m.tensor->data.data() + r * m.stored_cols + c0;
  }

  // The row stride a tile of nr rows of n codes is unpacked with: rows a
  // power of two apart would share L1 sets, so they are padded.
  static int64_t PaddedStride(int64_t nr, int64_t n) {
    return nr > 1 ? n + 64 : n;
  }

  // The xor that sign-extends two's-complement codes for the kernels.
  uint8_t Flip() const {
    return p_.signed_codes ? static_cast<uint8_t>(1u << (p_.codes.bits - 1))
                           : 0;
  }

  // DecodeRuns' run of `len` elements of group (gr, gc): the group's step
  // and the range its codes span (codebooks: their lowest and highest
  // level).
  QuantRun RunOf(int64_t len, int64_t gr, int64_t gc, float scale,
                 int64_t zero) const {
    const int64_t lo =
        p_.signed_codes ? -(int64_t{1} << (p_.codes.bits - 1)) : 0;
    const int64_t hi = lo + (int64_t{1} << p_.codes.bits) - 1;
    const double a = p_.table.empty() ? static_cast<double>(scale) *
                                            (lo - p_.code_offset - zero)
                                      : static_cast<double>(scale) * lo_level_;
    const double b = p_.table.empty() ? static_cast<double>(scale) *
                                            (hi - p_.code_offset - zero)
                                      : static_cast<double>(scale) * hi_level_;
    const double step = std::fabs(static_cast<double>(scale));
    return {len,  GroupIndex(gr, gc), step,
            step, std::min(a, b),     std::max(a, b)};
  }

  // [first, first + count) a tile at a time as Decode reads it: its codes
  // unpacked into `codes` as Decode unpacks them, and visit(run, groups, g)
  // for each run as DecodeRuns walks them, `g` its group's index into the
  // tile's `groups`. False (part way, perhaps) where the groups are not in
  // regular runs (act-order) or a bias exceeds 32 bits.
  template <typename Visit>
  bool WalkCodeRuns(int64_t first, int64_t count, uint8_t* codes,
                    Visit visit) const {
    thread_local TileGroups groups;
    thread_local std::vector<uint8_t> tile;
    while (count > 0) {
      const Tile t = NextTile(first, count);
      const int64_t r = t.r, nr = t.nr, c0 = t.c0, n = t.n;
      // Unpacked as Decode unpacks them, then copied out row by row.
      const int64_t stride = PaddedStride(nr, n);
      tile.resize(static_cast<size_t>(nr * stride));
      p_.codes.GetTile(r, nr, c0, n, tile.data(), stride);
      for (int64_t i = 0; i < nr; ++i) {
        std::memcpy(codes + i * n, tile.data() + i * stride,
                    static_cast<size_t>(n));
      }
      FetchGroups(r, nr, c0, n, first, &groups);
      Runs regular;
      if (!groups.bias_fits || !RegularRuns(c0, n, first, &regular)) {
        return false;
      }
      for (int64_t i = 0; i < nr; ++i) {
        const int64_t row_flat = first + i * n;
        for (int64_t k = 0; k < n;) {
          int64_t gr = 0, gc = 0;
          GroupOf(r + i, c0 + k, row_flat + k, &gr, &gc);
          const int64_t len = RunOfGroup(c0 + k, row_flat + k, gc, n - k);
          const size_t g = static_cast<size_t>((gr - groups.gr0) * groups.ngc +
                                               gc - groups.gc0);
          visit(RunOf(len, gr, gc, groups.scale[g], groups.zero[g]), groups, g);
          k += len;
        }
      }
      codes += nr * n;
      first += nr * n;
      count -= nr * n;
    }
    return true;
  }

  // Scales and zero-points of the groups [gr0, gr0 + ngr) x [gc0, gc0 + ngc)
  // a tile touches, row-major; `bias` folds each zero-point with the codes'
  // sign and offset for the kernels, when every one fits in 32 bits.
  struct TileGroups {
    int64_t gr0 = 0, gc0 = 0, ngc = 0;
    std::vector<float> scale;
    std::vector<int64_t> zero;
    std::vector<int32_t> bias;
    bool bias_fits = true;
  };

  void FetchGroups(int64_t r, int64_t nr, int64_t c0, int64_t n, int64_t flat,
                   TileGroups* g) const {
    int64_t gr_hi = 0, gc_hi = 0;
    GroupOf(r, c0, flat, &g->gr0, &g->gc0);
    const int64_t last_c = nr > 1 ? p_.cols - 1 : c0 + n - 1;
    GroupOf(r + nr - 1, last_c, flat + nr * n - 1, &gr_hi, &gc_hi);
    if (p_.groups == AffineParams::Groups::kGroup && !p_.g_idx.empty()) {
      g->gc0 = 0, gc_hi = ScaleCols() - 1;  // act-order: any group, any column
    }
    const int64_t ngr = gr_hi - g->gr0 + 1;
    g->ngc = gc_hi - g->gc0 + 1;
    const size_t total = static_cast<size_t>(ngr * g->ngc);
    g->scale.resize(total);
    g->zero.assign(total, 0);
    g->bias.resize(total);
    switch (p_.scale_kind) {
      case AffineParams::Scales::kFloat:
        p_.scale.GetTile(g->gr0, ngr, g->gc0, g->ngc, g->scale.data());
        if (p_.scale_divisor != 0) {
          for (float& s : g->scale) s /= p_.scale_divisor;
        }
        if (p_.multiply_scale) {
          for (float& s : g->scale) s *= p_.scale_multiplier;
        }
        break;
      case AffineParams::Scales::kE8M0: {
        thread_local std::vector<uint8_t> e;
        e.resize(total);
        p_.scale_codes.GetTile(g->gr0, ngr, g->gc0, g->ngc, e.data(), g->ngc);
        for (size_t k = 0; k < total; ++k) g->scale[k] = E8M0ToF32(e[k]);
        if (p_.scale_divisor != 0) {
          for (float& s : g->scale) s /= p_.scale_divisor;
        }
        if (p_.multiply_scale) {
          for (float& s : g->scale) s *= p_.scale_multiplier;
        }
        break;
      }
      case AffineParams::Scales::kNestedAbsmax:
        for (int64_t i = 0; i < ngr; ++i) {
          for (int64_t j = 0; j < g->ngc; ++j) {
            g->scale[i * g->ngc + j] = ScaleOf(g->gr0 + i, g->gc0 + j);
          }
        }
        break;
    }
    if (p_.has_zero) {
      for (int64_t i = 0; i < ngr; ++i) {
        for (int64_t j = 0; j < g->ngc; ++j) {
          g->zero[i * g->ngc + j] = ZeroOf(g->gr0 + i, g->gc0 + j);
        }
      }
    }
    g->bias_fits = true;
    if (!p_.table.empty()) return;  // codebooks take no bias
    const int64_t sign =
        p_.signed_codes ? int64_t{1} << (p_.codes.bits - 1) : 0;
    for (size_t k = 0; k < total; ++k) {
      const int64_t bias = sign + p_.code_offset + g->zero[k];
      g->bias_fits &= bias >= INT32_MIN && bias <= INT32_MAX;
      g->bias[k] = static_cast<int32_t>(bias);
    }
  }

  // Where the groups of a row's codes [c0, c0 + n) start and how long they
  // are, when that is regular (everything but act-order's g_idx).
  bool RegularRuns(int64_t c0, int64_t n, int64_t flat, Runs* runs) const {
    switch (p_.groups) {
      case AffineParams::Groups::kTensor:
      case AffineParams::Groups::kChannel:
        *runs = {.run = n, .skip = 0};
        return true;
      case AffineParams::Groups::kGroup:
        if (!p_.g_idx.empty()) return false;
        *runs = {.run = p_.group_size, .skip = c0 % p_.group_size};
        return true;
      case AffineParams::Groups::kBlock:
        *runs = {.run = p_.block_cols, .skip = c0 % p_.block_cols};
        return true;
      case AffineParams::Groups::kFlatBlock:
        *runs = {.run = p_.group_size, .skip = flat % p_.group_size};
        return true;
    }
    return false;
  }

  // DecodeRow times the column scales in one pass, for integer codes or a
  // sixteen-level codebook in regular groups; false (nothing written)
  // otherwise.
  bool DecodeRowColumns(int64_t r, int64_t c0, int64_t n, int64_t flat,
                        const uint8_t* code, const TileGroups& g,
                        float* out) const {
    Runs runs;
    const bool table16 = p_.table.size() == 16;
    if ((!p_.table.empty() && !table16) || !g.bias_fits ||
        !RegularRuns(c0, n, flat, &runs)) {
      return false;
    }
    int64_t gr = 0, gc = 0;
    GroupOf(r, c0, flat, &gr, &gc);
    const size_t k = static_cast<size_t>((gr - g.gr0) * g.ngc + gc - g.gc0);
    if (table16) {
      DecodeTable16ColumnRuns(code, n, runs, p_.table.data(), &g.scale[k],
                              column_scale_.data() + c0, out);
      return true;
    }
    const uint8_t flip = Flip();
    DecodeAffineColumnRuns(code, n, runs, flip, &g.bias[k], &g.scale[k],
                           column_scale_.data() + c0, out);
    return true;
  }

  // A tile of 16-entry codebook codes stored as row-major nibbles (NVFP4,
  // MXFP4, NF4) decoded from the packed bytes, each row's groups whole and
  // 16-aligned; false, having written nothing, otherwise (the CPU, or the
  // layout).
  bool DecodeNibbleTile(int64_t r, int64_t nr, int64_t c0, int64_t n,
                        int64_t first, TileGroups* groups, float* out) const {
    const IntMatrix& m = p_.codes;
    Runs runs;
    if (m.kind != IntMatrix::Kind::kNibbles || m.transposed ||
        p_.table.size() != 16 || m.stored_cols % 2 != 0 || c0 % 2 != 0 ||
        p_.groups != AffineParams::Groups::kGroup ||
        !RegularRuns(c0, n, first, &runs) || runs.skip != 0 ||
        runs.run % 16 != 0 || ActiveDecodeSimd() < DecodeSimd::kAvx512) {
      return false;
    }
    FetchGroups(r, nr, c0, n, first, groups);
    for (int64_t i = 0; i < nr; ++i) {
      int64_t gr = 0, gc = 0;
      GroupOf(r + i, c0, first + i * p_.cols, &gr, &gc);
      const size_t k = static_cast<size_t>((gr - groups->gr0) * groups->ngc +
                                           gc - groups->gc0);
      const uint8_t* packed =
          m.tensor->data.data() + ((r + i) * m.stored_cols + c0) / 2;
      if (!DecodeNibbleTableRuns(packed, n, runs, m.high_nibble_first,
                                 p_.table.data(), &groups->scale[k],
                                 out + i * n)) {
        return false;  // not reached: the conditions above are its own
      }
      // AWQ's column scale on the row just written, as DecodeRowColumns'
      // two roundings have it.
      if (!column_scale_.empty()) {
        ScaleColumns(out + i * n, column_scale_.data() + c0, n);
      }
    }
    return true;
  }

  void DecodeRow(int64_t r, int64_t c0, int64_t n, int64_t flat,
                 const uint8_t* code, const TileGroups& g, float* out) const {
    const uint8_t flip = Flip();
    auto index = [&](int64_t gr, int64_t gc) {
      return static_cast<size_t>((gr - g.gr0) * g.ngc + gc - g.gc0);
    };
    Runs runs;
    if (RegularRuns(c0, n, flat, &runs) && g.bias_fits) {
      int64_t gr = 0, gc = 0;
      GroupOf(r, c0, flat, &gr, &gc);
      const size_t k = index(gr, gc);
      if (!p_.table.empty()) {
        DecodeTableRuns(code, n, runs, p_.table.data(),
                        static_cast<int>(p_.table.size()), codebook_,
                        &g.scale[k], out);
      } else {
        DecodeAffineRuns(code, n, runs, flip, &g.bias[k], &g.scale[k], out);
      }
      return;
    }
    for (int64_t i = 0; i < n;) {  // act-order, or a zero-point beyond int32
      int64_t gr = 0, gc = 0;
      GroupOf(r, c0 + i, flat + i, &gr, &gc);
      const int64_t len = RunOfGroup(c0 + i, flat + i, gc, n - i);
      const size_t k = index(gr, gc);
      for (int64_t j = i; j < i + len; ++j) {
        out[j] = g.scale[k] * Level(code[j], g.zero[k]);
      }
      i += len;
    }
  }

  // Element by element, for codes wider than a byte.
  absl::Status DecodeEach(int64_t first, int64_t count, float* out) const {
    int64_t cached = -1;
    float scale = 0;
    int64_t zero = 0;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t flat = first + i;
      const int64_t r = flat / p_.cols, c = flat % p_.cols;
      int64_t gr = 0, gc = 0;
      GroupOf(r, c, flat, &gr, &gc);
      if (const int64_t key = gr * kGroupStride + gc; key != cached) {
        cached = key;
        scale = ScaleOf(gr, gc);
        zero = ZeroOf(gr, gc);
      }
      out[i] = scale * Level(p_.codes.Get(r, c), zero);
      if (!column_scale_.empty()) out[i] *= column_scale_[c];
    }
    return absl::OkStatus();
  }

  // A run of one element of column scale m: steps and range times m.
  static void ScaleRun(float m, QuantRun* e) {
    const double f = std::fabs(static_cast<double>(m));
    e->step_below *= f;
    e->step_above *= f;
    const double lo = e->range_min * m, hi = e->range_max * m;
    e->range_min = std::min(lo, hi);
    e->range_max = std::max(lo, hi);
  }

  // Sixteen levels whose upper eight are the lower eight negated, bit for
  // bit (FP4 E2M1): the kernels compute the sign instead of looking it up.
  static bool IsSignMagnitude16(const std::vector<float>& t) {
    if (t.size() != 16) return false;
    for (int c = 0; c < 8; ++c) {
      if ((F32ToBits(t[c]) ^ 0x80000000u) != F32ToBits(t[c + 8])) return false;
    }
    return true;
  }

  static int64_t SignExtend(uint32_t v, int bits) {
    const int64_t sign = int64_t{1} << (bits - 1);
    return (static_cast<int64_t>(v) ^ sign) - sign;
  }

  void GroupOf(int64_t r, int64_t c, int64_t flat, int64_t* gr,
               int64_t* gc) const {
    switch (p_.groups) {
      case AffineParams::Groups::kTensor:
        *gr = 0, *gc = 0;
        return;
      case AffineParams::Groups::kChannel:
        *gr = r, *gc = 0;
        return;
      case AffineParams::Groups::kGroup:
        *gr = r;
        *gc = p_.g_idx.empty() ? c / p_.group_size : p_.g_idx[c];
        return;
      case AffineParams::Groups::kBlock:
        *gr = r / p_.block_rows, *gc = c / p_.block_cols;
        return;
      case AffineParams::Groups::kFlatBlock:
        *gr = 0, *gc = flat / p_.group_size;
        return;
    }
  }

  // How many of the next `left` elements of a row, from column c (flat index
  // `flat`, group column gc), share c's group.
  int64_t RunOfGroup(int64_t c, int64_t flat, int64_t gc, int64_t left) const {
    switch (p_.groups) {
      case AffineParams::Groups::kTensor:
      case AffineParams::Groups::kChannel:
        return left;
      case AffineParams::Groups::kGroup:
        if (p_.g_idx.empty()) {
          return std::min(left, (gc + 1) * p_.group_size - c);
        } else {
          int64_t k = 1;
          while (k < left && p_.g_idx[c + k] == gc) ++k;
          return k;
        }
      case AffineParams::Groups::kBlock:
        return std::min(left, (gc + 1) * p_.block_cols - c);
      case AffineParams::Groups::kFlatBlock:
        return std::min(left, (gc + 1) * p_.group_size - flat);
    }
    return 1;
  }

  // The group id (ScalarInfo::group): row-major over the group grid.
  int64_t GroupIndex(int64_t gr, int64_t gc) const {
    switch (p_.groups) {
      case AffineParams::Groups::kTensor:
        return 0;
      case AffineParams::Groups::kChannel:
        return gr;
      case AffineParams::Groups::kGroup:
      case AffineParams::Groups::kBlock:
        return gr * grid_cols_ + gc;
      case AffineParams::Groups::kFlatBlock:
        return gc;
    }
    return 0;
  }

  int64_t ScaleCols() const {
    return p_.scale_kind == AffineParams::Scales::kFloat ? p_.scale.cols
                                                         : p_.scale_codes.cols;
  }

  // The group's scale; `with_multiplier` false: as stored, before a
  // global multiplier (what the Inspector shows beside it).
  float ScaleOf(int64_t gr, int64_t gc, bool with_multiplier = true) const {
    float s = 0;
    switch (p_.scale_kind) {
      case AffineParams::Scales::kFloat:
        s = p_.scale.Get(gr, gc);
        break;
      case AffineParams::Scales::kE8M0:
        s = E8M0ToF32(static_cast<uint8_t>(p_.scale_codes.Get(gr, gc)));
        break;
      case AffineParams::Scales::kNestedAbsmax: {
        const int64_t g = gc;
        s = p_.nested_table[p_.scale_codes.Get(0, g)] *
                p_.nested_absmax.Get(0, g / p_.nested_blocksize) +
            p_.nested_offset;
        break;
      }
    }
    if (p_.scale_divisor != 0) s /= p_.scale_divisor;
    return p_.multiply_scale && with_multiplier ? s * p_.scale_multiplier : s;
  }

  int64_t ZeroOf(int64_t gr, int64_t gc) const {
    if (!p_.has_zero) return 0;
    uint32_t z = p_.zeros.Get(gr, gc) + static_cast<uint32_t>(p_.zero_add);
    if (p_.zero_mask != 0) z &= p_.zero_mask;
    const int64_t v = p_.signed_zeros ? SignExtend(z, p_.zeros.bits) : z;
    return v - p_.zero_offset;
  }

  float Level(uint32_t code, int64_t zero) const {
    if (!p_.table.empty()) return p_.table[code];
    const int64_t q = p_.signed_codes ? SignExtend(code, p_.codes.bits) : code;
    return static_cast<float>(q - p_.code_offset - zero);
  }

  AffineParams p_;
  int64_t grid_cols_ = 1;
  // Codes of a byte or less, and a codebook (if any) covering every code:
  // the tiled path's kernels apply.
  const bool tiled_ =
      p_.codes.bits <= 8 &&
      (p_.table.empty() || p_.table.size() == (size_t{1} << p_.codes.bits));
  const Codebook codebook_ =
      p_.float_codes && p_.codes.tensor->dtype == DType::kF8E4M3 &&
              p_.codes.kind == IntMatrix::Kind::kDirect
          ? Codebook::kFp8E4M3
      : IsSignMagnitude16(p_.table) ? Codebook::kSignMagnitude16
                                    : Codebook::kTable;
  std::vector<double> levels_;
  std::vector<float> column_scale_;              // per column, or empty
  std::vector<std::pair<double, double>> gaps_;  // per code: below, above
  double lo_level_ = INFINITY, hi_level_ = -INFINITY;
};

}  // namespace

namespace {

absl::Status Invalid(absl::string_view what, absl::string_view rule) {
  return absl::DataLossError(absl::StrCat(what, ": ", rule));
}

// a * b, or nullopt when negative or overflowing.
std::optional<int64_t> Mul(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return std::nullopt;
  return CheckedMul<int64_t>(a, b);
}

// Ceil(a / b) for a >= 0, b > 0, without overflow.
int64_t Ceil(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// Every (r, c) inside [need_rows, need_cols] maps inside m.tensor's bytes.
absl::Status CheckIntMatrix(const IntMatrix& m, absl::string_view what,
                            int64_t need_rows, int64_t need_cols) {
  if (m.tensor == nullptr) return Invalid(what, "has no stored tensor");
  const std::string name = absl::StrCat(what, " '", m.tensor->name, "'");
  if (m.rows < need_rows || m.cols < need_cols) {
    return Invalid(name,
                   absl::StrCat("covers [", m.rows, ",", m.cols, "] but [",
                                need_rows, ",", need_cols, "] are indexed"));
  }
  if (m.bits < 1 || m.bits > 32) {
    return Invalid(
        name, absl::StrCat("has ", m.bits, "-bit codes; 1 to 32 are possible"));
  }
  if (m.rows == 0 || m.cols == 0) return absl::OkStatus();
  const int64_t srows = m.transposed ? m.cols : m.rows;
  const int64_t scols = m.transposed ? m.rows : m.cols;
  const DTypeInfo& d = GetDTypeInfo(m.tensor->dtype);
  const int64_t bytes = static_cast<int64_t>(m.tensor->data.size());
  std::optional<int64_t> need;  // bytes indexed
  int64_t min_stored_cols = scols;
  switch (m.kind) {
    case IntMatrix::Kind::kDirect:
      if (d.block_elems != 1 ||
          (d.block_bytes != 1 && d.block_bytes != 2 && d.block_bytes != 4 &&
           d.block_bytes != 8) ||
          m.bits > 8 * d.block_bytes) {
        return Invalid(name, absl::StrCat("is ", d.name, " but holds ", m.bits,
                                          "-bit codes one per element"));
      }
      if (auto e = Mul(srows, m.stored_cols)) need = Mul(*e, d.block_bytes);
      break;
    case IntMatrix::Kind::kPackedAlongCols:
    case IntMatrix::Kind::kPackedAlongRows: {
      if (d.block_elems != 1 || d.block_bytes != 4) {
        return Invalid(name, absl::StrCat("is ", d.name,
                                          " but packed codes need 32-bit "
                                          "words"));
      }
      if (m.interleaved && (m.bits != 4 || m.per_word != 0)) {
        return Invalid(name, "interleaves codes other than 4-bit ones");
      }
      if (m.per_word < 0 || m.per_word * m.bits > 32) {
        return Invalid(name, absl::StrCat(m.per_word, " codes of ", m.bits,
                                          " bits do not fit a word"));
      }
      const bool along_cols = m.kind == IntMatrix::Kind::kPackedAlongCols;
      const int64_t n = along_cols ? scols : srows;  // codes per stream
      int64_t words = 0;
      if (m.interleaved) {
        words = Ceil(n, 8);
      } else if (m.per_word > 0) {
        words = Ceil(n, m.per_word);
      } else if (auto b = Mul(n, m.bits)) {
        words = Ceil(*b, 32);
      } else {
        return Invalid(name, "is too large");
      }
      if (along_cols) {
        min_stored_cols = words;
        if (auto e = Mul(srows, m.stored_cols)) need = Mul(*e, 4);
      } else if (auto e = Mul(words, m.stored_cols)) {
        need = Mul(*e, 4);
      }
      break;
    }
    case IntMatrix::Kind::kNibbles:
      if (m.bits != 4 || d.block_elems != 1 || d.block_bytes != 1) {
        return Invalid(
            name, absl::StrCat("is ", d.name, " but nibble codes need bytes"));
      }
      if (auto e = Mul(srows - 1, m.stored_cols)) {
        if (auto f = CheckedAdd<int64_t>(*e, scols)) need = Ceil(*f, 2);
      }
      break;
    case IntMatrix::Kind::kNibblePairsOfRows:
      if (m.bits != 4 || d.block_elems != 1 || d.block_bytes != 1) {
        return Invalid(
            name, absl::StrCat("is ", d.name, " but nibble codes need bytes"));
      }
      if (auto e = Mul(Ceil(srows, 2), m.stored_cols)) need = *e;
      break;
  }
  if (m.stored_cols < min_stored_cols) {
    return Invalid(name,
                   absl::StrCat("has stored rows of ", m.stored_cols, " but ",
                                min_stored_cols, " are indexed"));
  }
  if (!need || *need > bytes) {
    return Invalid(name, absl::StrCat("holds ", bytes,
                                      " bytes, fewer than "
                                      "its [",
                                      m.rows, ",", m.cols, "] codes index"));
  }
  return absl::OkStatus();
}

absl::Status CheckFloatMatrix(const FloatMatrix& m, absl::string_view what,
                              int64_t need_rows, int64_t need_cols) {
  if (m.tensor == nullptr) return Invalid(what, "has no stored tensor");
  const std::string name = absl::StrCat(what, " '", m.tensor->name, "'");
  const DTypeInfo& d = GetDTypeInfo(m.tensor->dtype);
  if (!d.decodable || d.block_elems != 1) {
    return Invalid(name,
                   absl::StrCat("is ", d.name, " but must hold plain numbers"));
  }
  if (m.rows < need_rows || m.cols < need_cols) {
    return Invalid(name,
                   absl::StrCat("covers [", m.rows, ",", m.cols, "] but [",
                                need_rows, ",", need_cols, "] are indexed"));
  }
  auto n = Mul(m.rows, m.cols);
  if (!n || *n > m.tensor->num_elements) {
    return Invalid(
        name, absl::StrCat("holds ", m.tensor->num_elements,
                           " values, fewer than [", m.rows, ",", m.cols, "]"));
  }
  return absl::OkStatus();
}

absl::Status Validate(const AffineParams& p) {
  const absl::string_view what = "affine encoding";
  auto n = CheckedProduct(p.shape);
  auto rc = Mul(p.rows, p.cols);
  if (p.shape.empty() || !n || !rc || *n != *rc ||
      (p.rows > 0 && p.cols == 0 && *n != 0)) {
    return Invalid(
        what, absl::StrCat("shape of ", p.shape.size(), " dims does not make [",
                           p.rows, ",", p.cols, "]"));
  }
  if (!p.table.empty() &&
      (p.codes.bits > 16 || p.table.size() < (size_t{1} << p.codes.bits))) {
    return Invalid(
        what, absl::StrCat("a codebook of ", p.table.size(), " levels for ",
                           p.codes.bits, "-bit codes"));
  }
  if (p.signed_codes && p.codes.bits < 2) {
    return Invalid(what, "signed 1-bit codes");
  }
  TM_RETURN_IF_ERROR(CheckIntMatrix(p.codes, "codes", p.rows, p.cols));
  // The group grid every (r, c) maps into.
  int64_t grows = 1, gcols = 1;
  const int64_t scale_cols = p.scale_kind == AffineParams::Scales::kFloat
                                 ? p.scale.cols
                                 : p.scale_codes.cols;
  switch (p.groups) {
    case AffineParams::Groups::kTensor:
      break;
    case AffineParams::Groups::kChannel:
      grows = p.rows;
      break;
    case AffineParams::Groups::kGroup:
      if (p.group_size <= 0) {
        return Invalid(what, absl::StrCat("group size ", p.group_size,
                                          " is not positive"));
      }
      grows = p.rows;
      gcols = Ceil(p.cols, p.group_size);
      if (!p.g_idx.empty()) {
        if (static_cast<int64_t>(p.g_idx.size()) != p.cols) {
          return Invalid(
              what, absl::StrCat("g_idx has ", p.g_idx.size(), " entries for ",
                                 p.cols, " columns"));
        }
        for (size_t k = 0; k < p.g_idx.size(); ++k) {
          if (p.g_idx[k] < 0 || p.g_idx[k] >= scale_cols) {
            return Invalid(
                what, absl::StrCat("g_idx[", k, "] = ", p.g_idx[k],
                                   " is outside the ", scale_cols, " groups"));
          }
        }
        gcols = scale_cols;
      }
      break;
    case AffineParams::Groups::kBlock:
      if (p.block_rows <= 0 || p.block_cols <= 0) {
        return Invalid(what, absl::StrCat("block ", p.block_rows, "x",
                                          p.block_cols, " is not positive"));
      }
      grows = Ceil(p.rows, p.block_rows);
      gcols = Ceil(p.cols, p.block_cols);
      break;
    case AffineParams::Groups::kFlatBlock:
      if (p.group_size <= 0) {
        return Invalid(what, absl::StrCat("block size ", p.group_size,
                                          " is not positive"));
      }
      gcols = Ceil(*n, p.group_size);
      break;
  }
  if (!p.g_idx.empty() && p.groups != AffineParams::Groups::kGroup) {
    return Invalid(what, "g_idx without groups along the columns");
  }
  if (*n == 0) grows = gcols = 0;
  switch (p.scale_kind) {
    case AffineParams::Scales::kFloat:
      TM_RETURN_IF_ERROR(CheckFloatMatrix(p.scale, "scales", grows, gcols));
      break;
    case AffineParams::Scales::kE8M0:
      TM_RETURN_IF_ERROR(
          CheckIntMatrix(p.scale_codes, "E8M0 scales", grows, gcols));
      if (p.scale_codes.bits != 8)
        return Invalid(what, "E8M0 scales not 8-bit");
      break;
    case AffineParams::Scales::kNestedAbsmax:
      TM_RETURN_IF_ERROR(
          CheckIntMatrix(p.scale_codes, "absmax codes", grows, gcols));
      if (grows > 1) return Invalid(what, "nested absmax over several rows");
      if (p.scale_codes.bits != 8 || p.nested_table.size() < 256) {
        return Invalid(what, "nested absmax needs 8-bit codes and 256 levels");
      }
      if (p.nested_blocksize <= 0) {
        return Invalid(what,
                       absl::StrCat("nested block size ", p.nested_blocksize,
                                    " is not positive"));
      }
      TM_RETURN_IF_ERROR(CheckFloatMatrix(p.nested_absmax, "nested absmax",
                                          gcols > 0 ? 1 : 0,
                                          Ceil(gcols, p.nested_blocksize)));
      break;
  }
  if (!std::isfinite(p.scale_divisor)) {
    return Invalid(what, "a scale divisor that is not finite");
  }
  constexpr int64_t kMaxOffset = int64_t{1} << 32;
  if (std::abs(p.code_offset) > kMaxOffset ||
      std::abs(p.zero_offset) > kMaxOffset ||
      std::abs(p.zero_add) > kMaxOffset) {
    return Invalid(what, "a code or zero offset beyond 2^32");
  }
  if (p.has_zero) {
    TM_RETURN_IF_ERROR(CheckIntMatrix(p.zeros, "zero points", grows, gcols));
    if (p.signed_zeros && p.zeros.bits < 2) {
      return Invalid(what, "signed 1-bit zero points");
    }
  }
  if (p.column_scale.tensor != nullptr) {
    TM_RETURN_IF_ERROR(
        CheckFloatMatrix(p.column_scale, "column scales", 1, p.cols));
  }
  for (const StoredTensor* t : p.parts) {
    if (t == nullptr) return Invalid(what, "a missing part");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Encoding>> MakeAffineEncoding(
    AffineParams params) {
  TM_RETURN_IF_ERROR(Validate(params));
  return std::shared_ptr<const Encoding>(
      std::make_shared<AffineEncoding>(std::move(params)));
}

}  // namespace tensormorph
