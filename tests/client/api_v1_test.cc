// API v1 (CHANGELOG.md): GetTensor, closed sets as enums, proto3 optional
// where presence matters. Through the client library and the CLI, remote (a
// tensormorphd on loopback) and embedded, with the same cases.
#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/embedded/embedded_client.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/cli_error.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/process.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::MessageOmits;
using ::testing::AllOf;
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
    auto c =
        remote() ? Client::Connect(cli_->server().address()) : EmbeddedClient();
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
  // The suggestion is the name quoted in the message (the metadata holds the
  // name asked for).
  EXPECT_THAT(typo, AllOf(HasReason(ErrorReason::kTensorNotFound),
                          HasMetadata("tensor", "blk.0.attn_q.wieght"),
                          MessageNames("'blk.0.attn_q.weight'"),
                          MessageNames(Quant())));
  // At most three, nearest first.
  auto layer = client_->GetTensor(Quant(), "blk.0.attn_x.weight");
  EXPECT_THAT(layer, AllOf(HasReason(ErrorReason::kTensorNotFound),
                           MessageNames("'blk.0.attn_q.weight'")));
  // The name asked for, then at most three guesses.
  const std::string message(layer.status().message());
  int quoted = 0;
  for (size_t at = 0; (at = message.find("'blk.", at)) != std::string::npos;
       ++at) {
    ++quoted;
  }
  EXPECT_LE(quoted, 1 + 3) << message;
  // Nothing near: no guess.
  auto far = client_->GetTensor(Quant(), "completely.unrelated.name.here");
  EXPECT_THAT(far, HasReason(ErrorReason::kTensorNotFound));
  EXPECT_THAT(far, MessageOmits("'blk."));  // no guess
  // With `part`, the stored names are the candidates.
  auto part = client_->GetTensor(Ct(), std::string(kCtWeight) + "_scal",
                                 /*part=*/true);
  EXPECT_THAT(part,
              AllOf(HasReason(ErrorReason::kTensorNotFound),
                    MessageNames(absl::StrCat("'", kCtWeight, "_scale'"))));
  // An empty name is a malformed request, not a missing tensor.
  EXPECT_THAT(client_->GetTensor(Quant(), ""),
              HasReason(ErrorReason::kRequestInvalid));
}

TEST_P(ApiV1Test, InfoOfAMisspelledTensorPassesTheSuggestionOn) {
  CommandResult r = Run({"info", Quant(), "blk.0.attn_q.wieght"});
  EXPECT_EQ(r.exit_code, 2);
  // The suggestion is for a person: the message names the near name.
  EXPECT_THAT(CliErrorOf(r.err), AllOf(HasReason(ErrorReason::kTensorNotFound),
                                       MessageNames("'blk.0.attn_q.weight'")));
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
  EXPECT_THAT(half, AllOf(HasReason(ErrorReason::kRequestInvalid),
                          MessageNames("range_max")));

  req.set_range_min(1);
  req.set_range_max(-1);
  auto reversed = client_->ComputeStats(req);
  EXPECT_THAT(reversed, AllOf(HasReason(ErrorReason::kRequestInvalid),
                              MessageNames("range_min")));
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
  EXPECT_THAT(past,
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames(absl::StrCat("group ", whole->groups()))));
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
  EXPECT_THAT(outside, AllOf(HasReason(ErrorReason::kRequestInvalid),
                             MessageNames("[256, 0")));
  req.set_col_begin(0);
  req.set_mode(static_cast<v1::HeatmapMode>(42));
  auto unknown = client_->GetHeatmap(req);
  EXPECT_THAT(unknown, AllOf(HasReason(ErrorReason::kEnumValueInvalid),
                             HasMetadata("field", "mode")));

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

TEST_P(ApiV1Test, HeatmapLocatesTheElementGivingACellItsValue) {
  // One cell over a region (what the page asks on a click): its element is
  // inside the region, and its own one-element error is the cell's value.
  v1::GetHeatmapRequest req;
  req.set_checkpoint(Quant());
  req.set_tensor(kTensor);
  req.set_reference(Source());
  req.set_mode(v1::HEATMAP_MODE_ERROR);
  req.set_width(1);
  req.set_height(1);
  req.set_row_begin(10);
  req.set_row_end(40);
  req.set_col_begin(100);
  req.set_col_end(180);
  auto plain = client_->GetHeatmap(req);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->cell_element_size(), 0);  // only when asked
  req.set_locate(true);
  auto cell = client_->GetHeatmap(req);
  ASSERT_TRUE(cell.ok()) << cell.status();
  ASSERT_EQ(cell->cell_element_size(), 1);
  EXPECT_EQ(cell->values(0), plain->values(0));
  const int64_t at = cell->cell_element(0), cols = cell->cols();
  EXPECT_GE(at / cols, 10);
  EXPECT_LT(at / cols, 40);
  EXPECT_GE(at % cols, 100);
  EXPECT_LT(at % cols, 180);
  v1::GetHeatmapRequest one = req;
  one.set_locate(false);
  one.set_row_begin(at / cols);
  one.set_row_end(at / cols + 1);
  one.set_col_begin(at % cols);
  one.set_col_end(at % cols + 1);
  auto element = client_->GetHeatmap(one);
  ASSERT_TRUE(element.ok()) << element.status();
  EXPECT_EQ(element->values(0), cell->values(0));

  req.set_mode(v1::HEATMAP_MODE_MEAN);
  auto mean = client_->GetHeatmap(req);
  EXPECT_THAT(mean, HasReason(ErrorReason::kRequestInvalid));
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

