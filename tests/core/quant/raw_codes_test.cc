// RawCodes (and CodesOfElements beneath it) against Inspect's
// code_bits_value, element by element: ggml types unpacked a block at a
// time, conventions' code matrices a tile at a time, and the rest through
// the per-element default; spans starting and ending inside blocks.
#include "core/quant/raw_codes.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/format/checkpoint.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::Fixture;

void ExpectCodesAsInspect(const LogicalTensor& t, int64_t first,
                          int64_t count) {
  std::vector<uint8_t> codes(static_cast<size_t>(count));
  ASSERT_TRUE(t.encoding->RawCodes(first, count, codes.data()).ok());
  for (int64_t i = 0; i < count; ++i) {
    ScalarInfo s;
    ASSERT_TRUE(t.encoding->Inspect(first + i, &s).ok());
    ASSERT_EQ(codes[i], static_cast<uint8_t>(s.code_bits_value))
        << t.name << " element " << first + i;
  }
}

TEST(RawCodesTest, EveryFixtureFormatGivesInspectsCodes) {
  struct Case {
    const char* fixture;
    const char* tensor;
  };
  const Case cases[] = {
      {"gguf/Q4_0.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q4_1.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q5_0.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q8_0.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q2_K.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q4_K.gguf", "blk.0.ffn_down.weight"},
      {"gguf/Q5_K.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q6_K.gguf", "blk.0.attn_q.weight"},
      {"gguf/IQ4_NL.gguf", "blk.0.attn_q.weight"},
      {"gguf/TQ1_0.gguf", "blk.0.attn_q.weight"},
      {"safetensors/gptq_4bit_g32", "model.layers.0.self_attn.q_proj.weight"},
      {"safetensors/gptq_4bit_g32_actorder",
       "model.layers.0.self_attn.q_proj.weight"},
      {"safetensors/awq_4bit_g32", "model.layers.0.self_attn.q_proj.weight"},
      {"safetensors/ct_w4a16_group", "model.layers.0.self_attn.q_proj.weight"},
      {"safetensors/fp8_block_sharded", "model.layers.0.mlp.down_proj.weight"},
  };
  std::mt19937 rng(5);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.fixture);
    auto ckpt = Checkpoint::Open(Fixture(c.fixture));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    const LogicalTensor* t = (*ckpt)->FindTensor(c.tensor);
    ASSERT_NE(t, nullptr);
    ExpectCodesAsInspect(*t, 0, t->num_elements);
    // Spans from and to the middle of blocks and rows.
    for (int k = 0; k < 20; ++k) {
      const int64_t first = rng() % t->num_elements;
      const int64_t count = rng() % (t->num_elements - first) + 1;
      ExpectCodesAsInspect(*t, first, std::min<int64_t>(count, 3000));
    }
  }
}

}  // namespace
}  // namespace tensormorph
