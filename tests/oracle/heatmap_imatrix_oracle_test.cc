// The squared-error heatmap against llama.cpp's own quantization: the test
// model quantized by the pinned llama.cpp with an importance matrix
// (Q4_K_S), served by a real server on loopback. For every weighted tensor
// the heatmap's cells (one per element) add up to QuantDiff's
// weighted_sq_err with the same matrix, and unweighted to its mse times the
// count; against the Hugging Face source too, whose Q and K rows the GGUF
// permutes. Its refusals come with their reasons, and the CLI (embedded)
// prints the weighted map and says so in --json.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/util/error_reason.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/oracle/llama_oracle_support.h"
#include "tests/oracle/llama_quantizer.h"
#include "tests/support/loopback_server.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::LlamaQuantizer;
using ::tensormorph::testing::LoopbackServer;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kQuant[] = "q4_k_s-imatrix.gguf";
constexpr char kImatrix[] = "model.imatrix.gguf";
// The same matrix without one entry, and with one entry of another size.
constexpr char kPartial[] = "partial.imatrix.gguf";
constexpr char kResized[] = "resized.imatrix.gguf";
constexpr char kDropped[] = "blk.1.ffn_down.weight";
constexpr char kResizedName[] = "blk.0.attn_k.weight";

class HeatmapImatrixOracleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const LlamaQuantizer& quantizer = testing::SharedLlamaQuantizer();
    auto model = testing::QuantizeTestModelCached(quantizer, {7, "Q8_0"});
    ASSERT_TRUE(model.ok()) << model.status();
    root_ = new std::string(testing::MakeTempDir());
    std::filesystem::copy_file(model->f32_gguf, *root_ + "/source.gguf");
    std::filesystem::copy(model->hf_dir, *root_ + "/hf",
                          std::filesystem::copy_options::recursive);
    const testing::Imatrix imatrix = testing::TestModelImatrix();
    ASSERT_TRUE(quantizer
                    .Quantize(*root_ + "/source.gguf", *root_ + "/" + kQuant,
                              14, &imatrix)
                    .ok());
    testing::WriteFile(*root_ + "/" + kImatrix,
                       testing::GgufImatrixFile(imatrix));
    testing::Imatrix partial = imatrix, resized = imatrix;
    ASSERT_EQ(partial.erase(kDropped), 1u);
    ASSERT_EQ(resized.count(kResizedName), 1u);
    resized[kResizedName].resize(resized[kResizedName].size() / 2);
    testing::WriteFile(*root_ + "/" + kPartial,
                       testing::GgufImatrixFile(partial));
    testing::WriteFile(*root_ + "/" + kResized,
                       testing::GgufImatrixFile(resized));
    server_ = new LoopbackServer(testing::StartLoopbackServer({*root_}, 2));
  }

  // The server ends before the process does: a handler still finishing its
  // last call (its log line) must not meet the statics exit destroys.
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  static Client& client() { return *server_->client; }

  // QuantDiff's reports of kQuant against `reference`, by tensor name.
  static std::map<std::string, v1::TensorDiffReport> Diff(
      const std::string& reference, const std::string& imatrix) {
    v1::QuantDiffRequest req;
    req.set_checkpoint(kQuant);
    req.set_reference(reference);
    req.set_imatrix(imatrix);
    std::map<std::string, v1::TensorDiffReport> out;
    EXPECT_TRUE(client()
                    .QuantDiff(req,
                               [&](const v1::QuantDiffEvent& e) {
                                 if (e.has_tensor())
                                   out[e.tensor().name()] = e.tensor();
                                 return true;
                               })
                    .ok());
    return out;
  }

  // The tensor's squared-error heatmap at one cell per element.
  static v1::GetHeatmapRequest FullResolution(const v1::TensorDiffReport& r,
                                              const std::string& reference,
                                              const std::string& imatrix) {
    v1::GetHeatmapRequest req;
    req.set_checkpoint(kQuant);
    req.set_tensor(r.name());
    req.set_reference(reference);
    req.set_mode(v1::HEATMAP_MODE_SQ_ERROR);
    req.set_imatrix(imatrix);
    req.set_width(static_cast<int32_t>(r.shape(r.shape_size() - 1)));
    req.set_height(static_cast<int32_t>(r.shape(0)));
    return req;
  }

  static double Sum(const v1::GetHeatmapResponse& h) {
    double s = 0;
    for (double v : h.values()) s += v;  // row-major, in double
    return s;
  }

  static std::string* root_;
  static LoopbackServer* server_;
};
std::string* HeatmapImatrixOracleTest::root_ = nullptr;
LoopbackServer* HeatmapImatrixOracleTest::server_ = nullptr;