// A request as the HTTP gateway makes it from a page's JSON: protobuf's own
// parser, which keeps an enum's unknown number (7, -1) as it is.
template <typename Request>
Request FromJson(const std::string& json) {
  Request req;
  const auto parsed = google::protobuf::util::JsonStringToMessage(json, &req);
  EXPECT_TRUE(parsed.ok()) << json << ": " << parsed.ToString();
  return req;
}

TEST_P(ApiV1Test, ReadSliceRefusesAnUnknownModeAndANegativeChunkBound) {
  const std::string head =
      absl::StrCat(R"({"checkpoint": ")", Quant(), R"(", "tensor": ")", kTensor,
                   R"(", "slice": "0, 0:32")");
  for (const char* mode : {"7", "-1"}) {
    SCOPED_TRACE(mode);
    const auto req = FromJson<v1::ReadSliceRequest>(
        absl::StrCat(head, R"(, "mode": )", mode, "}"));
    ASSERT_EQ(static_cast<int>(req.mode()), std::stoi(mode));
    auto got = client_->ReadSliceAll(req);
    // The message names the number sent and the valid values.
    EXPECT_THAT(got, AllOf(HasReason(ErrorReason::kEnumValueInvalid),
                           HasMetadata("field", "mode"),
                           MessageNames(absl::StrCat("mode ", mode)),
                           MessageNames("2 (OUTPUT_MODE_RAW)")));
  }
  auto negative = client_->ReadSliceAll(FromJson<v1::ReadSliceRequest>(
      absl::StrCat(head, R"(, "maxChunkBytes": "-1"})")));
  EXPECT_THAT(negative,
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("max_chunk_bytes"), MessageNames("-1")));
  // The valid values still read: float32 by default or by name, raw bytes.
  for (const char* mode : {"0", "1", "\"OUTPUT_MODE_FLOAT32\""}) {
    auto f = client_->ReadSliceAll(FromJson<v1::ReadSliceRequest>(
        absl::StrCat(head, R"(, "mode": )", mode, "}")));
    ASSERT_TRUE(f.ok()) << mode << ": " << f.status();
    EXPECT_EQ(f->dtype, "F32");
    EXPECT_EQ(f->num_elements, 32);
  }
  // Raw: whole Q4_K blocks (a row of 256 is one), a chunk a block.
  auto raw = client_->ReadSliceAll(FromJson<v1::ReadSliceRequest>(absl::StrCat(
      R"({"checkpoint": ")", Quant(), R"(", "tensor": ")", kTensor,
      R"(", "slice": "0:2", "mode": 2, )", R"("maxChunkBytes": "1"})")));
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(raw->dtype, "Q4_K");
}

// Every enum field of every request the service takes, found through the
// descriptors: each must be refused when its number is unknown (proto3
// delivers such numbers). A new enum field fails this test until a case
// for it is added below.
TEST_P(ApiV1Test, EveryRequestEnumRefusesAnUnknownNumber) {
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          "tensormorph.v1.Tensormorph");
  ASSERT_NE(service, nullptr);
  std::set<std::string> found;
  std::set<const google::protobuf::Descriptor*> seen;
  std::function<void(const google::protobuf::Descriptor*)> walk =
      [&](const google::protobuf::Descriptor* m) {
        if (!seen.insert(m).second) return;
        for (int i = 0; i < m->field_count(); ++i) {
          const google::protobuf::FieldDescriptor* f = m->field(i);
          if (f->enum_type() != nullptr) found.insert(f->full_name());
          if (f->message_type() != nullptr) walk(f->message_type());
        }
      };
  for (int i = 0; i < service->method_count(); ++i) {
    walk(service->method(i)->input_type());
  }
  EXPECT_EQ(found, (std::set<std::string>{
                       "tensormorph.v1.CheckCheckpointRequest.fail_level",
                       "tensormorph.v1.GetHeatmapRequest.mode",
                       "tensormorph.v1.ReadSliceRequest.mode"}));
  // ReadSliceRequest.mode: ReadSliceRefusesAnUnknownModeAndANegativeChunkBound.
  // CheckCheckpointRequest.fail_level: server/check_checkpoint_test.cc's
  // RefusalsNameTheirReason.
  for (const char* mode : {"42", "-1"}) {
    auto h = client_->GetHeatmap(FromJson<v1::GetHeatmapRequest>(
        absl::StrCat(R"({"checkpoint": ")", Quant(), R"(", "tensor": ")",
                     kTensor, R"(", "mode": )", mode, "}")));
    EXPECT_THAT(h, AllOf(HasReason(ErrorReason::kEnumValueInvalid),
                         HasMetadata("field", "mode")))
        << mode;
  }
}

