#include "tests/support/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/quant/float_formats.h"

namespace tensormorph::testing {

uint16_t F32ToF16Bits(float f) {
  // Round to nearest even, by hand (clang 14 has no _Float16 on x86).
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7FFFFFFF;
  if (abs > 0x7F800000) return sign | 0x7E00;   // NaN
  if (abs >= 0x477FF000) return sign | 0x7C00;  // rounds past 65504: inf
  if (abs < 0x38800000) {                       // below 2^-14: subnormal
    float a;
    std::memcpy(&a, &abs, 4);
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  const uint32_t mant = abs & 0x7FFFFF;
  uint32_t h = ((((abs >> 23) - 127 + 15) << 10) | (mant >> 13));
  const uint32_t rest = mant & 0x1FFF;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
    ++h;  // a carry bumps the exponent
  return sign | static_cast<uint16_t>(h);
}

uint16_t F32ToBF16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFF) > 0x7F800000)
    return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

std::string ToBF16Bytes(const std::vector<float>& v) {
  std::string out(v.size() * 2, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t b = F32ToBF16Bits(v[i]);
    std::memcpy(&out[2 * i], &b, 2);
  }
  return out;
}

std::string ToF32Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

std::string QuantizeQ8_0(const std::vector<float>& v) {
  std::string out;
  for (size_t b = 0; b < v.size(); b += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[b + j]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t dh = F32ToF16Bits(d);
    out.append(reinterpret_cast<const char*>(&dh), 2);
    for (int j = 0; j < 32; ++j) {
      out.push_back(
          static_cast<char>(static_cast<int8_t>(std::lround(v[b + j] * id))));
    }
  }
  return out;
}

std::string QuantizeQ4_0(const std::vector<float>& v) {
  std::string out;
  for (size_t b = 0; b < v.size(); b += 32) {
    float max = 0, amax = 0;
    for (int j = 0; j < 32; ++j) {
      if (std::fabs(v[b + j]) > amax) {
        amax = std::fabs(v[b + j]);
        max = v[b + j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    const uint16_t dh = F32ToF16Bits(d);
    out.append(reinterpret_cast<const char*>(&dh), 2);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, static_cast<int>(v[b + j] * id + 8.5f));
      const int q1 = std::min(15, static_cast<int>(v[b + j + 16] * id + 8.5f));
      out.push_back(static_cast<char>(q0 | (q1 << 4)));
    }
  }
  return out;
}

namespace {

void AppendF16(std::string* out, uint16_t bits) {
  out->append(reinterpret_cast<const char*>(&bits), 2);
}

// ggml's rounding of a code: adding 1.5 * 2^23 leaves the nearest integer
// (ties to even) in the low mantissa bits. Kept bit for bit, wrap-around
// beyond 2^22 included, because the codes ggml writes depend on it.
int NearestInt(float f) {
  const float v = f + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007fffff) - 0x00400000;
}

int Clamp(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

// Levels 0..nmax with a scale and a minimum (never above 0) fitted to x
// under weights w: the min/max grid first, then nstep + 1 stretched grids
// refitted by weighted least squares, the one with the least weighted
// squared error kept (ggml's make_qkx2_quants, without its MAD option).
// Returns the scale; *neg_min receives minus the minimum; L the levels.
float FitScaleAndMin(int n, int nmax, const float* x, const float* w,
                     uint8_t* L, float* neg_min, float rmin, float rdelta,
                     int nstep) {
  float lo = x[0], hi = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    std::fill_n(L, n, 0);
    *neg_min = -lo;
    return 0.0f;
  }
  float iscale = nmax / (hi - lo);
  float scale = 1 / iscale;
  float best = 0;
  for (int i = 0; i < n; ++i) {
    L[i] =
        static_cast<uint8_t>(Clamp(NearestInt(iscale * (x[i] - lo)), 0, nmax));
    const float diff = scale * L[i] + lo - x[i];
    best += w[i] * (diff * diff);
  }
  uint8_t aux[32];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = Clamp(NearestInt(iscale * (x[i] - lo)), 0, nmax);
      aux[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * aux[i] + this_min - x[i];
      err += w[i] * (diff * diff);
    }
    if (err < best) {
      std::copy_n(aux, n, L);
      best = err;
      scale = this_scale;
      lo = this_min;
    }
  }
  *neg_min = -lo;
  return scale;
}

// Symmetric levels -nmax..nmax-1 (stored + nmax) with the scale that
// maximises the x^2-weighted fit over 19 grids around the one whose end
// level -nmax meets the largest magnitude (ggml's make_qx_quants, weights
// x^2). Returns the scale (negative when the largest magnitude is positive).
float FitSymmetricScale(int n, int nmax, const float* x, uint8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < 1e-15f) {
    std::fill_n(L, n, 0);
    return 0.0f;
  }
  auto fit = [&](float iscale, float* sumlx, float* suml2) {
    *sumlx = *suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      *sumlx += w * x[i] * l;
      *suml2 += w * l * l;
    }
  };
  auto store = [&](float iscale) {
    for (int i = 0; i < n; ++i) {
      L[i] = static_cast<uint8_t>(
          nmax + Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1));
    }
  };
  float iscale = -nmax / max;
  float sumlx, suml2;
  fit(iscale, &sumlx, &suml2);
  store(iscale);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    fit(iscale, &sumlx, &suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      store(iscale);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

}  // namespace

