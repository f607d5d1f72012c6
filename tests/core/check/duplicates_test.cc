// The duplicate-tensor rule without a hash of every stored byte: tensors of
// one size compared by sampled fingerprint, then hashed and compared in
// full. Its findings must be those of the full-hash path (--manifest,
// --verify) on every checkpoint.
#include "core/check/duplicates.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "core/check/check.h"
#include "gtest/gtest.h"
#include "tests/support/check_cases.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

std::vector<Finding> Findings(const std::string& dir, bool hash_all) {
  auto ckpt = Checkpoint::Open(dir, {.lenient = true});
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  std::vector<Finding> out;
  if (!ckpt.ok()) return out;
  CheckOptions o;
  o.hashes = hash_all;
  auto summary = CheckCheckpoint(
      **ckpt, o, nullptr, nullptr, [&](const Finding& f) { out.push_back(f); },
      hash_all ? [](const ManifestEntry&) {}
               : std::function<void(const ManifestEntry&)>());
  EXPECT_TRUE(summary.ok()) << summary.status();
  return out;
}

void ExpectSameFindings(const std::vector<Finding>& a,
                        const std::vector<Finding>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(a[i].rule);
    EXPECT_EQ(a[i].rule, b[i].rule);
    EXPECT_EQ(a[i].severity, b[i].severity);
    EXPECT_EQ(a[i].tensor, b[i].tensor);
    EXPECT_EQ(a[i].file, b[i].file);
    EXPECT_EQ(a[i].expected, b[i].expected);
    EXPECT_EQ(a[i].actual, b[i].actual);
    EXPECT_EQ(a[i].hint, b[i].hint);
    EXPECT_EQ(a[i].count, b[i].count);
    EXPECT_EQ(a[i].worst_group, b[i].worst_group);
  }
}

std::vector<Finding> Duplicates(const std::vector<Finding>& all) {
  std::vector<Finding> out;
  for (const Finding& f : all) {
    if (f.rule == "duplicate-tensor") out.push_back(f);
  }
  return out;
}

TEST(FingerprintWindowsTest, ASmallTensorIsReadWhole) {
  EXPECT_EQ(FingerprintWindows(1),
            (std::vector<std::pair<uint64_t, uint64_t>>{{0, 1}}));
  EXPECT_EQ(
      FingerprintWindows(kFingerprintWhole),
      (std::vector<std::pair<uint64_t, uint64_t>>{{0, kFingerprintWhole}}));
}

TEST(FingerprintWindowsTest, ALargeTensorIsSampledFromFirstToLastByte) {
  for (uint64_t size : {kFingerprintWhole + 1, uint64_t{1} << 20,
                        (uint64_t{1} << 40) + 12345}) {
    SCOPED_TRACE(size);
    auto w = FingerprintWindows(size);
    ASSERT_EQ(w.size(), kFingerprintWindows);
    EXPECT_EQ(w.front().first, 0u);
    EXPECT_EQ(w.back().first + w.back().second, size);
    for (size_t k = 0; k < w.size(); ++k) {
      EXPECT_EQ(w[k].second, kFingerprintWindow);
      if (k > 0) {
        EXPECT_GT(w[k].first, w[k - 1].first);
      }
    }
  }
}

