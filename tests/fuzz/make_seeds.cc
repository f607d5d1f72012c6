// Writes seed corpora for the fuzz targets from the project's writers and
// the shared fixtures: make_seeds OUT_DIR FIXTURES_DIR.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "tests/support/gguf_writer.h"
#include "tests/support/safetensors_writer.h"

namespace fs = std::filesystem;
using namespace tensormorph::testing;  // NOLINT: a tool's main

static std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: make_seeds OUT_DIR FIXTURES_DIR\n";
    return 1;
  }
  const fs::path out = argv[1], fixtures = argv[2];
  for (const char* t :
       {"safetensors", "gguf", "conventions", "config", "slice", "service"}) {
    fs::create_directories(out / t);
  }
  int n = 0;
  auto seed_service = [&](char selector, const std::string& bytes) {
    WriteFile((out / "service" / ("seed" + std::to_string(n++))).string(),
              selector + bytes);
  };
  // The service fuzzer takes the same files behind a selector byte: 0 GGUF,
  // 1 safetensors, 2 config.json NUL model.safetensors. The config fuzzer
  // starts from the conventions pairs.
  auto seed = [&](const std::string& target, const std::string& bytes) {
    WriteFile((out / target / ("seed" + std::to_string(n++))).string(), bytes);
    const std::string t = target;
    if (t == "gguf") seed_service('\0', bytes);
    if (t == "safetensors") seed_service('\1', bytes);
    if (t == "conventions") {
      seed_service('\2', bytes);
      WriteFile((out / "config" / ("seed" + std::to_string(n++))).string(),
                bytes);
    }
  };
  seed("safetensors",
       BuildSafetensors({{"a", "F32", {2, 2}, std::string(16, '\1')},
                         {"b", "F4", {4}, "xy"},
                         {"c", "F8_E4M3", {3}, "abc"}}));
  GgufSpec g;
  g.kv.push_back({"general.architecture", GgufString("llama")});
  g.kv.push_back({"arr", GgufArray(8, {GgufString("x"), GgufString("yz")})});
  g.tensors.push_back({"t", {32, 2}, 8, std::string(68, '\2')});
  seed("gguf", BuildGguf(g));
  for (const auto& e : fs::recursive_directory_iterator(fixtures)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".gguf") seed("gguf", Slurp(e.path()));
    if (e.path().extension() == ".safetensors")
      seed("safetensors", Slurp(e.path()));
    if (name == "config.json") {
      const fs::path model = e.path().parent_path() / "model.safetensors";
      if (fs::exists(model))
        seed("conventions", Slurp(e.path()) + '\0' + Slurp(model));
    }
  }
  for (const char* s : {"\x02\x04\x08"
                        "0:4, ::2",
                        "\x03\x01\x02\x03"
                        "..., -1",
                        "\x01\x10"
                        "::-3"}) {
    seed("slice", s);
  }
  std::cout << n << " seeds written to " << out << "\n";
  return 0;
}
