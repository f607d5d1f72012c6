// CompareQuantizations on small GGUF files written here (no llama.cpp): what
// a user's trial of `tensormorph compare` found. A base with no
// general.file_type gets no ftype name (the CLI prints FTYPE and a note,
// never -1); a known one gets the name llama-quantize takes. A budget below
// the smallest mix keeps the rows and totals and says, in the mix, the least
// there is (the CLI exits 3). Progress carries the pairs' bytes. Flags the
// CLI can check are usage errors naming the flag. A weighted comparison's
// choices do not depend on the importance matrix's overall scale, a
// quantization the matrix weighs nowhere is said so, and an empty
// --imatrix is refused (issue 34).
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/cli_error.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/loopback_server.h"
#include "tests/support/process.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CliJsonErrorOf;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::LoopbackServer;
using ::tensormorph::testing::RunCommand;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint32_t kF32 = 0, kQ4_0 = 2, kQ8_0 = 8;  // ggml type ids
constexpr int kExitUsage = 1, kExitThreshold = 3;

// Two matrices of 64 x 4 and a norm of 64, in every file: the matrices in
// `type`, the norm in F32 (as llama.cpp keeps it).
// `undecodable`: blk.0.attn_q.weight in ggml type 200, unknown to
// Tensormorph (stored last, so that its size is known).
std::string Model(uint32_t type, std::optional<uint32_t> file_type,
                  bool undecodable = false) {
  testing::GgufSpec spec;
  spec.kv.push_back({"general.architecture", testing::GgufString("llama")});
  if (file_type) {
    spec.kv.push_back({"general.file_type", testing::GgufU32(*file_type)});
  }
  const std::vector<std::pair<std::string, uint64_t>> matrices = {
      {"blk.0.attn_k.weight", 1}, {"blk.0.attn_q.weight", 2}};
  for (const auto& [name, seed] : matrices) {
    const std::vector<float> v = testing::Gaussian(256, seed);
    std::string data = type == kQ8_0   ? testing::QuantizeQ8_0(v)
                       : type == kQ4_0 ? testing::QuantizeQ4_0(v)
                                       : testing::ToF32Bytes(v);
    spec.tensors.push_back({name, {64, 4}, type, std::move(data)});
  }
  spec.tensors.push_back({"blk.0.attn_norm.weight",
                          {64},
                          kF32,
                          testing::ToF32Bytes(testing::Gaussian(64, 3))});
  if (undecodable) {
    std::swap(spec.tensors[1], spec.tensors[2]);
    spec.tensors[2].type_id = 200;
  }
  return testing::BuildGguf(spec);
}

// A legacy (.dat) importance matrix, as llama-imatrix writes it: per entry
// its name, ncall 1 and the values, which are then the weights.
std::string LegacyImatrix(
    const std::vector<std::pair<std::string, std::vector<float>>>& entries) {
  std::string out;
  auto put = [&](int32_t v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(v));
  };
  put(static_cast<int32_t>(entries.size()));
  for (const auto& [name, values] : entries) {
    put(static_cast<int32_t>(name.size()));
    out += name;
    put(1);
    put(static_cast<int32_t>(values.size()));
    out.append(reinterpret_cast<const char*>(values.data()),
               values.size() * sizeof(float));
  }
  return out;
}

// Importance for blk.0.attn_q.weight's 64 columns (and none for attn_k,
// weighed by the mean importance then), all times `scale`.
std::string AttnQImatrix(float scale) {
  std::vector<float> w = testing::Gaussian(64, 9);
  for (float& x : w) x = (x * x + 0.1f) * scale;
  return LegacyImatrix({{"blk.0.attn_q.weight", w}});
}

