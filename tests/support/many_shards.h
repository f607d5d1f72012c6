// A safetensors checkpoint of many small shards (three F32 [32, 32] tensors
// each, "layers.S.wK") and its index: what a listing of a 280-shard
// checkpoint costs, in tests and benchmarks.
#ifndef TENSORMORPH_TESTS_SUPPORT_MANY_SHARDS_H_
#define TENSORMORPH_TESTS_SUPPORT_MANY_SHARDS_H_

#include <string>

namespace tensormorph::testing {

// Writes `shards` shards named model-0000S-of-0000N.safetensors and
// model.safetensors.index.json into `dir` (which must exist).
void WriteManyShards(const std::string& dir, int shards);

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_MANY_SHARDS_H_