TEST_F(HeatmapImatrixOracleTest, CellsAddUpToQuantDiffsWeightedError) {
  for (const std::string reference : {"source.gguf", "hf"}) {
    SCOPED_TRACE(reference);
    const auto reports = Diff(reference, kImatrix);
    int weighted = 0;
    for (const auto& [name, r] : reports) {
      if (r.imatrix_use() != v1::IMATRIX_USE_WEIGHTED) continue;
      ASSERT_EQ(r.shape_size(), 2) << name;
      auto h = client().GetHeatmap(FullResolution(r, reference, kImatrix));
      ASSERT_TRUE(h.ok()) << name << ": " << h.status();
      EXPECT_EQ(h->imatrix_use(), v1::IMATRIX_USE_WEIGHTED) << name;
      ASSERT_EQ(h->values_size(), r.shape(0) * r.shape(1)) << name;
      ASSERT_GT(r.weighted_sq_err(), 0) << name;
      EXPECT_NEAR(Sum(*h), r.weighted_sq_err(), 1e-9 * r.weighted_sq_err())
          << name;
      // Unweighted: the diff's squared error, mse times the count.
      auto u = client().GetHeatmap(FullResolution(r, reference, ""));
      ASSERT_TRUE(u.ok()) << name << ": " << u.status();
      EXPECT_EQ(u->imatrix_use(), v1::IMATRIX_USE_UNSPECIFIED) << name;
      const double n = static_cast<double>(r.shape(0) * r.shape(1));
      EXPECT_NEAR(Sum(*u), r.mse() * n, 1e-9 * r.mse() * n) << name;
      ++weighted;
    }
    // Every matrix of both layers (attention, feed-forward) and the output.
    EXPECT_GE(weighted, 14);
  }
}

TEST_F(HeatmapImatrixOracleTest, RefusesWhatItCannotWeighOrMeasure) {
  v1::GetHeatmapRequest req;
  req.set_checkpoint(kQuant);
  req.set_tensor(kDropped);
  req.set_reference("source.gguf");
  req.set_mode(v1::HEATMAP_MODE_SQ_ERROR);
  req.set_imatrix(kImatrix);
  ASSERT_TRUE(client().GetHeatmap(req).ok());
  // Nothing to measure against.
  v1::GetHeatmapRequest no_ref = req;
  no_ref.clear_reference();
  EXPECT_THAT(client().GetHeatmap(no_ref).status(),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    HasMetadata("field", "ref")));
  // A matrix weighs squared errors only.
  v1::GetHeatmapRequest error_mode = req;
  error_mode.set_mode(v1::HEATMAP_MODE_ERROR);
  EXPECT_THAT(client().GetHeatmap(error_mode).status(),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    HasMetadata("field", "imatrix")));
  // No entry of the tensor: refused, not drawn unweighted.
  v1::GetHeatmapRequest partial = req;
  partial.set_imatrix(kPartial);
  EXPECT_THAT(
      client().GetHeatmap(partial).status(),
      AllOf(HasReason(ErrorReason::kImatrixNotApplicable),
            HasMetadata("tensor", kDropped), HasMetadata("use", "MISSING"),
            HasMetadata("path", kPartial)));
  // An entry of another size.
  v1::GetHeatmapRequest resized = req;
  resized.set_tensor(kResizedName);
  resized.set_imatrix(kResized);
  EXPECT_THAT(client().GetHeatmap(resized).status(),
              AllOf(HasReason(ErrorReason::kImatrixNotApplicable),
                    HasMetadata("tensor", kResizedName),
                    HasMetadata("use", "MISMATCH")));
  // A matrix outside the roots, as QuantDiff refuses it.
  v1::GetHeatmapRequest outside = req;
  outside.set_imatrix("/etc/hostname");
  EXPECT_THAT(client().GetHeatmap(outside).status(),
              HasReason(ErrorReason::kOutsideRoots));
}

TEST_F(HeatmapImatrixOracleTest, CliDrawsTheWeightedMapEmbedded) {
  const std::vector<std::string> args = {"heatmap",
                                         *root_ + "/" + kQuant,
                                         "blk.0.ffn_down.weight",
                                         "--mode",
                                         "sq-error",
                                         "--ref",
                                         *root_ + "/source.gguf",
                                         "--imatrix",
                                         *root_ + "/" + kImatrix,
                                         "--size",
                                         "16x8"};
  std::vector<std::string> argv = {testing::CliPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  const testing::CommandResult text = testing::RunCommand(argv);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("sq-error (imatrix-weighted)"));
  argv.insert(argv.begin() + 1, "--json");
  const testing::CommandResult json = testing::RunCommand(argv);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr("\"imatrixUse\":\"IMATRIX_USE_WEIGHTED\""));
  // Without a reference: a usage error before any call.
  const testing::CommandResult no_ref =
      testing::RunCommand({testing::CliPath(), "heatmap", *root_ + "/" + kQuant,
                           "blk.0.ffn_down.weight", "--mode", "sq-error"});
  EXPECT_EQ(no_ref.exit_code, 1) << no_ref.err;
  EXPECT_THAT(no_ref.err, HasSubstr("--ref"));
}

}  // namespace
}  // namespace tensormorph