// A Hugging Face source (hf/) and two quantizations of it whose names
// differ: a GGUF (hf-q8_0.gguf, llama.cpp's names) and a safetensors BF16
// copy (hf-bf16/). Two layers; no Q/K projection (nothing to un-permute).
void WriteMixedFormats(const std::string& root) {
  struct Tensor {
    std::string hf, gguf;
    std::vector<int64_t> shape;  // Hugging Face's order
    uint64_t seed;
  };
  const std::vector<Tensor> tensors = {{"model.layers.0.input_layernorm.weight",
                                        "blk.0.attn_norm.weight",
                                        {64},
                                        4},
                                       {"model.layers.0.mlp.down_proj.weight",
                                        "blk.0.ffn_down.weight",
                                        {4, 64},
                                        5},
                                       {"model.layers.1.mlp.down_proj.weight",
                                        "blk.1.ffn_down.weight",
                                        {4, 64},
                                        6}};
  std::vector<testing::StTensor> source, bf16;
  testing::GgufSpec gguf;
  gguf.kv.push_back({"general.architecture", testing::GgufString("llama")});
  gguf.kv.push_back({"general.file_type", testing::GgufU32(7)});
  for (const Tensor& t : tensors) {
    const std::vector<float> v =
        testing::Gaussian(t.shape.size() == 1 ? 64 : 256, t.seed);
    source.push_back({t.hf, "F32", t.shape, testing::ToF32Bytes(v)});
    bf16.push_back({t.hf, "BF16", t.shape, testing::ToBF16Bytes(v)});
    std::vector<int64_t> ne(t.shape.rbegin(), t.shape.rend());
    gguf.tensors.push_back({t.gguf, ne, t.shape.size() == 1 ? kF32 : kQ8_0,
                            t.shape.size() == 1 ? testing::ToF32Bytes(v)
                                                : testing::QuantizeQ8_0(v)});
  }
  constexpr char kConfig[] = R"({"model_type": "llama"})";
  for (const auto& [dir, tensors] :
       std::vector<std::pair<std::string, std::vector<testing::StTensor>>>{
           {"hf", source}, {"hf-bf16", bf16}}) {
    std::filesystem::create_directories(root + "/" + dir);
    testing::WriteFile(root + "/" + dir + "/model.safetensors",
                       testing::BuildSafetensors(tensors));
    testing::WriteFile(root + "/" + dir + "/config.json", kConfig);
  }
  testing::WriteFile(root + "/hf-q8_0.gguf", testing::BuildGguf(gguf));
}

class CompareQuantizationsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(testing::MakeTempDir());
    testing::WriteFile(*root_ + "/source.gguf", Model(kF32, std::nullopt));
    testing::WriteFile(*root_ + "/q8_0.gguf", Model(kQ8_0, 7));
    testing::WriteFile(*root_ + "/q8_0-noftype.gguf",
                       Model(kQ8_0, std::nullopt));
    testing::WriteFile(*root_ + "/q4_0.gguf", Model(kQ4_0, 2));
    testing::WriteFile(*root_ + "/q4_0-undecodable.gguf",
                       Model(kQ4_0, 2, /*undecodable=*/true));
    WriteMixedFormats(*root_);
    for (const auto& [name, scale] : std::vector<std::pair<std::string, float>>{
             {"attn_q-x0.01.dat", 0.01f},
             {"attn_q-x1.dat", 1.0f},
             {"attn_q-x100.dat", 100.0f}}) {
      testing::WriteFile(*root_ + "/" + name, AttnQImatrix(scale));
    }
    // GGUF names: the Hugging Face copy's tensors are weighed by none.
    std::vector<float> ones(64, 1.0f);
    testing::WriteFile(*root_ + "/gguf-names.dat",
                       LegacyImatrix({{"blk.0.ffn_down.weight", ones},
                                      {"blk.1.ffn_down.weight", ones}}));
    server_ = new LoopbackServer(testing::StartLoopbackServer({*root_}, 3));
  }

  struct Compared {
    std::vector<v1::CompareRow> rows;
    std::vector<v1::DiffProgress> progress;
    v1::CompareSummary summary;
  };
  static absl::StatusOr<Compared> Compare(
      const v1::CompareQuantizationsRequest& req) {
    Compared out;
    absl::Status s = server_->client->CompareQuantizations(
        req, [&](const v1::CompareEvent& e) {
          if (e.has_row()) out.rows.push_back(e.row());
          if (e.has_progress()) out.progress.push_back(e.progress());
          if (e.has_summary()) out.summary = e.summary();
          return true;
        });
    if (!s.ok()) return s;
    return out;
  }
  static v1::CompareQuantizationsRequest Request(
      const std::vector<std::string>& quantizations) {
    v1::CompareQuantizationsRequest req;
    req.set_source("source.gguf");
    for (const std::string& q : quantizations) req.add_quantizations(q);
    return req;
  }
  // The CLI, embedded: compare source.gguf QUANTIZATIONS... ARGS...
  static CommandResult Cli(bool json,
                           const std::vector<std::string>& quantizations,
                           const std::vector<std::string>& args) {
    std::vector<std::string> argv = {CliPath()};
    if (json) argv.push_back("--json");
    argv.push_back("compare");
    argv.push_back(*root_ + "/source.gguf");
    for (const std::string& q : quantizations) argv.push_back(*root_ + "/" + q);
    argv.insert(argv.end(), args.begin(), args.end());
    return RunCommand(argv);
  }

  static std::string* root_;
  static LoopbackServer* server_;
};
std::string* CompareQuantizationsTest::root_ = nullptr;
LoopbackServer* CompareQuantizationsTest::server_ = nullptr;