TEST(FindDuplicateTensorsTest, FindsWhatTheFullHashFindsAndNoMore) {
  // 256 KiB tensors: sampled, not read whole.
  constexpr int64_t kN = 65536;
  const std::string a = testing::Bytes(testing::Gaussian(kN, 11));
  const uint64_t size = a.size();
  ASSERT_GT(size, kFingerprintWhole);
  auto windows = FingerprintWindows(size);
  auto in_window = [&](uint64_t at) {
    for (const auto& [o, n] : windows) {
      if (at >= o && at < o + n) return true;
    }
    return false;
  };
  // A low mantissa byte in the middle, outside every window: same
  // fingerprint, different bytes.
  uint64_t middle = size / 2 / 4 * 4;
  ASSERT_FALSE(in_window(middle));
  std::string c = a;
  c[middle] ^= 0x01;
  // The same change inside a window.
  const uint64_t windowed = windows[7].first + 64;
  std::string d = a;
  d[windowed] ^= 0x01;
  // Equal windows, a different middle: every byte between windows 7 and 8.
  std::string e = a;
  for (uint64_t at = windows[7].first + kFingerprintWindow;
       at < windows[8].first; ++at) {
    e[at] = static_cast<char>(~e[at]);
  }
  // Small tensors (hashed whole): two equal, one a byte off in the middle.
  const std::string s = testing::Bytes(testing::Gaussian(64, 12));
  std::string s_off = s;
  s_off[128] ^= 0x01;
  const std::string dir = testing::MakeTempDir();
  testing::WriteFile(
      dir + "/model.safetensors",
      testing::BuildSafetensors({{"a", "F32", {kN}, a},
                                 {"b", "F32", {kN}, a},
                                 {"c", "F32", {kN}, c},
                                 {"d", "F32", {kN}, d},
                                 {"e", "U8", {static_cast<int64_t>(size)}, e},
                                 {"f", "F32", {kN / 2}, a.substr(0, size / 2)},
                                 {"s1", "F32", {64}, s},
                                 {"s2", "F32", {64}, s},
                                 {"s3", "F32", {64}, s_off}}));
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  // The cases the sampling cannot tell apart are those it must hash.
  auto print = [&](const std::string& name) {
    return SampledFingerprint((*ckpt)->FindStored(name)->data);
  };
  EXPECT_EQ(print("a"), print("c"));
  EXPECT_EQ(print("a"), print("e"));
  EXPECT_NE(print("a"), print("d"));

  std::vector<Finding> sampled;
  ASSERT_TRUE(FindDuplicateTensors(**ckpt, nullptr, nullptr, &sampled).ok());
  ASSERT_EQ(sampled.size(), 2u);
  std::vector<std::string> named;
  for (const Finding& f : sampled) {
    named.push_back(f.tensor);
    EXPECT_EQ(f.count, 2);
  }
  std::sort(named.begin(), named.end());
  EXPECT_EQ(named, (std::vector<std::string>{"a", "s1"}));
  for (const Finding& f : sampled) {
    const std::string pair = f.tensor == "a" ? "a, b" : "s1, s2";
    auto h = HashStoredTensor(**ckpt, *(*ckpt)->FindStored(f.tensor));
    ASSERT_TRUE(h.ok());
    EXPECT_NE(f.actual.find("(xxh3-64 " + HashHex(h->hash) + "): " + pair),
              std::string::npos)
        << f.actual;
  }
  // The same findings, in the same order, as from every tensor's hash.
  std::vector<ManifestEntry> hashes;
  for (const StoredTensor& t : (*ckpt)->stored_tensors()) {
    auto h = HashStoredTensor(**ckpt, t);
    ASSERT_TRUE(h.ok());
    hashes.push_back(*h);
  }
  std::vector<Finding> hashed;
  ASSERT_TRUE(FindDuplicateTensors(**ckpt, &hashes, nullptr, &hashed).ok());
  ExpectSameFindings(sampled, hashed);
  ExpectSameFindings(Findings(dir, false), Findings(dir, true));
}

TEST(FindDuplicateTensorsTest, EveryCheckCaseFindsTheSameWithAndWithoutHashes) {
  for (const testing::CheckCase& c : testing::CheckCases()) {
    if (!c.source.empty()) continue;
    SCOPED_TRACE(c.rule);
    ExpectSameFindings(Findings(c.dir, false), Findings(c.dir, true));
  }
  const std::string clean = testing::WriteCleanCheckCheckpoint();
  ExpectSameFindings(Findings(clean, false), Findings(clean, true));
  EXPECT_EQ(Duplicates(Findings(clean, false)).size(), 0u);
}

TEST(FindDuplicateTensorsTest, CancellationStops) {
  const std::string a = testing::Bytes(testing::Gaussian(64, 3));
  const std::string dir = testing::MakeTempDir();
  testing::WriteFile(dir + "/model.safetensors",
                     testing::BuildSafetensors(
                         {{"a", "F32", {64}, a}, {"b", "F32", {64}, a}}));
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  std::atomic<bool> cancelled{true};
  std::vector<Finding> out;
  EXPECT_EQ(FindDuplicateTensors(**ckpt, nullptr, &cancelled, &out).code(),
            absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace tensormorph
