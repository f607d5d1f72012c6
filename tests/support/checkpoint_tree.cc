#include "tests/support/checkpoint_tree.h"

#include <filesystem>
#include <fstream>

#include "tests/support/fixture_copy.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph::testing {

namespace fs = std::filesystem;

CheckpointTree MakeCheckpointTree() {
  const fs::path top = MakeTempDir();
  CheckpointTree t;
  t.root = (top / "root").string();
  t.outside = (top / "outside").string();
  const fs::path root = t.root;
  fs::create_directories(root / "models" / "gptq");
  fs::create_directories(root / "models" / "sharded");
  fs::create_directories(root / "models" / "split");
  fs::create_directories(root / "deep/d1/d2/d3/d4");
  fs::create_directories(t.outside);
  auto gguf = [](const std::string& type) {
    return Fixture("gguf/" + type + ".gguf");
  };
  fs::copy_file(gguf("Q4_K"), root / "Q4_K.gguf");
  fs::copy_file(gguf("Q8_0"), root / "models/Q8_0.gguf");
  for (int i = 0; i < 2; ++i) {  // one tensor per split
    GgufSpec s;
    s.kv.push_back({"general.architecture", GgufString("llama")});
    s.kv.push_back({"split.no", GgufU16(static_cast<uint16_t>(i))});
    s.kv.push_back({"split.count", GgufU16(2)});
    s.tensors.push_back(
        {"t" + std::to_string(i), {4}, 0, std::string(16, '\0')});
    std::ofstream(root / ("models/split/m-0000" + std::to_string(i + 1) +
                          "-of-00002.gguf"),
                  std::ios::binary)
        << BuildGguf(s);
  }
  fs::copy_file(gguf("Q4_0"), root / "deep/d1/d2/d3/x.gguf");
  fs::copy_file(gguf("Q5_0"), root / "deep/d1/d2/d3/d4/y.gguf");
  fs::copy_file(gguf("F32"), fs::path(t.outside) / "F32.gguf");
  CopyFixtureInto("gptq_4bit_g32", (root / "models/gptq").string());
  CopyFixtureInto("fp8_block_sharded", (root / "models/sharded").string());
  fs::create_directory_symlink("../outside", root / "escape");
  fs::create_symlink("../outside/F32.gguf", root / "escape_file.gguf");
  fs::create_symlink("models/Q8_0.gguf", root / "inside_link.gguf");
  fs::create_directory_symlink(".", root / "loop");
  fs::create_directory_symlink("..", root / "models/up");
  t.expected = {"Q4_K.gguf",
                "deep/d1/d2/d3/x.gguf",  // after d4/ when that is reached
                "inside_link.gguf",
                "models/Q8_0.gguf",
                "models/gptq",
                "models/sharded",
                "models/split/m-00001-of-00002.gguf"};
  t.deep = "deep/d1/d2/d3/d4/y.gguf";
  return t;
}

}  // namespace tensormorph::testing
