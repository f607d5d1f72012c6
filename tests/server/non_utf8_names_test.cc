// GGUF files whose tensor names, keys and string values are not UTF-8 (ggml
// accepts any bytes) through a live server: every tensor is listed under its
// escaped spelling (core/util/utf8.h), each listed name reads back through
// every call, metadata keeps its raw bytes, and the server keeps serving.
#include <string>
#include <vector>

#include "client/client.h"
#include "core/util/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/loopback_server.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildGguf;
using ::tensormorph::testing::GgufArray;
using ::tensormorph::testing::GgufSpec;
using ::tensormorph::testing::GgufString;
using ::tensormorph::testing::GgufU32;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;
using ::testing::ElementsAre;

constexpr uint32_t kF32 = 0;
constexpr uint32_t kGgufString = 8;

// F32 tensors of 8 elements, element i of tensor t = t * 10 + i.
GgufSpec F32Tensors(const std::vector<std::string>& names) {
  GgufSpec spec;
  for (size_t t = 0; t < names.size(); ++t) {
    std::string data(32, '\0');
    for (int i = 0; i < 8; ++i) {
      const float v = static_cast<float>(t * 10 + i);
      std::memcpy(&data[4 * i], &v, 4);
    }
    spec.tensors.push_back({names[t], {8}, kF32, data});
  }
  return spec;
}

// Raw names in file order; the bad ones first, in the middle and last, so
// that none is the stream's last message by accident of sorting alone.
const std::vector<std::string> kRawNames = {
    "z.last\xFF",             // escapes to z.last\xFF, sorted last
    "blk.0.\xE3\x81.weight",  // truncated 3-byte sequence
    "a.weight",               // plain
    "blk.0.\xED\xA0\x80",     // a surrogate
    "w\xE3",                  // one invalid byte
    "w\\xE3",                 // the same spelling with a real backslash
};

std::string OddGguf() {
  GgufSpec spec = F32Tensors(kRawNames);
  spec.kv = {
      {"general.architecture", GgufString("llama")},
      {"general.name", GgufString("caf\xE9 model")},
      {"odd.\xC0key", GgufU32(7)},
      {"tokenizer.tokens",
       GgufArray(kGgufString, {GgufString("ok"), GgufString("\xFF\xFE"),
                               GgufString("back\\xslash")})},
  };
  return BuildGguf(spec);
}

class NonUtf8NamesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    WriteFile(dir_ + "/odd.gguf", OddGguf());
    WriteFile(dir_ + "/good.gguf", BuildGguf(F32Tensors({"x"})));
    ClientOptions o;
    o.timeout = absl::Seconds(20);  // a regression fails, never hangs
    loopback_ = testing::StartLoopbackServer({dir_}, 0, o);
    client_ = loopback_.client.get();
  }
  void TearDown() override {
    // The server still serves, another file and the odd one alike.
    auto good = client_->ListTensors("good.gguf");
    ASSERT_TRUE(good.ok()) << good.status();
    EXPECT_EQ(good->size(), 1u);
    EXPECT_TRUE(client_->GetServerInfo().ok());
  }

  std::string dir_;
  testing::LoopbackServer loopback_;
  Client* client_ = nullptr;
};

TEST_F(NonUtf8NamesTest, ListsEveryTensorUnderItsEscapedSpelling) {
  auto tensors = client_->ListTensors("odd.gguf");
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  std::vector<std::string> names;
  for (const v1::TensorInfo& t : *tensors) {
    names.push_back(t.name());
    EXPECT_EQ(t.list_count(), 6);
    EXPECT_TRUE(IsValidUtf8(t.name()));
    EXPECT_EQ(t.parts(0).name(), t.name());
  }
  EXPECT_THAT(names, ElementsAre("a.weight", "blk.0.\\xE3\\x81.weight",
                                 "blk.0.\\xED\\xA0\\x80", "w\\\\xE3", "w\\xE3",
                                 "z.last\\xFF"));
}

