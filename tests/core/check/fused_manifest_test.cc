// The manifest's hashes taken in the value pass (stored_hashes.h) are the
// separate pass's (HashStoredTensor), byte for byte: on every format, on
// tensors that span pieces and end in a partial one, on sharded
// checkpoints, on tensors the value pass does not decode, and with --verify.
#include <atomic>
#include <cstring>
#include <filesystem>

#include "core/check/check.h"
#include "core/check/manifest.h"
#include "core/check/stored_hashes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/check_cases.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/sharded_checkpoint.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph::fused_manifest_test {
namespace {

namespace fs = std::filesystem;

// The reference: every stored tensor hashed in a pass of its own.
std::string SeparateManifest(const Checkpoint& c) {
  std::vector<ManifestEntry> entries;
  for (const StoredTensor& t : c.stored_tensors()) {
    absl::StatusOr<ManifestEntry> e = HashStoredTensor(c, t);
    EXPECT_TRUE(e.ok()) << e.status();
    if (e.ok()) entries.push_back(*e);
  }
  return ManifestJson(entries);
}

// What `check --manifest` writes: the hashes taken in the value pass.
std::string FusedManifest(const Checkpoint& c, const ValueScanOptions& v) {
  CheckOptions o;
  o.hashes = true;
  o.values = v;
  std::vector<ManifestEntry> entries;
  absl::StatusOr<CheckSummary> s =
      CheckCheckpoint(c, o, nullptr, nullptr, nullptr,
                      [&](const ManifestEntry& e) { entries.push_back(e); });
  EXPECT_TRUE(s.ok()) << s.status();
  return ManifestJson(entries);
}

// Default pieces, and pieces of 1000 elements (rows up to 3000 whole): a
// tensor then spans many pieces and ends in a partial one.
std::vector<ValueScanOptions> PieceSizes() {
  ValueScanOptions small;
  small.piece_elements = 1000;
  small.max_piece_elements = 3000;
  return {ValueScanOptions(), small};
}

// Opened as `check` opens it: leniently.
void ExpectBothWaysEqual(const std::string& path) {
  SCOPED_TRACE(path);
  auto ckpt = Checkpoint::Open(path, {.lenient = true});
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const std::string reference = SeparateManifest(**ckpt);
  for (const ValueScanOptions& v : PieceSizes()) {
    SCOPED_TRACE(v.piece_elements);
    EXPECT_EQ(FusedManifest(**ckpt, v), reference);
  }
}

// One GGUF of every format the value pass reads, with shapes that are not
// multiples of a piece: F32 (and a 1-D tail), F16, BF16, Q8_0, Q4_K, Q6_K.
std::string WriteEveryFormatGguf() {
  using namespace ::tensormorph::testing;
  const std::vector<float> a = Gaussian(512 * 37, 11, 0.02f);
  const std::vector<float> tail = Gaussian(100003, 12, 0.02f);
  std::string f16(a.size() * 2, '\0');
  for (size_t i = 0; i < a.size(); ++i) {
    const uint16_t h = F32ToF16Bits(a[i]);
    std::memcpy(f16.data() + 2 * i, &h, 2);
  }
  GgufSpec s;
  s.kv.push_back({"general.architecture", GgufString("llama")});
  s.tensors.push_back({"blk.0.f32", {512, 37}, 0, ToF32Bytes(a)});
  s.tensors.push_back({"blk.0.tail", {100003}, 0, ToF32Bytes(tail)});
  s.tensors.push_back({"blk.0.f16", {512, 37}, 1, f16});
  s.tensors.push_back({"blk.0.bf16", {512, 37}, 30, ToBF16Bytes(a)});
  s.tensors.push_back({"blk.0.q8_0", {512, 37}, 8, QuantizeQ8_0(a)});
  s.tensors.push_back({"blk.0.q4_k", {512, 37}, 12, QuantizeQ4_K(a)});
  s.tensors.push_back({"blk.0.q6_k", {512, 37}, 14, QuantizeQ6_K(a)});
  const std::string path = MakeTempDir() + "/every.gguf";
  WriteFile(path, BuildGguf(s));
  return path;
}

TEST(FusedManifestTest, EqualsTheSeparatePassOnEveryGgufFormat) {
  ExpectBothWaysEqual(WriteEveryFormatGguf());
}

TEST(FusedManifestTest, EqualsTheSeparatePassOnAShardedGptqCheckpoint) {
  ExpectBothWaysEqual(testing::WriteShardedGptq().dir);
}

TEST(FusedManifestTest, EqualsTheSeparatePassOnEveryDemoCheckpoint) {
  for (const auto& e : fs::directory_iterator(testing::DemoDir())) {
    ExpectBothWaysEqual(e.path().string());
  }
}

// Tensors not decoded (unresolved conventions), undecodable ones, shared
// scales, duplicates: what the value pass leaves is hashed after it.
TEST(FusedManifestTest, EqualsTheSeparatePassOnEveryCheckCase) {
  for (const testing::CheckCase& c : testing::CheckCases()) {
    SCOPED_TRACE(c.rule);
    ExpectBothWaysEqual(c.dir);
  }
}

// Parts hashed in the value pass, advanced by uneven and repeated
// fractions, then ended, leave nothing to the separate pass.
TEST(FusedManifestTest, PartsAdvancedUnevenlyHashAsAWhole) {
  auto ckpt = Checkpoint::Open(WriteEveryFormatGguf());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const Checkpoint& c = **ckpt;
  StoredHashes hashes(c);
  for (const LogicalTensor& t : c.tensors()) hashes.Claim(t);
  EXPECT_EQ(hashes.unclaimed_bytes(), 0);
  for (const LogicalTensor& t : c.tensors()) {
    ASSERT_TRUE(hashes.Begin(t).ok());
    const int64_t n = t.num_elements;
    for (int64_t done : {int64_t{1}, int64_t{1}, n / 3, n / 3 + 7, n - 1}) {
      hashes.Advance(done, n);
    }
    ASSERT_TRUE(hashes.End().ok());
  }
  int64_t leftover = 0;
  absl::StatusOr<std::vector<ManifestEntry>> entries =
      hashes.Finish(nullptr, [&](int64_t b) { leftover += b; });
  ASSERT_TRUE(entries.ok()) << entries.status();
  EXPECT_EQ(leftover, 0);
  EXPECT_EQ(ManifestJson(*entries), SeparateManifest(c));
}

// What End still has to hash (an undecodable tensor's bytes, all of them)
// stops at a cancel.
TEST(FusedManifestTest, EndStopsWhenCancelled) {
  auto ckpt = Checkpoint::Open(WriteEveryFormatGguf());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  StoredHashes hashes(**ckpt);
  const LogicalTensor& t = (*ckpt)->tensors()[0];
  hashes.Claim(t);
  ASSERT_TRUE(hashes.Begin(t).ok());
  std::atomic<bool> cancelled{true};
  EXPECT_THAT(hashes.End(&cancelled),
              testing::StatusIs(absl::StatusCode::kCancelled, "cancelled"));
}

// A one-byte change in the middle of a tensor many pieces long is caught
// against the separate pass's manifest; the unchanged copy passes.
TEST(FusedManifestTest, VerifyCatchesAByteChangedMidTensor) {
  const std::string path = WriteEveryFormatGguf();
  auto original = Checkpoint::Open(path);
  ASSERT_TRUE(original.ok()) << original.status();
  absl::StatusOr<std::vector<ManifestEntry>> manifest =
      ParseManifest(SeparateManifest(**original));
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  const StoredTensor* tail = (*original)->FindStored("blk.0.tail");
  ASSERT_NE(tail, nullptr);
  std::string bytes = testing::ReadFileBytes(path);
  const std::string copy = testing::MakeTempDir() + "/every.gguf";
  testing::WriteFile(copy, bytes);
  bytes[tail->offset + tail->nbytes / 2] ^= 0x10;
  const std::string changed = testing::MakeTempDir() + "/every.gguf";
  testing::WriteFile(changed, bytes);
  for (const ValueScanOptions& v : PieceSizes()) {
    for (const std::string& p : {copy, changed}) {
      auto ckpt = Checkpoint::Open(p);
      ASSERT_TRUE(ckpt.ok()) << ckpt.status();
      CheckOptions o;
      o.verify = *manifest;
      o.values = v;
      std::vector<std::string> mismatched;
      ASSERT_TRUE(
          CheckCheckpoint(**ckpt, o, nullptr, nullptr, [&](const Finding& f) {
            if (f.rule == "manifest-mismatch") {
              mismatched.push_back(f.tensor);
            }
          }).ok());
      if (p == copy) {
        EXPECT_THAT(mismatched, ::testing::IsEmpty());
      } else {
        EXPECT_THAT(mismatched, ::testing::ElementsAre("blk.0.tail"));
      }
    }
  }
}

}  // namespace
}  // namespace tensormorph::fused_manifest_test
