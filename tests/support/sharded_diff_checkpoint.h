// A sharded quantized safetensors checkpoint and its sharded source, for
// diffs in parts: tensors of several sizes spread over several shard files,
// plus one tensor of each pairing list (only in the checkpoint, only in the
// source, shapes that differ), so that every part has lists to agree on.
#ifndef TENSORMORPH_TESTS_SUPPORT_SHARDED_DIFF_CHECKPOINT_H_
#define TENSORMORPH_TESTS_SUPPORT_SHARDED_DIFF_CHECKPOINT_H_

#include <string>
#include <vector>

namespace tensormorph::testing {

struct ShardedDiffCheckpoint {
  std::string root;       // serve this
  std::string quant;      // "quant": 4 shards, compressed-tensors int8
  std::string reference;  // "source": 2 shards, BF16
  // The quantized checkpoint's tensors that pair with a source tensor of
  // the same shape, sorted: what a diff compares.
  std::vector<std::string> compared;
  std::string only_in_quant, only_in_reference, shape_mismatch;
};

struct ShardedDiffOptions {
  // Each int8 projection then has the faults of a broken quantizer, so that
  // every part of a diff has excess totals to add up: row 0's scale half
  // what its values need (clipped), one code of row 1 two levels off
  // (not_nearest), row 2's scale 0 (a zeroed group).
  bool quantizer_faults = false;
};

// Writes both under a fresh temporary directory (aborts on failure):
//   quant/model-0000{1..4}-of-00004.safetensors  layer l in shard l+1
//     (q, k, v, o 64x64; gate, up 128x64; down 64x128: I8 per-channel
//     symmetric with a BF16 weight_scale; norms BF16), the embedding,
//     final norm and the odd ones out in shard 4;
//   source/model-0000{1,2}-of-00002.safetensors  every tensor in BF16.
ShardedDiffCheckpoint WriteShardedDiffCheckpoint(
    const ShardedDiffOptions& options = {});

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_SHARDED_DIFF_CHECKPOINT_H_
