// QuantDiff of plain float quantized sides (F16, BF16) through a real server
// on loopback: with two background workers a tensor of several segments is
// diffed in parts and merged, and its report is the very bytes of the one a
// single background worker (which diffs it whole) sends.
#include <map>
#include <string>
#include <vector>

#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/support/loopback_server.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::StartLoopbackServer;

// 3 segments and a bit (DiffOptions::segment_elements is 2^20) per tensor,
// every 29th element a level off and every 101st source zero.
std::string WritePair() {
  const std::string dir = testing::MakeTempDir();
  constexpr int64_t kCols = 4096, kRows = 800;
  const std::vector<float> v = testing::Gaussian(kCols * kRows, 5, 0.02f);
  std::vector<uint16_t> f16(v.size()), bf16(v.size());
  std::vector<float> source(v);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t off = i % 29 == 0 ? 1 : 0;
    f16[i] = testing::F32ToF16Bits(v[i]) + off;
    bf16[i] = testing::F32ToBF16Bits(v[i]) + off;
    if (i % 101 == 0) source[i] = 0;
  }
  testing::WriteFile(
      dir + "/quant.safetensors",
      testing::BuildSafetensors(
          {{"a.weight", "F16", {kRows, kCols}, testing::Bytes(f16)},
           {"b.weight", "BF16", {kRows, kCols}, testing::Bytes(bf16)}}));
  testing::WriteFile(
      dir + "/source.safetensors",
      testing::BuildSafetensors(
          {{"a.weight", "F32", {kRows, kCols}, testing::Bytes(source)},
           {"b.weight", "F32", {kRows, kCols}, testing::Bytes(source)}}));
  return dir;
}

// The tensor reports by name, serialized (bit-exact doubles).
std::map<std::string, std::string> Reports(const std::string& dir,
                                           int workers) {
  testing::LoopbackServer server = StartLoopbackServer({dir}, workers);
  v1::QuantDiffRequest req;
  req.set_checkpoint("quant.safetensors");
  req.set_reference("source.safetensors");
  req.set_top_k(20);
  std::map<std::string, std::string> reports;
  const absl::Status s =
      server.client->QuantDiff(req, [&](const v1::QuantDiffEvent& e) {
        if (e.has_tensor()) {
          reports[e.tensor().name()] = e.tensor().SerializeAsString();
        }
        return true;
      });
  EXPECT_TRUE(s.ok()) << s;
  return reports;
}

TEST(QuantDiffSplitTest, APlainFloatTensorInPartsReportsTheWholeDiffsBytes) {
  const std::string dir = WritePair();
  // Two general workers leave one background worker; three leave two.
  const std::map<std::string, std::string> whole = Reports(dir, 2);
  const std::map<std::string, std::string> split = Reports(dir, 3);
  ASSERT_EQ(whole.size(), 2u);
  ASSERT_EQ(split.size(), 2u);
  for (const auto& [name, bytes] : whole) {
    SCOPED_TRACE(name);
    ASSERT_EQ(split.count(name), 1u);
    v1::TensorDiffReport a, b;
    ASSERT_TRUE(a.ParseFromString(bytes));
    ASSERT_TRUE(b.ParseFromString(split.at(name)));
    EXPECT_GT(a.not_nearest(), 0);  // the planted levels are found
    EXPECT_EQ(a.worst_size(), 20);
    EXPECT_EQ(split.at(name), bytes) << a.DebugString() << b.DebugString();
  }
}

}  // namespace
}  // namespace tensormorph
