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
float F16Round(float x) { return F16ToF32(F32ToF16Bits(x)); }
void AppendF16(std::string* out, float x) {
  const uint16_t b = F32ToF16Bits(x);
  out->append(reinterpret_cast<const char*>(&b), 2);
}
}  // namespace

std::string QuantizeQ4_K(const std::vector<float>& v) {
  std::string out;
  for (size_t b = 0; b < v.size(); b += 256) {
    float scale[8], min[8];
    for (int j = 0; j < 8; ++j) {
      float lo = 0, hi = 0;  // the range always includes zero
      for (int l = 0; l < 32; ++l) {
        lo = std::min(lo, v[b + 32 * j + l]);
        hi = std::max(hi, v[b + 32 * j + l]);
      }
      scale[j] = (hi - lo) / 15.0f;
      min[j] = -lo;
    }
    const float d = F16Round(*std::max_element(scale, scale + 8) / 63.0f);
    const float dmin = F16Round(*std::max_element(min, min + 8) / 63.0f);
    uint8_t sc[8], m[8], q[256];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>(
          d > 0 ? std::clamp<long>(std::lround(scale[j] / d), 0, 63) : 0);
      m[j] = static_cast<uint8_t>(
          dmin > 0 ? std::clamp<long>(std::lround(min[j] / dmin), 0, 63) : 0);
      const float dl = d * sc[j], ml = dmin * m[j];
      for (int l = 0; l < 32; ++l) {
        const long c = dl > 0 ? std::lround((v[b + 32 * j + l] + ml) / dl) : 0;
        q[32 * j + l] = static_cast<uint8_t>(std::clamp<long>(c, 0, 15));
      }
    }
    AppendF16(&out, d);
    AppendF16(&out, dmin);
    uint8_t scales[12];
    for (int j = 0; j < 4; ++j) {
      scales[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
      scales[j + 4] = (m[j] & 63) | ((m[j + 4] >> 4) << 6);
      scales[j + 8] = (sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4);
    }
    out.append(reinterpret_cast<const char*>(scales), 12);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        out.push_back(
            static_cast<char>(q[64 * c + l] | (q[64 * c + 32 + l] << 4)));
      }
    }
  }
  return out;
}

std::string QuantizeQ6_K(const std::vector<float>& v) {
  std::string out;
  for (size_t b = 0; b < v.size(); b += 256) {
    float scale[16];
    for (int j = 0; j < 16; ++j) {
      float amax = 0;
      for (int l = 0; l < 16; ++l)
        amax = std::max(amax, std::fabs(v[b + 16 * j + l]));
      scale[j] = amax / 31.0f;
    }
    const float d = F16Round(*std::max_element(scale, scale + 16) / 127.0f);
    int8_t sc[16];
    uint8_t q[256];
    for (int j = 0; j < 16; ++j) {
      sc[j] = static_cast<int8_t>(
          d > 0 ? std::clamp<long>(std::lround(scale[j] / d), 0, 127) : 0);
      const float dl = d * sc[j];
      for (int l = 0; l < 16; ++l) {
        const long c = dl > 0 ? std::lround(v[b + 16 * j + l] / dl) : 0;
        q[16 * j + l] = static_cast<uint8_t>(std::clamp<long>(c, -32, 31) + 32);
      }
    }
    uint8_t ql[128] = {}, qh[64] = {};
    for (int n = 0; n < 2; ++n) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t* e = q + 128 * n;
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
