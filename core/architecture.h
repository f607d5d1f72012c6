// The module tree of a checkpoint, built from its tensor names, with the
// quantization-boundary overlay: a node is a boundary when its scheme
// differs from its parent's majority.
#ifndef TENSORMORPH_CORE_ARCHITECTURE_H_
#define TENSORMORPH_CORE_ARCHITECTURE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/format/checkpoint.h"

namespace tensormorph {

struct ArchNode {
  std::string name;  // this segment ("q_proj", "3", "blk")
  std::string path;  // dotted path from the root ("model.layers.3")
  int64_t params = 0;
  int64_t bytes = 0;
  int64_t tensors = 0;
  std::map<std::string, int64_t> scheme_params;  // scheme -> parameters
  std::string scheme;  // the majority by parameters ("mixed" never: a tie takes
                       // the first)
  bool boundary = false;
  std::vector<ArchNode> children;  // in name order, numbers numerically
};

// Dotted names split on '.'; a tensor's last segment ("weight", "bias")
// is a leaf of its module.
ArchNode BuildArchitecture(const Checkpoint& ckpt);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_ARCHITECTURE_H_