// The numbers of a request that count or bound something: a negative one is
// refused (INVALID_ARGUMENT), never read as a default.
TEST_P(ApiV1Test, NegativeCountsAreRefusedInEveryRequest) {
  // Refused, naming the field (or, "", whatever it names).
  auto expect_refused = [](const absl::Status& s, const std::string& field) {
    EXPECT_THAT(
        s, AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames(field)))
        << field;
  };
  v1::ComputeStatsRequest bins;
  bins.set_checkpoint(Quant());
  bins.set_tensor(kTensor);
  bins.set_bins(-1);
  expect_refused(client_->ComputeStats(bins).status(), "bins");
  v1::ComputeStatsRequest group;
  group.set_checkpoint(Quant());
  group.set_tensor(kTensor);
  group.set_group(-1);
  expect_refused(client_->ComputeStats(group).status(), "group");
  for (const char* field : {"width", "height", "rowBegin", "colEnd"}) {
    auto h = client_->GetHeatmap(FromJson<v1::GetHeatmapRequest>(
        absl::StrCat(R"({"checkpoint": ")", Quant(), R"(", "tensor": ")",
                     kTensor, R"(", ")", field, R"(": -1})")));
    expect_refused(h.status(), "");
  }
  for (const char* field : {"top_k", "worst_groups"}) {
    v1::QuantDiffRequest d;
    d.set_checkpoint(Quant());
    d.set_reference(Source());
    d.set_filter(kTensor);
    std::string(field) == "top_k" ? d.set_top_k(-1) : d.set_worst_groups(-1);
    expect_refused(
        client_->QuantDiff(d, [](const v1::QuantDiffEvent&) { return true; }),
        field);
  }
  for (const char* field : {"max_depth", "page_size"}) {
    v1::ListCheckpointsRequest l;
    l.set_directory(::tensormorph::testing::DemoDir());
    std::string(field) == "max_depth" ? l.set_max_depth(-1)
                                      : l.set_page_size(-1);
    expect_refused(client_->ListCheckpoints(
                       l, [](const v1::CheckpointEntry&) { return true; }),
                   field);
  }
}

// GetHeatmapRequest.leading counts from the end when negative, as
// InspectScalars' coordinates do (the HTTP page sends leading=-1 as it is).
TEST_P(ApiV1Test, HeatmapLeadingIndicesCountFromTheEnd) {
  auto at = [&](int64_t leading) {
    v1::GetHeatmapRequest req;
    req.set_checkpoint(Fixture("safetensors/plain"));
    req.set_tensor("bf16_3d");  // [2, 3, 4]
    req.add_leading(leading);
    return client_->GetHeatmap(req);
  };
  auto last = at(1), first = at(0), minus_one = at(-1), minus_two = at(-2);
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(minus_one.ok()) << minus_one.status();
  ASSERT_TRUE(minus_two.ok()) << minus_two.status();
  EXPECT_THAT(minus_one->values(), ::testing::ElementsAreArray(last->values()));
  EXPECT_THAT(minus_two->values(),
              ::testing::ElementsAreArray(first->values()));
  EXPECT_NE(last->values(0), first->values(0));
  for (int64_t bad : {-3, 2}) {
    auto past = at(bad);
    // The index, its dimension's size and the valid range.
    EXPECT_THAT(past, AllOf(HasReason(ErrorReason::kIndexOutOfRange),
                            MessageNames(absl::StrCat("index ", bad)),
                            MessageNames("size 2"), MessageNames("-2..1")))
        << bad;
  }
}

INSTANTIATE_TEST_SUITE_P(RemoteAndEmbedded, ApiV1Test,
                         ::testing::Values(true, false), [](const auto& info) {
                           return info.param ? "Remote" : "Embedded";
                         });

}  // namespace
}  // namespace tensormorph
