#include "tests/support/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace tensormorph::testing {

uint16_t F32ToF16Bits(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
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
