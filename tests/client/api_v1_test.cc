// API v1 (CHANGELOG.md): GetTensor, closed sets as enums, proto3 optional
// where presence matters. Through the client library and the CLI, remote (a
// tensormorphd on loopback) and embedded, with the same cases.
#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/process.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::Fixture;
using ::testing::HasSubstr;
using ::testing::Not;

// The demo's Q4_K tensor of 256 x 256 and its BF16 source.
constexpr char kTensor[] = "blk.0.attn_q.weight";
// compressed-tensors int8 per channel: the logical `weight` is assembled
// from the stored parts `weight` (the codes) and `weight_scale`.
constexpr char kCtWeight[] = "model.layers.0.mlp.down_proj.weight";

class ApiV1Test : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    cli_ = new CliModes({::tensormorph::testing::DemoDir(),
                         ::tensormorph::testing::FixturesDir()});
  }
  static void TearDownTestSuite() {
    delete cli_;
    cli_ = nullptr;
  }
  void SetUp() override {
    auto c = remote() ? Client::Connect(cli_->server().address())
                      : Client::Embedded();
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }
  bool remote() const { return GetParam(); }
  CommandResult Run(std::vector<std::string> args) const {
    return cli_->Run(remote(), std::move(args));
  }
  static std::string Quant() {
    return ::tensormorph::testing::DemoDir() + "/model-q4_k_m.gguf";
  }
  static std::string Source() {
    return ::tensormorph::testing::DemoDir() + "/source";
  }
  static std::string Ct() { return Fixture("safetensors/ct_int8_channel"); }

  // The worst elements of kTensor's diff report with `top_k` (unset: none
  // given).
  // The worst elements (or, with `groups`, worst groups) a diff reports.
  int WorstCount(std::optional<int> n, bool groups = false) {
    v1::QuantDiffRequest req;
    req.set_checkpoint(Quant());
    req.set_reference(Source());
    req.set_filter(kTensor);
    if (n) groups ? req.set_worst_groups(*n) : req.set_top_k(*n);
    int worst = -1;
    absl::Status s = client_->QuantDiff(req, [&](const v1::QuantDiffEvent& e) {
      if (e.has_tensor()) {
        worst =
            groups ? e.tensor().worst_groups_size() : e.tensor().worst_size();
      }
      return true;
    });
    EXPECT_TRUE(s.ok()) << s;
    return worst;
  }

  static CliModes* cli_;
  std::unique_ptr<Client> client_;
};
CliModes* ApiV1Test::cli_ = nullptr;

TEST_P(ApiV1Test, GetTensorAnswersWhatListTensorsLists) {
  auto listed = client_->ListTensors(Quant(), kTensor);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  v1::TensorInfo want = (*listed)[0];
  want.clear_list_count();  // a listing's field only
  auto got = client_->GetTensor(Quant(), kTensor);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->SerializeAsString(), want.SerializeAsString());
  EXPECT_EQ(got->name(), kTensor);
  EXPECT_EQ(got->layout(), v1::LAYOUT_ROW_MAJOR);
  EXPECT_EQ(got->encoding().scheme(), "Q4_K");
}

TEST_P(ApiV1Test, GetTensorReachesAStoredPartByNameOrWithPart) {
  // Without `part`: the logical tensor, quantized, from two stored parts.
  auto logical = client_->GetTensor(Ct(), kCtWeight);
  ASSERT_TRUE(logical.ok()) << logical.status();
  EXPECT_TRUE(logical->encoding().quantized());
  EXPECT_EQ(logical->parts_size(), 2);
  // With `part`: the stored codes of the same name, a plain tensor of its
  // stored dtype, stored as itself.
  auto part = client_->GetTensor(Ct(), kCtWeight, /*part=*/true);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ(part->name(), kCtWeight);
  EXPECT_FALSE(part->encoding().quantized());
  ASSERT_EQ(part->parts_size(), 1);
  EXPECT_EQ(part->parts(0).name(), kCtWeight);
  EXPECT_EQ(part->encoding().scheme(), part->parts(0).dtype());
  // A part no logical tensor is named after is found without `part` too.
  const std::string scale = std::string(kCtWeight) + "_scale";
  auto fallback = client_->GetTensor(Ct(), scale);
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  EXPECT_EQ(fallback->name(), scale);
  EXPECT_FALSE(fallback->encoding().quantized());
}

