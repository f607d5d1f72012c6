// The document-free header pass reads real headers exactly as a JSON document
// states them, and declines (so the document path can say what is wrong)
// every header outside the usual shape.
#include "core/format/safetensors_fast_header.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;

std::optional<SafetensorsHeaderEntries> Read(const std::string& json) {
  return ReadSafetensorsHeaderFast(json, 16, uint64_t{1} << 48, 4096);
}

std::string HeaderOf(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return bytes.substr(8, n);
}

TEST(SafetensorsFastHeaderTest, ReadsEveryRealHeaderAsItsDocumentSaysIt) {
  int files = 0;
  for (const fs::path& root :
       {fs::path(testing::FixturesDir()), fs::path(testing::DemoDir())}) {
    for (const auto& f : fs::recursive_directory_iterator(root)) {
      if (f.path().extension() != ".safetensors") continue;
      SCOPED_TRACE(f.path().string());
      const std::string text = HeaderOf(f.path());
      const auto fast = Read(text);
      ASSERT_TRUE(fast.has_value());
      const auto doc = nlohmann::json::parse(text);
      size_t tensors = 0, metadata = 0;
      for (const auto& [name, info] : doc.items()) {
        if (name == "__metadata__") {
          for (const auto& [k, v] : info.items()) {
            ASSERT_LT(metadata, fast->metadata.size());
            EXPECT_EQ(fast->metadata[metadata].first, k);  // sorted by key
            EXPECT_EQ(fast->metadata[metadata].second, v.get<std::string>());
            ++metadata;
          }
          continue;
        }
        const auto it = std::find_if(
            fast->entries.begin(), fast->entries.end(),
            [&](const SafetensorsEntry& e) { return e.tensor.name == name; });
        ASSERT_NE(it, fast->entries.end()) << name;
        EXPECT_EQ(it->tensor.dtype,
                  *DTypeFromSafetensorsName(info["dtype"].get<std::string>()));
        EXPECT_EQ(it->tensor.shape, info["shape"].get<std::vector<int64_t>>());
        EXPECT_EQ(it->begin, info["data_offsets"][0].get<uint64_t>());
        EXPECT_EQ(it->end, info["data_offsets"][1].get<uint64_t>());
        ++tensors;
      }
      EXPECT_EQ(fast->entries.size(), tensors);
      EXPECT_EQ(fast->metadata.size(), metadata);
      ++files;
    }
  }
  EXPECT_GT(files, 10);
}

TEST(SafetensorsFastHeaderTest, ReadsTheUsualShape) {
  const auto h =
      Read(R"({"__metadata__":{"z":"1","a":"2"},)"
           R"("w":{"shape":[2,3],"dtype":"BF16","data_offsets":[0,12]},)"
           R"("b":{"dtype":"F32","shape":[],"data_offsets":[12,16]}})");
  ASSERT_TRUE(h.has_value());
  ASSERT_EQ(h->entries.size(), 2u);
  EXPECT_EQ(h->entries[0].tensor.name, "w");
  EXPECT_EQ(h->entries[0].tensor.dtype, DType::kBF16);
  EXPECT_EQ(h->entries[0].tensor.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h->entries[0].end, 12u);
  EXPECT_TRUE(h->entries[1].tensor.shape.empty());
  EXPECT_EQ(h->metadata, (std::vector<std::pair<std::string, std::string>>{
                             {"a", "2"}, {"z", "1"}}));
  EXPECT_TRUE(Read("{}").has_value());
}

TEST(SafetensorsFastHeaderTest, DeclinesEverythingElse) {
  const std::string ok_entry =
      R"("dtype":"F32","shape":[1],"data_offsets":[0,4])";
  const char* cases[] = {
      R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})",
      R"({"t":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})",
      R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
      R"({"t":{"dtype":"F32","shape":[281474976710657],"data_offsets":[0,4]}})",
      R"({"t":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})",
      R"({"t":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})",
      R"({"t":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})",
      R"({"t":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
      R"({"t":{"dtype":"F32","shape":[1]}})",
      R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})",
      R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0]}})",
      R"({"t":{"dtype":"Q9","shape":[1],"data_offsets":[0,4]}})",
      R"({"t":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})",
      R"({"t":{"dtype":null,"shape":[1],"data_offsets":[0,4]}})",
      R"({"t":[1]})",
      R"({"t":"x"})",
      R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
      R"({"__metadata__":{"a":1}})",
      R"({"__metadata__":{"a":{"b":"c"}}})",
      R"({"__metadata__":{"a":"1","a":"2"}})",
      R"({"__metadata__":{},"__metadata__":{}})",
      R"({"__metadata__":"x"})",
      R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})",
      R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}} x)",
      "{\"\xff\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
  };
  for (const char* c : cases) EXPECT_FALSE(Read(c).has_value()) << c;
  EXPECT_FALSE(Read("{\"" + std::string(4097, 'n') + "\":{" + ok_entry + "}}")
                   .has_value());
  EXPECT_TRUE(Read("{\"" + std::string(4096, 'n') + "\":{" + ok_entry + "}}")
                  .has_value());
}

}  // namespace
}  // namespace tensormorph