std::string QuantizeQ4_K(const std::vector<float>& v) {
  std::string out;
  for (size_t b = 0; b < v.size(); b += 256) {
    const float* x = &v[b];
    float scales[8], mins[8], w[32];
    uint8_t L[256];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      const float* xs = x + 32 * j;
      float sum_x2 = 0;
      for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
      const float av_x = std::sqrt(sum_x2 / 32);
      for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(xs[l]);
      scales[j] =
          FitScaleAndMin(32, 15, xs, w, L + 32 * j, &mins[j], -1.0f, 0.1f, 20);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    // The sub-block scales and minimums as 6-bit multiples of the
    // super-block's, then every code chosen again against the rounded ones.
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) {
      sc[j] = std::min<uint8_t>(
          63, static_cast<uint8_t>(NearestInt(inv_scale * scales[j])));
      m[j] = std::min<uint8_t>(
          63, static_cast<uint8_t>(NearestInt(inv_min * mins[j])));
    }
    const uint16_t d = F32ToF16Bits(max_scale / 63.0f);
    const uint16_t dmin = F32ToF16Bits(max_min / 63.0f);
    for (int j = 0; j < 8; ++j) {
      const float dl = F16ToF32(d) * sc[j];
      if (dl == 0) continue;  // keeps the fitted levels, as ggml does
      const float ml = F16ToF32(dmin) * m[j];
      for (int l = 0; l < 32; ++l) {
        L[32 * j + l] = static_cast<uint8_t>(
            Clamp(NearestInt((x[32 * j + l] + ml) / dl), 0, 15));
      }
    }
    AppendF16(&out, d);
    AppendF16(&out, dmin);
    uint8_t packed[12];
    for (int j = 0; j < 4; ++j) {
      packed[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
      packed[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
      packed[j + 8] = (sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4);
    }
    out.append(reinterpret_cast<const char*>(packed), 12);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        out.push_back(
            static_cast<char>(L[64 * c + l] | (L[64 * c + 32 + l] << 4)));
      }
    }
  }
  return out;
}

std::string QuantizeQ6_K(const std::vector<float>& v) {
  std::string out;
  for (size_t b = 0; b < v.size(); b += 256) {
    const float* x = &v[b];
    float scales[16];
    uint8_t L[256];
    float max_scale = 0, max_abs_scale = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = FitSymmetricScale(16, 32, x + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    if (max_abs_scale < 1e-15f) {  // an all-zero super-block
      out.append(210, '\0');
      continue;
    }
    // 8-bit sub-block scales: the largest magnitude maps to -128.
    const float iscale = -128.0f / max_scale;
    const uint16_t d = F32ToF16Bits(1 / iscale);
    int8_t sc[16];
    for (int j = 0; j < 16; ++j) {
      sc[j] =
          static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[j])));
    }
    for (int j = 0; j < 16; ++j) {
      const float dl = F16ToF32(d) * sc[j];
      if (dl == 0) continue;  // keeps the fitted levels, as ggml does
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] = static_cast<uint8_t>(
            Clamp(NearestInt(x[16 * j + l] / dl), -32, 31) + 32);
      }
    }
    uint8_t ql[128] = {}, qh[64] = {};
    for (int n = 0; n < 2; ++n) {
      const uint8_t* e = L + 128 * n;
      for (int l = 0; l < 32; ++l) {
        ql[64 * n + l] = (e[l] & 0xF) | ((e[l + 64] & 0xF) << 4);
        ql[64 * n + l + 32] = (e[l + 32] & 0xF) | ((e[l + 96] & 0xF) << 4);
        qh[32 * n + l] = (e[l] >> 4) | ((e[l + 32] >> 4) << 2) |
                         ((e[l + 64] >> 4) << 4) | ((e[l + 96] >> 4) << 6);
      }
    }
    out.append(reinterpret_cast<const char*>(ql), 128);
    out.append(reinterpret_cast<const char*>(qh), 64);
    out.append(reinterpret_cast<const char*>(sc), 16);
    AppendF16(&out, d);
  }
  return out;
}

std::vector<float> Gaussian(size_t n, uint64_t seed, float stddev) {
  std::mt19937_64 rng(seed);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; i += 2) {
    const double u1 =
        (static_cast<double>(rng() >> 11) + 1.0) / 9007199254740993.0;
    const double u2 = static_cast<double>(rng() >> 11) / 9007199254740992.0;
    const double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(r * std::cos(2 * M_PI * u2)) * stddev;
    if (i + 1 < n)
      out[i + 1] = static_cast<float>(r * std::sin(2 * M_PI * u2)) * stddev;
  }
  return out;
}

}  // namespace tensormorph::testing
