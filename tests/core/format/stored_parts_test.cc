// Stored parts: every stored tensor of every convention fixture is a plain
// tensor of its own, found by its name, whose raw read is exactly the bytes
// the file's header places it at; and the lookup rule that decides between
// a logical tensor and a part of the same name.
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "core/format/checkpoint.h"
#include "core/raw_slice.h"
#include "core/slice.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::ReadFileBytes;

const char* const kConventionFixtures[] = {
    "gptq_4bit_g32",     "gptq_4bit_g32_actorder", "awq_4bit_g32",
    "ct_int8_channel",   "ct_int8_tensor_asym",    "ct_w4a16_group",
    "fp8_block_sharded", "mxfp4_gptoss",           "bnb_nf4",
};

// A tensor's bytes as the file's own header places them, read without the
// project's parser: [8 + header length + data_offsets[0], ... [1]).
struct HeaderEntry {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
std::map<std::string, HeaderEntry> ReadHeader(const std::string& path) {
  const std::string file = ReadFileBytes(path);
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  const auto header = nlohmann::json::parse(file.substr(8, n));
  std::map<std::string, HeaderEntry> out;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") continue;
    const uint64_t begin = v["data_offsets"][0], end = v["data_offsets"][1];
    out[name] = {v["dtype"], v["shape"].get<std::vector<int64_t>>(),
                 file.substr(8 + n + begin, end - begin)};
  }
  return out;
}

std::string RawBytes(const LogicalTensor& t) {
  auto slice = ResolveSlice(*ParseSlice(""), t.shape);
  EXPECT_TRUE(slice.ok()) << slice.status();
  auto reader = RawSliceReader::Create(t, *std::move(slice));
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return "";
  std::string out;
  reader->Read(0, reader->slice().num_elements, &out);
  return out;
}

class StoredPartsTest : public ::testing::TestWithParam<const char*> {};

TEST_P(StoredPartsTest, EveryStoredTensorReadsRawAsTheFileStoresIt) {
  const std::string dir = Fixture(std::string("safetensors/") + GetParam());
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::map<std::string, HeaderEntry> files;
  for (const Checkpoint::File& f : (*ckpt)->files()) {
    for (auto& [name, e] : ReadHeader(f.path)) files[name] = std::move(e);
  }
  // Every part a logical tensor lists is a stored tensor of the checkpoint.
  int listed = 0;
  for (const LogicalTensor& t : (*ckpt)->tensors()) {
    for (const StoredTensor* p : t.encoding->parts()) {
      ++listed;
      EXPECT_EQ((*ckpt)->FindPart(p->name), (*ckpt)->Lookup(p->name, true));
      ASSERT_NE((*ckpt)->FindPart(p->name), nullptr) << p->name;
    }
  }
  EXPECT_GT(listed, 0);
  ASSERT_EQ(files.size(), (*ckpt)->stored_tensors().size());
  for (const auto& [name, want] : files) {
    SCOPED_TRACE(name);
    const LogicalTensor* part = (*ckpt)->Lookup(name, /*part=*/true);
    ASSERT_NE(part, nullptr);
    EXPECT_EQ(part->name, name);
    EXPECT_EQ(part->shape, want.shape);
    // A plain tensor of its stored dtype, stored in one piece: itself.
    EXPECT_EQ(part->encoding->info().scheme, want.dtype);
    EXPECT_FALSE(part->encoding->info().quantized);
    ASSERT_EQ(part->encoding->parts().size(), 1u);
    EXPECT_EQ(part->encoding->parts()[0], (*ckpt)->FindStored(name));
    EXPECT_EQ(RawBytes(*part), want.bytes);
    // A name no logical tensor has finds the part without asking for it.
    if ((*ckpt)->FindTensor(name) == nullptr) {
      EXPECT_EQ((*ckpt)->Lookup(name, /*part=*/false), part);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryConventionFixture, StoredPartsTest,
                         ::testing::ValuesIn(kConventionFixtures),
                         [](const auto& info) {
                           return std::string(info.param);
                         });

TEST(StoredPartsLookupTest, ALogicalTensorWinsItsNameAndPartAsksForTheCodes) {
  auto ckpt = Checkpoint::Open(Fixture("safetensors/ct_int8_channel"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const std::string name = "model.layers.0.mlp.down_proj.weight";
  const LogicalTensor* logical = (*ckpt)->Lookup(name, /*part=*/false);
  ASSERT_NE(logical, nullptr);
  EXPECT_EQ(logical, (*ckpt)->FindTensor(name));
  EXPECT_TRUE(logical->encoding->info().quantized);
  const LogicalTensor* codes = (*ckpt)->Lookup(name, /*part=*/true);
  ASSERT_NE(codes, nullptr);
  EXPECT_NE(codes, logical);
  EXPECT_EQ(codes->encoding->info().scheme, "I8");
  // The codes decode to themselves: plain integers.
  ScalarInfo s;
  ASSERT_TRUE(codes->encoding->Inspect(0, &s).ok());
  EXPECT_EQ(s.value, static_cast<float>(static_cast<int8_t>(
                         (*ckpt)->FindStored(name)->data[0])));
  EXPECT_EQ((*ckpt)->Lookup("no.such.tensor", false), nullptr);
  EXPECT_EQ((*ckpt)->Lookup("no.such.tensor", true), nullptr);
}

TEST(StoredPartsLookupTest, APlainOrGgufTensorIsItsOwnPart) {
  for (const std::string& path :
       {Fixture("safetensors/plain"), Fixture("gguf/Q4_K.gguf")}) {
    SCOPED_TRACE(path);
    auto ckpt = Checkpoint::Open(path);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    ASSERT_EQ((*ckpt)->parts().size(), (*ckpt)->stored_tensors().size());
    for (const LogicalTensor& t : (*ckpt)->tensors()) {
      EXPECT_EQ((*ckpt)->FindPart(t.name), &t) << t.name;
      EXPECT_EQ((*ckpt)->Lookup(t.name, true), &t) << t.name;
    }
  }
}

}  // namespace
}  // namespace tensormorph