TEST_F(NonUtf8NamesTest, EveryListedNameReadsBackThroughEveryCall) {
  auto tensors = client_->ListTensors("odd.gguf");
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), kRawNames.size());
  for (const v1::TensorInfo& t : *tensors) {
    SCOPED_TRACE(t.name());
    // Which file tensor this is: its escaped spelling names one raw name.
    const std::string raw = UnescapeUtf8(t.name());
    const auto it = std::find(kRawNames.begin(), kRawNames.end(), raw);
    ASSERT_NE(it, kRawNames.end());
    const float first = static_cast<float>((it - kRawNames.begin()) * 10);

    v1::ReadSliceRequest r;
    r.set_checkpoint("odd.gguf");
    r.set_tensor(t.name());
    auto data = client_->ReadSliceAll(r);
    ASSERT_TRUE(data.ok()) << data.status();
    ASSERT_EQ(data->floats().size(), 8u);
    EXPECT_EQ(data->floats()[0], first);
    EXPECT_EQ(data->floats()[7], first + 7);

    v1::InspectScalarsRequest q;
    q.set_checkpoint("odd.gguf");
    q.set_tensor(t.name());
    q.add_flat_indices(3);
    auto scalars = client_->InspectScalars(q);
    ASSERT_TRUE(scalars.ok()) << scalars.status();
    EXPECT_EQ(scalars->scalars(0).value(), first + 3);

    // `info TENSOR` lists with the name as a literal glob.
    std::string glob;
    for (char c : t.name()) {
      if (c == '*' || c == '?' || c == '[' || c == '\\') glob += '\\';
      glob += c;
    }
    v1::ListTensorsRequest l;
    l.set_checkpoint("odd.gguf");
    l.set_filter(glob);
    std::vector<std::string> found;
    ASSERT_TRUE(
        client_
            ->ListTensors(
                l, [&](const v1::TensorInfo& f) { found.push_back(f.name()); })
            .ok());
    EXPECT_THAT(found, ElementsAre(t.name()));
  }
}

TEST_F(NonUtf8NamesTest, MetadataIsEscapedWithTheRawBytesBeside) {
  auto info = client_->GetCheckpoint("odd.gguf");
  ASSERT_TRUE(info.ok()) << info.status();
  std::map<std::string, v1::MetadataEntry> by_key;
  for (const v1::MetadataEntry& m : info->metadata()) by_key[m.key()] = m;
  ASSERT_TRUE(by_key.contains("general.name"));
  EXPECT_EQ(by_key["general.name"].value(), "\"caf\\xE9 model\"");
  EXPECT_EQ(by_key["general.name"].raw(), "caf\xE9 model");
  ASSERT_TRUE(by_key.contains("odd.\\xC0key")) << "the key, escaped";
  EXPECT_EQ(by_key["odd.\\xC0key"].value(), "7");
  EXPECT_EQ(by_key["odd.\\xC0key"].raw(), "") << "raw is for strings only";
  EXPECT_EQ(by_key["tokenizer.tokens"].value(),
            "[\"ok\", \"\\xFF\\xFE\", \"back\\\\xslash\"]");

  auto arch = client_->GetArchitecture("odd.gguf");
  ASSERT_TRUE(arch.ok()) << arch.status();
}

TEST_F(NonUtf8NamesTest, RawNamesThatAreDuplicatesAreRefusedWithEscapedNames) {
  WriteFile(dir_ + "/dup.gguf", BuildGguf(F32Tensors({"d\xE3", "d\xE3"})));
  auto info = client_->GetCheckpoint("dup.gguf");
  ASSERT_FALSE(info.ok());
  // The name, escaped: the message is UTF-8 whatever the file holds.
  EXPECT_THAT(info, AllOf(HasReason(ErrorReason::kHeaderInvalid),
                          MessageNames("'d\\xE3'")));
}

TEST_F(NonUtf8NamesTest, TheRawSpellingIsNotANameAndItsRefusalIsUtf8) {
  // A client that sends the raw bytes (which proto3 forbids) is refused,
  // and the refusal, which quotes the request, is valid UTF-8.
  v1::ReadSliceRequest r;
  r.set_checkpoint("odd.gguf");
  r.set_tensor("w\xE3");
  auto data = client_->ReadSliceAll(r);
  ASSERT_FALSE(data.ok());
  EXPECT_TRUE(IsValidUtf8(data.status().message())) << data.status();
}

}  // namespace
}  // namespace tensormorph
