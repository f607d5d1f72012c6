#include "tests/support/many_shards.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/support/safetensors_writer.h"

namespace tensormorph::testing {

void WriteManyShards(const std::string& dir, int shards) {
  std::string weight_map;
  for (int s = 0; s < shards; ++s) {
    const std::string file =
        absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, shards);
    std::vector<StTensor> tensors;
    for (int k = 0; k < 3; ++k) {
      const std::string name = absl::StrCat("layers.", s, ".w", k);
      std::vector<float> v(1024, static_cast<float>(s + k));
      tensors.push_back({name, "F32", {32, 32}, Bytes(v)});
      absl::StrAppend(&weight_map, weight_map.empty() ? "" : ",", "\"", name,
                      "\":\"", file, "\"");
    }
    WriteFile(dir + "/" + file, BuildSafetensors(tensors));
  }
  WriteFile(
      dir + "/model.safetensors.index.json",
      absl::StrCat("{\"metadata\":{},\"weight_map\":{", weight_map, "}}"));
}

}  // namespace tensormorph::testing