TEST_P(ApiV1Test, GetTensorNotFoundSuggestsTheNearestNames) {
  auto typo = client_->GetTensor(Quant(), "blk.0.attn_q.wieght");
  EXPECT_EQ(typo.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(typo.status().message(),
              HasSubstr("did you mean 'blk.0.attn_q.weight'"));
  EXPECT_THAT(typo.status().message(), HasSubstr(Quant()));
  // At most three, nearest first.
  auto layer = client_->GetTensor(Quant(), "blk.0.attn_x.weight");
  EXPECT_EQ(layer.status().code(), absl::StatusCode::kNotFound);
  const std::string message(layer.status().message());
  const size_t at = message.find("did you mean");
  ASSERT_NE(at, std::string::npos) << message;
  const std::string guesses = message.substr(at);
  EXPECT_THAT(guesses, HasSubstr("'blk.0.attn_q.weight'"));
  EXPECT_LE(std::count(guesses.begin(), guesses.end(), '\''), 2 * 3) << message;
  // Nothing near: no guess.
  auto far = client_->GetTensor(Quant(), "completely.unrelated.name.here");
  EXPECT_EQ(far.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(far.status().message(), Not(HasSubstr("did you mean")));
  // With `part`, the stored names are the candidates.
  auto part = client_->GetTensor(Ct(), std::string(kCtWeight) + "_scal",
                                 /*part=*/true);
  EXPECT_EQ(part.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(part.status().message(),
              HasSubstr(absl::StrCat("did you mean '", kCtWeight, "_scale'")));
  // An empty name is a malformed request, not a missing tensor.
  EXPECT_EQ(client_->GetTensor(Quant(), "").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(ApiV1Test, InfoOfAMisspelledTensorPassesTheSuggestionOn) {
  CommandResult r = Run({"info", Quant(), "blk.0.attn_q.wieght"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("did you mean 'blk.0.attn_q.weight'"));
}

TEST_P(ApiV1Test, JsonNamesTheEnums) {
  CommandResult ckpt = Run({"--json", "info", Quant()});
  ASSERT_EQ(ckpt.exit_code, 0) << ckpt.err;
  EXPECT_EQ(nlohmann::json::parse(ckpt.out)["format"],
            "CHECKPOINT_FORMAT_GGUF");
  CommandResult ct = Run({"--json", "info", Ct()});
  ASSERT_EQ(ct.exit_code, 0) << ct.err;
  EXPECT_EQ(nlohmann::json::parse(ct.out)["format"],
            "CHECKPOINT_FORMAT_SAFETENSORS");

  CommandResult tensor = Run({"--json", "info", Quant(), kTensor});
  ASSERT_EQ(tensor.exit_code, 0) << tensor.err;
  const auto t = nlohmann::json::parse(tensor.out);
  EXPECT_EQ(t["layout"], "LAYOUT_ROW_MAJOR");
  EXPECT_FALSE(t.contains("dtype")) << "dropped: encoding.scheme says it";
  EXPECT_EQ(t["encoding"]["scheme"], "Q4_K");
  ASSERT_FALSE(t["compat"].empty());
  for (const auto& b : t["compat"]) {
    EXPECT_THAT(b["status"].get<std::string>(),
                ::testing::AnyOf("SUPPORT_STATUS_SUPPORTED",
                                 "SUPPORT_STATUS_NOT_SUPPORTED",
                                 "SUPPORT_STATUS_NOT_KNOWN"));
  }

  // ListCheckpoints' entries name their format the same way.
  CommandResult ls = Run({"--json", "ls", ::tensormorph::testing::DemoDir()});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  std::set<std::string> formats;
  std::istringstream entries(ls.out);
  for (std::string line; std::getline(entries, line);) {
    formats.insert(nlohmann::json::parse(line)["format"].get<std::string>());
  }
  EXPECT_EQ(formats, (std::set<std::string>{"CHECKPOINT_FORMAT_GGUF",
                                            "CHECKPOINT_FORMAT_SAFETENSORS"}))
      << ls.out;

  // Two GGUFs pair by name; no architecture is named then.
  CommandResult diff =
      Run({"--json", "diff", Quant(),
           ::tensormorph::testing::DemoDir() + "/model-f32.gguf", "--filter",
           kTensor});
  ASSERT_EQ(diff.exit_code, 0) << diff.err;
  bool summary = false;
  std::istringstream lines(diff.out);
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("summary")) continue;
    summary = true;
    EXPECT_EQ(j["summary"]["pairing"], "DIFF_PAIRING_BY_NAME");
    EXPECT_EQ(j["summary"]["pairingArchitecture"], "");
  }
  EXPECT_TRUE(summary) << diff.out;
}

TEST_P(ApiV1Test, HumanOutputKeepsItsWords) {
  CommandResult ckpt = Run({"info", Quant()});
  ASSERT_EQ(ckpt.exit_code, 0) << ckpt.err;
  EXPECT_THAT(ckpt.out, HasSubstr("format      gguf\n"));

  CommandResult ls = Run({"ls", ::tensormorph::testing::DemoDir()});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_THAT(ls.out, HasSubstr("  gguf  "));
  EXPECT_THAT(ls.out, HasSubstr("  safetensors  "));
  EXPECT_THAT(ls.out, Not(HasSubstr("CHECKPOINT_FORMAT")));

  CommandResult tensor = Run({"info", Quant(), kTensor});
  ASSERT_EQ(tensor.exit_code, 0) << tensor.err;
  EXPECT_THAT(tensor.out, HasSubstr("tensor       blk.0.attn_q.weight\n"));
  EXPECT_THAT(tensor.out, HasSubstr("strides      [256, 1]  (row-major)\n"));
  EXPECT_THAT(tensor.out, HasSubstr("dtype        Q4_K\n"));
  EXPECT_THAT(tensor.out, HasSubstr("backends (kernels shipped"));
  EXPECT_THAT(tensor.out, HasSubstr("  supported"));
  EXPECT_THAT(tensor.out, Not(HasSubstr("SUPPORT_STATUS")));

  CommandResult diff =
      Run({"diff", Quant(), Source(), "--filter", kTensor, "--top", "0"});
  ASSERT_EQ(diff.exit_code, 0) << diff.err;
  EXPECT_THAT(diff.out, HasSubstr("compared (GGUF -> Hugging Face names "
                                  "(llama))"));
}

TEST_P(ApiV1Test, HistogramRangeIsBothOrNeither) {
  v1::ComputeStatsRequest req;
  req.set_checkpoint(Quant());
  req.set_tensor(kTensor);
  auto whole = client_->ComputeStats(req);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->hist_min(), whole->min());
  EXPECT_EQ(whole->hist_max(), whole->max());

  req.set_range_min(-0.5);
  req.set_range_max(0.25);
  auto ranged = client_->ComputeStats(req);
  ASSERT_TRUE(ranged.ok()) << ranged.status();
  EXPECT_EQ(ranged->hist_min(), -0.5);
  EXPECT_EQ(ranged->hist_max(), 0.25);

  // A zero bound is a bound (presence, not value, decides).
  req.set_range_min(0);
  auto from_zero = client_->ComputeStats(req);
  ASSERT_TRUE(from_zero.ok()) << from_zero.status();
  EXPECT_EQ(from_zero->hist_min(), 0);

  req.clear_range_max();
  auto half = client_->ComputeStats(req);
  EXPECT_EQ(half.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(half.status().message(), HasSubstr("range_max"));

  req.set_range_min(1);
  req.set_range_max(-1);
  auto reversed = client_->ComputeStats(req);
  EXPECT_EQ(reversed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(reversed.status().message(), HasSubstr("range_min"));
}

TEST_P(ApiV1Test, StatsGroupIsPresenceAndBringsThatGroupsLevels) {
  v1::ComputeStatsRequest req;
  req.set_checkpoint(Quant());
  req.set_tensor(kTensor);
  auto whole = client_->ComputeStats(req);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->count(), 256 * 256);
  EXPECT_EQ(whole->levels_size(), 0);  // many groups, no one set of levels
  req.set_group(0);                    // group 0 is a group, not "unset"
  auto g0 = client_->ComputeStats(req);
  ASSERT_TRUE(g0.ok()) << g0.status();
  EXPECT_EQ(g0->count(), 32);  // a Q4_K sub-block
  EXPECT_EQ(g0->levels_size(), 16);
  EXPECT_TRUE(std::is_sorted(g0->levels().begin(), g0->levels().end()));
  req.set_group(whole->groups());
  auto past = client_->ComputeStats(req);
  EXPECT_EQ(past.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(past.status().message(),
              HasSubstr(absl::StrCat("group ", whole->groups(), " is past")));
  // A per-tensor scale: one set of levels without a group.
  v1::ComputeStatsRequest per_tensor;
  per_tensor.set_checkpoint(Fixture("safetensors/ct_int8_tensor_asym"));
  per_tensor.set_tensor(kCtWeight);
  auto pt = client_->ComputeStats(per_tensor);
  ASSERT_TRUE(pt.ok()) << pt.status();
  EXPECT_EQ(pt->levels_size(), 256);
}

TEST_P(ApiV1Test, HeatmapRegionModeAndZerosAgainstTheDiffsReference) {
  v1::GetHeatmapRequest req;
  req.set_checkpoint(Quant());
  req.set_tensor(kTensor);
  req.set_width(16);
  req.set_height(16);
  req.set_row_begin(64);
  req.set_row_end(128);
  req.set_col_begin(200);
  auto region = client_->GetHeatmap(req);
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_EQ(region->row_edges(0), 64);
  EXPECT_EQ(region->row_edges(16), 128);
  EXPECT_EQ(region->col_edges(0), 200);
  EXPECT_EQ(region->col_edges(region->width()), 256);
  EXPECT_EQ(region->width(), 16);

  req.set_col_begin(256);
  auto outside = client_->GetHeatmap(req);
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(outside.status().message(),
              HasSubstr("cols [256, 0 (= to the end))"));
  req.set_col_begin(0);
  req.set_mode(static_cast<v1::HeatmapMode>(42));
  auto unknown = client_->GetHeatmap(req);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("heatmap mode 42"));

  // ZEROS against the Hugging Face source: found, and its rows lined up,
  // as the diff finds them; one cell per element adds up to ComputeStats'.
  v1::GetHeatmapRequest z;
  z.set_checkpoint(Quant());
  z.set_tensor(kTensor);
  z.set_reference(Source());
  z.set_mode(v1::HEATMAP_MODE_ZEROS);
  z.set_width(256);
  z.set_height(256);
  auto zeros = client_->GetHeatmap(z);
  ASSERT_TRUE(zeros.ok()) << zeros.status();
  ASSERT_EQ(zeros->pruned_size(), 256 * 256);
  double induced = 0, pruned = 0;
  for (double v : zeros->values()) induced += v;
  for (double v : zeros->pruned()) pruned += v;
  v1::ComputeStatsRequest st;
  st.set_checkpoint(Quant());
  st.set_tensor(kTensor);
  st.set_reference(Source());
  auto stats = client_->ComputeStats(st);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(static_cast<int64_t>(induced), stats->induced_zeros());
  EXPECT_EQ(static_cast<int64_t>(pruned), stats->pruned_zeros());
}

TEST_P(ApiV1Test, TopKUnsetMeansTenAndZeroMeansNone) {
  EXPECT_EQ(WorstCount(std::nullopt), 10);
  EXPECT_EQ(WorstCount(0), 0);
  EXPECT_EQ(WorstCount(5), 5);
}

TEST_P(ApiV1Test, WorstGroupsUnsetMeansFiveAndZeroMeansNone) {
  EXPECT_EQ(WorstCount(std::nullopt, /*groups=*/true), 5);
  EXPECT_EQ(WorstCount(0, /*groups=*/true), 0);
  EXPECT_EQ(WorstCount(3, /*groups=*/true), 3);
}

TEST_P(ApiV1Test, CliTopZeroAsksTheServerForNone) {
  CommandResult r = Run(
      {"--json", "diff", Quant(), Source(), "--filter", kTensor, "--top", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  int reports = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("tensor")) continue;
    ++reports;
    EXPECT_TRUE(j["tensor"]["worst"].empty()) << line;
  }
  EXPECT_EQ(reports, 1);
}

INSTANTIATE_TEST_SUITE_P(RemoteAndEmbedded, ApiV1Test,
                         ::testing::Values(true, false), [](const auto& info) {
                           return info.param ? "Remote" : "Embedded";
                         });

}  // namespace
}  // namespace tensormorph
