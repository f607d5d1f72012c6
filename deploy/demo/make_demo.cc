// tensormorph-make-demo DIR: writes the demo checkpoints the quick start
// tours (see tests/support/demo_checkpoint.h).
#include <cstdio>
#include <cstring>
#include <string>

#include "tests/support/demo_checkpoint.h"

namespace {

void PrintUsage(std::FILE* out, const char* self) {
  std::fprintf(out,
               "usage: %s [--] DIR\n"
               "  writes a small llama-shaped model into DIR: BF16 source, "
               "int8 safetensors,\n"
               "  Q8_0, F32 and Q4_K_M-like GGUF, and an importance matrix "
               "(imatrix.dat)\n"
               "  -h, --help  this text\n",
               self);
}

}  // namespace

int main(int argc, char** argv) {
  // A DIR that starts with '-' follows "--": an option misspelt (or --help
  // on an older build) must not become a directory of that name.
  int first = 1;
  if (argc >= 2 && (std::strcmp(argv[1], "-h") == 0 ||
                    std::strcmp(argv[1], "--help") == 0)) {
    PrintUsage(stdout, argv[0]);
    return 0;
  }
  if (argc >= 2 && std::strcmp(argv[1], "--") == 0) {
    first = 2;
  } else if (argc >= 2 && argv[1][0] == '-') {
    std::fprintf(stderr, "%s: unknown option '%s'\n", argv[0], argv[1]);
    PrintUsage(stderr, argv[0]);
    return 1;
  }
  if (argc != first + 1) {
    PrintUsage(stderr, argv[0]);
    return 1;
  }
  const std::string dir = argv[first];
  // The checkpoints, and an importance matrix of their weights for `diff
  // --imatrix` (docs/cli.md).
  if (!tensormorph::testing::WriteDemoCheckpoints(dir) ||
      !tensormorph::testing::WriteDemoImatrix(dir + "/imatrix.dat")) {
    std::fprintf(stderr, "cannot write the demo into %s\n", dir.c_str());
    return 2;
  }
  std::printf("demo checkpoints written to %s\n", dir.c_str());
  return 0;
}
