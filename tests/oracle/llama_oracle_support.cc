#include "tests/oracle/llama_oracle_support.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "tests/oracle/ggml_oracle.h"
#include "tests/support/gguf_writer.h"

namespace tensormorph::testing {
namespace {

// The HF row of GGUF row `r` of a Q or K matrix of `heads` heads (the
// inverse of convert_hf_to_gguf.py's permute).
int64_t HfRowOf(int64_t r, int64_t rows, int64_t heads) {
  const int64_t hd = rows / heads, h = r / hd, j = r % hd;
  return h * hd + (j % 2) * (hd / 2) + j / 2;
}

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}
template <typename T>
std::string Le(T v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
}

}  // namespace

std::string GgufImatrixFile(const Imatrix& m) {
  GgufSpec spec;
  spec.kv = {{"general.type", GgufString("imatrix")},
             {"imatrix.datasets", GgufArray(8, {GgufString("oracle")})},
             {"imatrix.chunk_count", GgufU32(1)},
             {"imatrix.chunk_size", GgufU32(512)}};
  for (const auto& [name, w] : m) {
    spec.tensors.push_back({name + ".in_sum2",
                            {static_cast<int64_t>(w.size())},
                            0,
                            Floats(w),
                            {},
                            {}});
    spec.tensors.push_back({name + ".counts", {1}, 0, Floats({1}), {}, {}});
  }
  return BuildGguf(spec);
}

std::string LegacyImatrixFile(const Imatrix& m) {
  std::string out = Le<int32_t>(static_cast<int32_t>(m.size()));
  for (const auto& [name, w] : m) {
    out += Le<int32_t>(static_cast<int32_t>(name.size())) + name;
    out += Le<int32_t>(1) + Le<int32_t>(static_cast<int32_t>(w.size()));
    out += Floats(w);
  }
  return out;
}

const LlamaQuantizer& SharedLlamaQuantizer() {
  static const LlamaQuantizer* q = [] {
    GgmlOracle::Shared();  // ggml-base first, so that libllama shares it
    auto loaded = LlamaQuantizer::Load();
    if (!loaded.ok()) {
      ADD_FAILURE() << loaded.status();
      std::abort();
    }
    return loaded->release();
  }();
  return *q;
}

int64_t GgmlRowBytes(uint32_t type, int64_t ne0) {
  const auto info = GgmlOracle::Shared().Type(static_cast<int>(type));
  if (!info || ne0 % info->block_elems != 0) return -1;
  return ne0 / info->block_elems * info->block_bytes;
}

std::vector<float> GgmlValues(uint32_t type, absl::Span<const uint8_t> data) {
  if (type == 0) {
    std::vector<float> v(data.size() / 4);
    std::memcpy(v.data(), data.data(), data.size());
    return v;
  }
  auto v = GgmlOracle::Shared().ToFloat(static_cast<int>(type), data);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *std::move(v) : std::vector<float>();
}

std::vector<double> SourceInGgufOrder(const LlamaTestWeight& w) {
  std::vector<double> out(w.values.begin(), w.values.end());
  const bool q = w.gguf_name.find(".attn_q.") != std::string::npos;
  const bool k = w.gguf_name.find(".attn_k.") != std::string::npos;
  if (!q && !k) return out;
  const int64_t rows = w.shape[0], cols = w.shape[1];
  const int64_t heads = q ? LlamaTestDims::kHeads : LlamaTestDims::kKvHeads;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t hf = HfRowOf(r, rows, heads);
    for (int64_t c = 0; c < cols; ++c) {
      out[r * cols + c] = w.values[hf * cols + c];
    }
  }
  return out;
}

}  // namespace tensormorph::testing
