// tensormorph-make-demo DIR: writes the demo checkpoints the quick start
// tours (see tests/support/demo_checkpoint.h).
#include <cstdio>
#include <string>

#include "tests/support/demo_checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr,
                 "usage: %s DIR\n  writes a small llama-shaped model: BF16 "
                 "source, int8 safetensors and Q8_0 GGUF\n",
                 argv[0]);
    return 1;
  }
  // The checkpoints, and an importance matrix of their weights for `diff
  // --imatrix` (docs/cli.md).
  if (!tensormorph::testing::WriteDemoCheckpoints(argv[1]) ||
      !tensormorph::testing::WriteDemoImatrix(std::string(argv[1]) +
                                              "/imatrix.dat")) {
    std::fprintf(stderr, "cannot write the demo into %s\n", argv[1]);
    return 2;
  }
  std::printf("demo checkpoints written to %s\n", argv[1]);
  return 0;
}
