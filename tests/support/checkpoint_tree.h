// A directory tree of checkpoints to browse: nested directories, a sharded
// safetensors directory, a split GGUF, symlinks inside the root, escaping
// it and looping back, and a checkpoint past the default depth.
#ifndef TENSORMORPH_TESTS_SUPPORT_CHECKPOINT_TREE_H_
#define TENSORMORPH_TESTS_SUPPORT_CHECKPOINT_TREE_H_

#include <string>
#include <vector>

namespace tensormorph::testing {

struct CheckpointTree {
  std::string root;     // served as the only root
  std::string outside;  // beside the root, with a GGUF the symlinks reach
  // What a listing of the root at the default depth (4) finds, in order.
  std::vector<std::string> expected;
  // Found only with max_depth >= 5.
  std::string deep;
};

// Builds the tree in a fresh temporary directory:
//   root/Q4_K.gguf                         gguf, 3 tensors
//   root/deep/d1/d2/d3/x.gguf              depth 4: found by default
//   root/deep/d1/d2/d3/d4/y.gguf           depth 5: past the default
//   root/escape -> ../outside              leads out: never followed
//   root/escape_file.gguf -> ../outside/F32.gguf   leads out: not listed
//   root/inside_link.gguf -> models/Q8_0.gguf      inside: listed
//   root/loop -> .                         back into the tree: not followed
//   root/models/Q8_0.gguf
//   root/models/gptq/                      model.safetensors + configs
//   root/models/sharded/                   index + 2 shards (5 tensors)
//   root/models/split/m-0000{1,2}-of-00002.gguf    one checkpoint, 2 files
//   root/models/up -> ..                   a loop
CheckpointTree MakeCheckpointTree();

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_CHECKPOINT_TREE_H_
