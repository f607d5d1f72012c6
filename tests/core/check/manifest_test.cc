// Manifests: written from the stored bytes, parsed with every field checked,
// and compared tensor by tensor, naming each that differs, is missing or is
// extra.
#include "core/check/manifest.h"

#include "core/check/check.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/check_cases.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using testing::HasReason;
using ::testing::HasSubstr;
using testing::MessageNames;

std::vector<ManifestEntry> Hashes(const std::string& path) {
  auto ckpt = Checkpoint::Open(path);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  std::vector<ManifestEntry> out;
  CheckOptions o;
  o.hashes = true;
  EXPECT_TRUE(CheckCheckpoint(**ckpt, o, nullptr, nullptr, nullptr,
                              [&](const ManifestEntry& e) { out.push_back(e); })
                  .ok());
  return out;
}

std::vector<Finding> Verify(const std::string& path,
                            const std::vector<ManifestEntry>& manifest) {
  auto ckpt = Checkpoint::Open(path);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  CheckOptions o;
  o.verify = manifest;
  std::vector<Finding> out;
  EXPECT_TRUE(
      CheckCheckpoint(**ckpt, o, nullptr, nullptr, [&](const Finding& f) {
        if (f.rule == "manifest-mismatch") out.push_back(f);
      }).ok());
  return out;
}

TEST(ManifestTest, RoundTripsThroughItsJson) {
  const std::string dir = testing::WriteCleanCheckCheckpoint();
  std::vector<ManifestEntry> written = Hashes(dir);
  ASSERT_EQ(written.size(), 3u);
  EXPECT_EQ(written[0].file, "model.safetensors");
  auto parsed = ParseManifest(ManifestJson(written));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), written.size());
  for (size_t i = 0; i < written.size(); ++i) {
    EXPECT_EQ((*parsed)[i].name, written[i].name);
    EXPECT_EQ((*parsed)[i].hash, written[i].hash);
    EXPECT_EQ((*parsed)[i].offset, written[i].offset);
    EXPECT_EQ((*parsed)[i].size, written[i].size);
    EXPECT_EQ((*parsed)[i].dtype, written[i].dtype);
  }
  EXPECT_TRUE(Verify(dir, *parsed).empty());
}

TEST(ManifestTest, AOneByteChangeInACopyIsCaughtAndNamed) {
  const std::string dir = testing::WriteCleanCheckCheckpoint();
  std::vector<ManifestEntry> manifest = Hashes(dir);
  const ManifestEntry* scale = nullptr;
  for (const ManifestEntry& e : manifest) {
    if (e.name == testing::kCheckScale) scale = &e;
  }
  ASSERT_NE(scale, nullptr);
  const std::string copy = testing::MakeTempDir();
  std::string bytes = testing::ReadFileBytes(dir + "/model.safetensors");
  bytes[scale->offset + 1] ^= 0x01;
  testing::WriteFile(copy + "/model.safetensors", bytes);
  std::vector<Finding> found = Verify(copy, manifest);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].tensor, testing::kCheckScale);
  EXPECT_EQ(found[0].severity, Severity::kError);
  EXPECT_EQ(found[0].file, copy + "/model.safetensors");
  EXPECT_THAT(found[0].expected, HasSubstr(HashHex(scale->hash)));
  EXPECT_THAT(found[0].actual, ::testing::Not(HasSubstr(HashHex(scale->hash))));
}

TEST(ManifestTest, MissingAndExtraTensorsAreNamed) {
  std::vector<float> v(8, 1.5f);
  const std::string a = testing::MakeTempDir(), b = testing::MakeTempDir();
  testing::WriteFile(
      a + "/m.safetensors",
      testing::BuildSafetensors(
          {{"kept", "F32", {8}, testing::Bytes(v)},
           {"lost", "F32", {2}, testing::Bytes(std::vector<float>{1, 2})}}));
  testing::WriteFile(
      b + "/m.safetensors",
      testing::BuildSafetensors(
          {{"kept", "F32", {8}, testing::Bytes(v)},
           {"new", "F32", {2}, testing::Bytes(std::vector<float>{3, 4})}}));
  std::vector<Finding> found = Verify(b, Hashes(a));
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].tensor, "lost");
  EXPECT_THAT(found[0].actual, HasSubstr("missing"));
  EXPECT_EQ(found[1].tensor, "new");
  EXPECT_THAT(found[1].expected, HasSubstr("not in the manifest"));
}

TEST(ManifestTest, EveryFieldIsTypeAndRangeChecked) {
  const std::string head =
      R"({"format": "tensormorph-manifest", "version": 1, "hash": "xxh3-64", )";
  const std::string ok =
      R"("name": "w", "file": "m.safetensors", "offset": 8, "size": 4, "dtype": "F32", "hash": "00000000000000ff")";
  EXPECT_TRUE(ParseManifest(head + R"("tensors": [{)" + ok + "}]}").ok());
  // Each refusal names the field (its JSON path) and, where it has them,
  // the value wanted and the value got.
  struct Bad {
    std::string text;
    std::vector<std::string> named;
  };
  const std::vector<Bad> bad = {
      {"[]", {"(top level)"}},
      {"{}", {".format"}},
      {R"({"format": "other", "version": 1, "hash": "xxh3-64", "tensors": []})",
       {".format", "\"tensormorph-manifest\""}},
      {R"({"format": "tensormorph-manifest", "version": 2, "hash": "xxh3-64", "tensors": []})",
       {".version", "1", "2"}},
      {R"({"format": "tensormorph-manifest", "version": 1, "hash": "md5", "tensors": []})",
       {".hash", "\"xxh3-64\""}},
      {head + R"("tensors": {}})", {".tensors"}},
      {head + R"("tensors": [3]})", {".tensors[0]"}},
      {head + R"("tensors": [{"name": 1}]})", {".tensors[0].name"}},
      {head + R"("tensors": [{"name": "w", "file": "f", "offset": -1}]})",
       {".tensors[0].offset", "number -1"}},
      {head + R"("tensors": [{"name": "w", "file": "f", "offset": 1.5}]})",
       {".tensors[0].offset"}},
      {head +
           R"("tensors": [{"name": "w", "file": "f", "offset": 0, "size": 4, "dtype": "F32", "hash": "xyz"}]})",
       {".tensors[0].hash", "16 hex digits", "\"xyz\""}},
      {head + R"("tensors": [{)" + ok + "}, {" + ok + "}]}",
       {".tensors[1].name", "'w'"}},
      {"{not json", {"manifest"}},
  };
  for (const Bad& b : bad) {
    EXPECT_THAT(ParseManifest(b.text), HasReason(ErrorReason::kRequestInvalid))
        << b.text;
    for (const std::string& value : b.named) {
      EXPECT_THAT(ParseManifest(b.text), MessageNames(value)) << b.text;
    }
  }
}

}  // namespace
}  // namespace tensormorph
