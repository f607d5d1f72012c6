#include "tests/support/sharded_checkpoint.h"

#include <filesystem>
#include <map>

#include "nlohmann/json.hpp"
#include "tests/support/fixture_copy.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph::testing {
namespace {

namespace fs = std::filesystem;

std::string F16Bytes(const std::vector<float>& v) {
  std::vector<uint16_t> h;
  h.reserve(v.size());
  for (float f : v) h.push_back(F32ToF16Bits(f));
  return Bytes(h);
}

}  // namespace

ShardedCheckpoint WriteShardedGptq() {
  // The fixture's tensors, read by an edit that changes nothing.
  const std::string copy = CopyFixtureTensors("gptq_4bit_g32");
  std::vector<StTensor> gptq;
  EditSafetensors(copy + "/model.safetensors",
                  [&](std::vector<StTensor>& t) { gptq = t; });
  ShardedCheckpoint c;
  c.dir = MakeTempDir();
  CopyFixtureInto("gptq_4bit_g32", c.dir);
  fs::remove(c.dir + "/model.safetensors");
  c.shards = {"model-00001-of-00003.safetensors",
              "model-00002-of-00003.safetensors",
              "model-00003-of-00003.safetensors"};
  std::vector<std::vector<StTensor>> shards(3);
  shards[0].push_back({"model.embed_tokens.weight",
                       "F16",
                       {16, 8},
                       F16Bytes(Gaussian(16 * 8, 1))});
  for (const StTensor& t : gptq) {
    const bool mlp = t.name.rfind("model.layers.0.mlp.", 0) == 0;
    shards[mlp ? 0 : 1].push_back(t);
  }
  shards[1].push_back({"model.layers.0.input_layernorm.weight",
                       "F32",
                       {64},
                       ToF32Bytes(Gaussian(64, 2))});
  shards[2].push_back(
      {"model.norm.weight", "F32", {64}, ToF32Bytes(Gaussian(64, 3))});
  shards[2].push_back(
      {"lm_head.weight", "F16", {16, 64}, F16Bytes(Gaussian(16 * 64, 4))});
  nlohmann::json index = {{"metadata", {{"total_size", 0}}},
                          {"weight_map", nlohmann::json::object()}};
  for (size_t i = 0; i < shards.size(); ++i) {
    for (const StTensor& t : shards[i]) {
      index["weight_map"][t.name] = c.shards[i];
    }
    WriteFile(c.dir + "/" + c.shards[i],
              BuildSafetensors(shards[i], {{"format", "pt"},
                                           {"shard", std::to_string(i + 1)}}));
  }
  WriteJson(c.dir + "/model.safetensors.index.json", index);
  return c;
}

void CopyShards(const ShardedCheckpoint& c,
                const std::vector<std::string>& keep, const std::string& dir) {
  fs::create_directories(dir);
  for (const fs::directory_entry& e : fs::directory_iterator(c.dir)) {
    const std::string name = e.path().filename().string();
    const bool shard = name.size() > 12 &&
                       name.compare(name.size() - 12, 12, ".safetensors") == 0;
    if (shard && std::find(keep.begin(), keep.end(), name) == keep.end()) {
      continue;
    }
    fs::copy_file(e.path(), fs::path(dir) / name,
                  fs::copy_options::overwrite_existing);
  }
}

}  // namespace tensormorph::testing
