#include "tests/bench/bench_data.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "tests/support/gguf_writer.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph::bench {

std::string WriteDiffPair(int tensors, int64_t rows) {
  using namespace ::tensormorph::testing;
  const std::string dir = MakeTempDir();
  constexpr int64_t kCols = 4096;
  GgufSpec src, q8;
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (int t = 0; t < tensors; ++t) {
    std::vector<float> v(static_cast<size_t>(rows * kCols));
    for (float& x : v) {  // xorshift: fast and deterministic
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      x = (static_cast<float>(state >> 40) / 16777216.0f - 0.5f) * 0.1f;
    }
    const std::string name = "blk." + std::to_string(t) + ".ffn_down.weight";
    src.tensors.push_back({name, {kCols, rows}, 0, ToF32Bytes(v)});
    q8.tensors.push_back({name, {kCols, rows}, 8, QuantizeQ8_0(v)});
  }
  WriteFile(dir + "/source.gguf", BuildGguf(src));
  WriteFile(dir + "/q8_0.gguf", BuildGguf(q8));
  return dir;
}

}  // namespace tensormorph::bench