TEST_F(CompareQuantizationsTest, BaseFtypeIsNamedAsLlamaQuantizeTakesIt) {
  v1::CompareQuantizationsRequest req = Request({"q8_0.gguf", "q4_0.gguf"});
  req.set_budget_bits_per_weight(8);
  for (const auto& [base, name] :
       std::vector<std::pair<int, std::string>>{{0, "Q8_0"}, {1, "Q4_0"}}) {
    req.set_base(base);
    auto got = Compare(req);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->summary.mix().base_ftype_name(), name);
    EXPECT_GT(got->summary.mix().tensor_type_overrides_size(), 0);
  }
  const CommandResult text =
      Cli(false, {"q8_0.gguf", "q4_0.gguf"}, {"--budget-bpw", "8"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr(" SOURCE.gguf OUT.gguf Q8_0\n"));
}

TEST_F(CompareQuantizationsTest, BaseWithoutFtypeGetsNoNumberInTheCommand) {
  v1::CompareQuantizationsRequest req =
      Request({"q8_0-noftype.gguf", "q4_0.gguf"});
  req.set_budget_bits_per_weight(8);
  auto got = Compare(req);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->summary.mix().base_ftype(), -1);
  EXPECT_EQ(got->summary.mix().base_ftype_name(), "");
  const CommandResult text =
      Cli(false, {"q8_0-noftype.gguf", "q4_0.gguf"}, {"--budget-bpw", "8"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr(" SOURCE.gguf OUT.gguf FTYPE\n"));
  EXPECT_THAT(text.out, Not(HasSubstr("OUT.gguf -1")));
}

TEST_F(CompareQuantizationsTest, BudgetBelowTheSmallestMixKeepsRowsAndTotals) {
  v1::CompareQuantizationsRequest req = Request({"q8_0.gguf", "q4_0.gguf"});
  req.set_budget_bits_per_weight(1);
  auto got = Compare(req);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->rows.size(), 3u);
  ASSERT_EQ(got->summary.totals_size(), 2);
  // The least mix: each tensor from its smallest quantization.
  int64_t least = 0, elements = 0;
  for (const v1::CompareRow& row : got->rows) {
    least += std::min(row.cells(0).bytes(), row.cells(1).bytes());
    elements += row.count();
  }
  const v1::CompareMix& mix = got->summary.mix();
  EXPECT_TRUE(mix.budget_unmet());
  EXPECT_EQ(mix.budget_bytes(), elements / 8);
  EXPECT_EQ(mix.least_bytes(), least);
  EXPECT_DOUBLE_EQ(mix.least_bits_per_weight(),
                   static_cast<double>(least) * 8 / elements);
  EXPECT_EQ(mix.choices_size(), 0);

  req.set_budget_bytes(least);  // the least budget there is: a mix
  auto fits = Compare(req);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_FALSE(fits->summary.mix().budget_unmet());
  EXPECT_EQ(fits->summary.mix().bytes(), least);

  const CommandResult json =
      Cli(true, {"q8_0.gguf", "q4_0.gguf"}, {"--budget-bpw", "1"});
  EXPECT_EQ(json.exit_code, kExitThreshold) << json.err;
  const std::vector<std::string> lines =
      absl::StrSplit(json.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u);  // three rows, then the summary
  const nlohmann::json summary = nlohmann::json::parse(lines.back());
  EXPECT_EQ(summary["summary"]["mix"]["budgetUnmet"], true);
  EXPECT_EQ(summary["summary"]["mix"]["leastBytes"], std::to_string(least));
  EXPECT_EQ(summary["summary"]["totals"].size(), 2u);

  const CommandResult text =
      Cli(false, {"q8_0.gguf", "q4_0.gguf"}, {"--budget-bpw", "1"});
  EXPECT_EQ(text.exit_code, kExitThreshold) << text.err;
  for (const v1::CompareRow& row : got->rows) {
    EXPECT_THAT(text.out, HasSubstr(row.reference_name()));  // the matrix
  }
  EXPECT_THAT(text.out, HasSubstr("SQUARED ERROR"));  // the totals
}

