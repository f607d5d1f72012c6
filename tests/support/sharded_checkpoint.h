// A sharded safetensors checkpoint with a quantization convention, and
// copies of it that hold some of its shards: what servers run with
// --partial-shards serve, each its own part.
#ifndef TENSORMORPH_TESTS_SUPPORT_SHARDED_CHECKPOINT_H_
#define TENSORMORPH_TESTS_SUPPORT_SHARDED_CHECKPOINT_H_

#include <string>
#include <vector>

namespace tensormorph::testing {

struct ShardedCheckpoint {
  std::string dir;  // the whole checkpoint: index, configs, every shard
  // The shard file names, in name order.
  std::vector<std::string> shards;
};

// Writes into a fresh temporary directory a GPTQ checkpoint (the fixture
// gptq_4bit_g32's two modules and configs) with plain F16 and F32 tensors,
// in three shards, each module's qweight, qzeros, scales and g_idx in one:
//   model-00001-of-00003.safetensors  embed_tokens (F16), mlp.down_proj
//   model-00002-of-00003.safetensors  self_attn.q_proj, input_layernorm (F32)
//   model-00003-of-00003.safetensors  model.norm (F32), lm_head (F16)
// Each shard has its own __metadata__. Aborts when it cannot be written.
ShardedCheckpoint WriteShardedGptq();

// Copies `c`'s index and configs, and of its shards those in `keep`, into
// `dir` (created): one server's part of the checkpoint.
void CopyShards(const ShardedCheckpoint& c,
                const std::vector<std::string>& keep, const std::string& dir);

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_SHARDED_CHECKPOINT_H_