TEST_F(CompareQuantizationsTest, ProgressCountsThePairsStoredBytes) {
  auto got = Compare(Request({"q8_0.gguf", "q4_0.gguf"}));
  ASSERT_TRUE(got.ok()) << got.status();
  int64_t total = 0;
  for (const v1::CompareRow& row : got->rows) {
    for (const v1::CompareCell& c : row.cells()) {
      total += c.bytes() + row.count() * 4;  // and the F32 source's
    }
  }
  ASSERT_FALSE(got->progress.empty());
  int64_t last = 0;
  for (const v1::DiffProgress& p : got->progress) {
    EXPECT_EQ(p.bytes_total(), total);
    EXPECT_GE(p.bytes_done(), last);
    last = p.bytes_done();
  }
  EXPECT_EQ(got->progress.front().bytes_done(), 0);
  EXPECT_EQ(got->progress.back().bytes_done(), total);
}

TEST_F(CompareQuantizationsTest, FlagsTheCliCanCheckAreUsageErrors) {
  const std::vector<std::pair<std::string, std::string>> wrong = {
      {"--budget-bpw", "0"},
      {"--budget-bpw", "-3"},
      {"--budget-bpw", "nan"},
      {"--budget-bpw", "inf"},
      {"--budget-bytes", "0"},
      {"--budget-bytes", "-5"},
      {"--budget-bytes", "99999999999999999999"},
      {"--budget-bpw", "1e308"},   // past int64 bytes for any one element
      {"--budget-bpw", "1e-300"},  // no byte over the tensors compared
      {"--imatrix", ""},           // an unset shell variable, as diff's
      {"--base", "7"},
      {"--base", "-1"},
  };
  for (const auto& [flag, value] : wrong) {
    const CommandResult r =
        // "=" keeps "-3" a value; an empty one is its own argument.
        Cli(true, {"q8_0.gguf", "q4_0.gguf"},
            value.empty() ? std::vector<std::string>{flag, value}
                          : std::vector<std::string>{flag + "=" + value});
    EXPECT_EQ(r.exit_code, kExitUsage) << flag << " " << value << r.err;
    const absl::Status s = CliJsonErrorOf(r.out);
    EXPECT_THAT(s, HasReason(ErrorReason::kRequestInvalid)) << flag << value;
    EXPECT_THAT(s, HasMetadata("field", flag == "--imatrix" ? "imatrix" : flag))
        << value;
  }
}

TEST_F(CompareQuantizationsTest, TheServerRefusesWhatTheCliRefuses) {
  v1::CompareQuantizationsRequest empty = Request({"q8_0.gguf", "q4_0.gguf"});
  empty.set_imatrix("");  // set, but empty
  EXPECT_THAT(Compare(empty).status(), HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(Compare(empty).status(), HasMetadata("field", "imatrix"));
  for (double bpw : {1e-300, 1e308}) {
    v1::CompareQuantizationsRequest req = Request({"q8_0.gguf", "q4_0.gguf"});
    req.set_budget_bits_per_weight(bpw);
    EXPECT_THAT(Compare(req).status(), HasReason(ErrorReason::kRequestInvalid))
        << bpw;
    EXPECT_THAT(Compare(req).status(),
                HasMetadata("field", "budget_bits_per_weight"))
        << bpw;
  }
  // Little more than a byte over the 576 elements compared: applied.
  v1::CompareQuantizationsRequest least = Request({"q8_0.gguf", "q4_0.gguf"});
  least.set_budget_bits_per_weight(8.5 / 576);
  auto got = Compare(least);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->summary.mix().budget_bytes(), 1);
}

// The trial: the same matrix times 0.01, 1 and 100 gave three mixes. A
// tensor the matrix does not weigh counts at its mean importance, so every
// term scales with the matrix and no choice moves.
TEST_F(CompareQuantizationsTest, ImatrixScaleChangesNoChoice) {
  // Room for one of the two matrices in Q8_0, the other in Q4_0: which one
  // gets Q8_0 weighs attn_q's weighted error against attn_k's unweighted.
  const int64_t budget = 64 * 4 + 272 + 144;
  std::vector<Compared> got;
  for (const char* imatrix :
       {"attn_q-x0.01.dat", "attn_q-x1.dat", "attn_q-x100.dat"}) {
    v1::CompareQuantizationsRequest req =
        Request({"q8_0.gguf", "q4_0.gguf", "q8_0-noftype.gguf"});
    req.set_imatrix(imatrix);
    req.set_budget_bytes(budget);
    auto c = Compare(req);
    ASSERT_TRUE(c.ok()) << imatrix << c.status();
    EXPECT_THAT(c->summary.unweighted(),
                ::testing::ElementsAre("blk.0.attn_k.weight",
                                       "blk.0.attn_norm.weight"));
    got.push_back(*std::move(c));
  }
  const v1::CompareSummary& one = got[1].summary;
  ASSERT_EQ(one.mix().choices_size(), 3);
  for (const Compared& c : {got[0], got[2]}) {
    const v1::CompareSummary& s = c.summary;
    // The factor is the matrix's mean: it scales with it (float weights).
    EXPECT_NEAR(s.unweighted_factor() / one.unweighted_factor(),
                s.totals(0).weighted_error() / one.totals(0).weighted_error(),
                1e-5 * s.unweighted_factor() / one.unweighted_factor());
    ASSERT_EQ(s.mix().choices_size(), one.mix().choices_size());
    for (int k = 0; k < one.mix().choices_size(); ++k) {
      EXPECT_EQ(s.mix().choices(k).quantization(),
                one.mix().choices(k).quantization())
          << one.mix().choices(k).reference_name();
    }
    ASSERT_EQ(s.totals_size(), one.totals_size());
    for (int q = 0; q < one.totals_size(); ++q) {
      EXPECT_THAT(s.totals(q).dominated_by(),
                  ::testing::ElementsAreArray(one.totals(q).dominated_by()))
          << q;
    }
    ASSERT_EQ(s.layers_size(), one.layers_size());
    for (int l = 0; l < one.layers_size(); ++l) {
      EXPECT_THAT(s.layers(l).dominated(),
                  ::testing::ElementsAreArray(one.layers(l).dominated()));
    }
  }
  // The factor: the mean of the 64 weights, beside attn_q's weighted error.
  std::vector<float> w = testing::Gaussian(64, 9);
  double mean = 0;
  for (float x : w) mean += (x * x + 0.1f);
  EXPECT_NEAR(one.unweighted_factor(), mean / 64, 1e-6 * mean / 64);
  // Rows by name: attn_k and the norm unweighted, attn_q weighted.
  const v1::CompareRow& attn_k = got[1].rows[0];
  const v1::CompareRow& norm = got[1].rows[1];
  const v1::CompareRow& attn_q = got[1].rows[2];
  ASSERT_EQ(attn_q.reference_name(), "blk.0.attn_q.weight");
  for (int q = 0; q < 3; ++q) {
    EXPECT_DOUBLE_EQ(
        one.totals(q).weighted_error(),
        one.unweighted_factor() * (attn_k.cells(q).sum_squared_error() +
                                   norm.cells(q).sum_squared_error()) +
            attn_q.cells(q).weighted_error())
        << q;
  }
  // Said in the text, with the factor.
  const CommandResult text = Cli(false, {"q8_0.gguf", "q4_0.gguf"},
                                 {"--imatrix", *root_ + "/attn_q-x1.dat"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  // As the CLI prints numbers (NumberText, %.6g).
  EXPECT_THAT(text.out,
              HasSubstr(absl::StrFormat("%.6g", one.unweighted_factor())));
}

// The trial: a Hugging Face copy beside GGUFs with a GGUF imatrix was
// weighed nowhere, yet nothing was said and its W SQNR read 0.00.
TEST_F(CompareQuantizationsTest, QuantizationWeighedNowhereIsSaidSo) {
  const std::vector<std::string> argv = {CliPath(),
                                         "compare",
                                         *root_ + "/hf",
                                         *root_ + "/hf-q8_0.gguf",
                                         *root_ + "/hf-bf16",
                                         "--imatrix",
                                         *root_ + "/gguf-names.dat"};
  const CommandResult text = RunCommand(argv);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.err, HasSubstr("warning: the imatrix weighs none of the 3 "
                                  "tensors of [1]"));
  EXPECT_THAT(text.err, Not(HasSubstr("of [0]")));
  // The totals' row of [1]: W SQNR dB (the 8th column) is "-", not 0.00.
  bool seen = false;
  for (absl::string_view line : absl::StrSplit(text.out, '\n')) {
    const std::vector<std::string> cols =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (cols.size() != 10 || cols[0] != "[1]") continue;
    seen = true;
    EXPECT_EQ(cols[7], "-") << line;
  }
  EXPECT_TRUE(seen) << text.out;

  std::vector<std::string> json_argv = argv;
  json_argv.insert(json_argv.begin() + 1, "--json");
  const CommandResult json = RunCommand(json_argv);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const std::vector<std::string> lines =
      absl::StrSplit(json.out, '\n', absl::SkipEmpty());
  const nlohmann::json summary = nlohmann::json::parse(lines.back())["summary"];
  EXPECT_EQ(summary["totals"][0]["tensorsWeighted"], "2");
  EXPECT_EQ(summary["totals"][1]["tensorsWeighted"], "0");
  EXPECT_EQ(summary["unweightedFactor"], 1.0);  // every weight 1
}

// compare --help's examples run as written, on this suite's files.
TEST_F(CompareQuantizationsTest, HelpExamplesRun) {
  const CommandResult help = RunCommand({CliPath(), "compare", "--help"});
  ASSERT_EQ(help.exit_code, 0);
  const size_t at = help.out.find("Examples:\n");
  ASSERT_NE(at, std::string::npos) << help.out;
  const std::vector<std::pair<std::string, std::string>> files = {
      {"model-f32.gguf", *root_ + "/source.gguf"},
      {"model-q8_0.gguf", *root_ + "/q8_0.gguf"},
      {"model-q4_k_m.gguf", *root_ + "/q4_0.gguf"},
      {"imatrix.dat", *root_ + "/attn_q-x1.dat"},
      {"compare.html", testing::MakeTempDir() + "/compare.html"}};
  int run = 0;
  for (absl::string_view line :
       absl::StrSplit(help.out.substr(at), '\n', absl::SkipEmpty())) {
    if (!absl::ConsumePrefix(&line, "  tensormorph ")) continue;
    std::vector<std::string> argv = {CliPath()};
    for (absl::string_view word :
         absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      std::string arg(absl::StripPrefix(absl::StripSuffix(word, "'"), "'"));
      for (const auto& [name, path] : files) {
        if (arg == name) arg = path;
      }
      argv.push_back(arg);
    }
    const CommandResult r = RunCommand(argv);
    // Ran: 0, or 3 for a budget below this tiny model's least mix (its F32
    // norm is a third of it), a gate the data tripped, not a usage error.
    EXPECT_THAT(r.exit_code, ::testing::AnyOf(0, kExitThreshold))
        << line << "\n"
        << r.err;
    ++run;
  }
  EXPECT_GE(run, 3);
}

TEST_F(CompareQuantizationsTest, FilterIsOnTheSourcesNamesAcrossFormats) {
  v1::CompareQuantizationsRequest req;
  req.set_source("hf");
  req.add_quantizations("hf-q8_0.gguf");
  req.add_quantizations("hf-bf16");
  req.set_filter("model.layers.0.*");
  auto got = Compare(req);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->rows.size(), 2u);
  EXPECT_EQ(got->rows[0].reference_name(),
            "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(got->rows[1].reference_name(),
            "model.layers.0.mlp.down_proj.weight");
  for (const v1::CompareRow& row : got->rows) {
    for (const v1::CompareCell& c : row.cells()) EXPECT_TRUE(c.present());
  }
  EXPECT_EQ(got->rows[1].cells(0).name(), "blk.0.ffn_down.weight");
  EXPECT_EQ(got->summary.not_shared_size(), 0);

  req.set_filter("blk.0.*");  // a quantization's own names: no row
  EXPECT_THAT(Compare(req).status(), HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(Compare(req).status(), HasMetadata("field", "filter"));
}

TEST_F(CompareQuantizationsTest, UndecodableCellIsSaidSoAndLeftOutOfTheMix) {
  v1::CompareQuantizationsRequest req =
      Request({"q8_0.gguf", "q4_0-undecodable.gguf"});
  req.set_budget_bits_per_weight(12);
  auto got = Compare(req);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(got->summary.not_shared(),
              ::testing::ElementsAre("blk.0.attn_q.weight"));
  EXPECT_THAT(got->summary.undecodable(),
              ::testing::ElementsAre("blk.0.attn_q.weight in [1]"));
  EXPECT_THAT(got->summary.mix().left_out(),
              ::testing::ElementsAre("blk.0.attn_q.weight"));
  EXPECT_EQ(got->summary.mix().choices_size(), 2);

  const CommandResult text = Cli(false, {"q8_0.gguf", "q4_0-undecodable.gguf"},
                                 {"--budget-bpw", "12"});
  EXPECT_EQ(text.exit_code, 4) << text.err;  // some tensor cannot be decoded
  EXPECT_THAT(text.out, HasSubstr("blk.0.attn_q.weight in [1]"));
  EXPECT_THAT(text.out, Not(HasSubstr("not held by every quantization")));
  // The figures after a column's types line up: Q4_0 padded to the
  // unknown type's name, F32 to Q8_0.
  const std::string unknown = "ggml type 200 (unknown)";
  EXPECT_THAT(
      text.out,
      HasSubstr("Q4_0" + std::string(unknown.size() - 4 + 1, ' ') + "4.50 "));
  EXPECT_THAT(text.out, HasSubstr(unknown + " (cannot decode)"));
  EXPECT_THAT(text.out, HasSubstr("F32  32.00 inf"));
}

TEST_F(CompareQuantizationsTest, SameFileTwiceIsWarnedOfNotRefused) {
  const CommandResult twice = Cli(false, {"q8_0.gguf", "q8_0.gguf"}, {});
  EXPECT_EQ(twice.exit_code, 0) << twice.err;
  EXPECT_THAT(twice.err, HasSubstr("warning: [1] is [0]'s file"));
  const CommandResult source = Cli(
      false,
      {"q8_0.gguf", "../" + std::filesystem::path(*root_).filename().string() +
                        "/source.gguf"},
      {});
  EXPECT_EQ(source.exit_code, 0) << source.err;
  EXPECT_THAT(source.err, HasSubstr("warning: [1] is the source's file"));
  const CommandResult quantized =
      RunCommand({CliPath(), "compare", *root_ + "/q8_0.gguf",
                  *root_ + "/q4_0.gguf", *root_ + "/q8_0-noftype.gguf"});
  EXPECT_EQ(quantized.exit_code, 0) << quantized.err;
  EXPECT_THAT(quantized.err, HasSubstr("warning: the source"));
  const CommandResult distinct = Cli(false, {"q8_0.gguf", "q4_0.gguf"}, {});
  EXPECT_THAT(distinct.err, Not(HasSubstr("warning")));
}

}  // namespace
}  // namespace tensormorph
