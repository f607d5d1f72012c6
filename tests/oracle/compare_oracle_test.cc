// CompareQuantizations against llama.cpp itself: the test model quantized by
// the pinned llama.cpp into eight files (two with an importance matrix),
// compared by a real server on loopback. Every cell equals that tensor's
// QuantDiff report; sizes equal ggml's row sizes; the dominated set is right
// where it is known by construction; the budget's mix, applied through
// llama_model_quantize's tensor-type overrides, gives the predicted file
// size to the byte and, diffed again, the predicted error; the knapsack
// agrees with trying every mix; and the CLI (embedded) prints the same mix.
// With an importance matrix (written here, lacking one matrix's entry) the
// weighted cells equal QuantDiff's with the same matrix, and the mix of
// quantizations made with it is what llama.cpp makes with it.
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/compare/dominance.h"
#include "core/compare/llama_mix.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/oracle/gguf_listing.h"
#include "tests/oracle/llama_oracle_support.h"
#include "tests/oracle/llama_quantizer.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/loopback_server.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::LlamaQuantizer;
using ::tensormorph::testing::LlamaTensorType;
using ::tensormorph::testing::LoopbackServer;

struct Quantized {
  std::string file;  // under the server's root
  int ftype = 0;
  bool imatrix = false;
};

// Without an importance matrix first (the mix needs one kind), then two
// with the test model's.
const std::vector<Quantized>& Files() {
  static const auto* files = new std::vector<Quantized>{
      {"q8_0.gguf", 7},
      {"q6_k.gguf", 18},
      {"q5_k_m.gguf", 17},
      {"q4_k_m.gguf", 15},
      {"q4_0.gguf", 2},
      {"q3_k_m.gguf", 12},
      {"q4_k_s-imatrix.gguf", 14, true},
      {"iq4_xs-imatrix.gguf", 30, true},
  };
  return *files;
}
constexpr int kPlainFiles = 6;
constexpr int kBaseQ4KM = 3;

// The test model's importance matrix but for one matrix of layer 0 (the
// first by name), which it has no entry of: written to the server's root
// as a GGUF imatrix and given to llama.cpp for WeightedFiles().
struct PartialImatrix {
  testing::Imatrix weights;
  std::string dropped;
};
const PartialImatrix& Partial() {
  static const auto* partial = [] {
    auto* p = new PartialImatrix{testing::TestModelImatrix(), ""};
    for (const auto& [name, w] : p->weights) {
      if (name.rfind("blk.0.", 0) == 0) {
        p->dropped = name;
        break;
      }
    }
    p->weights.erase(p->dropped);
    return p;
  }();
  return *partial;
}
constexpr char kPartialImatrix[] = "partial.imatrix.gguf";
// Quantized with Partial(): the weighted mix's choices.
const std::vector<Quantized>& WeightedFiles() {
  static const auto* files = new std::vector<Quantized>{
      {"q6_k-partial.gguf", 18, true},
      {"q4_k_m-partial.gguf", 15, true},
      {"q3_k_m-partial.gguf", 12, true},
  };
  return *files;
}
constexpr int kWeightedBaseQ4KM = 1;

class CompareOracleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const LlamaQuantizer& quantizer = testing::SharedLlamaQuantizer();
    auto model = testing::QuantizeTestModelCached(quantizer, {7, "Q8_0"});
    ASSERT_TRUE(model.ok()) << model.status();
    root_ = new std::string(testing::MakeTempDir());
    std::filesystem::copy_file(model->f32_gguf, *root_ + "/source.gguf");
    const testing::Imatrix imatrix = testing::TestModelImatrix();
    for (const Quantized& q : Files()) {
      ASSERT_TRUE(quantizer
                      .Quantize(*root_ + "/source.gguf", *root_ + "/" + q.file,
                                q.ftype, q.imatrix ? &imatrix : nullptr)
                      .ok())
          << q.file;
    }
    ASSERT_FALSE(Partial().dropped.empty());
    testing::WriteFile(*root_ + "/" + kPartialImatrix,
                       testing::GgufImatrixFile(Partial().weights));
    for (const Quantized& q : WeightedFiles()) {
      ASSERT_TRUE(quantizer
                      .Quantize(*root_ + "/source.gguf", *root_ + "/" + q.file,
                                q.ftype, &Partial().weights)
                      .ok())
          << q.file;
    }
    // Four workers: three in the background lane, so that cells run in
    // parallel and rows still arrive in order.
    server_ = new LoopbackServer(testing::StartLoopbackServer({*root_}, 4));
  }

  // The server ends before the process does: a handler still finishing its
  // last call (its log line) must not meet the statics exit destroys.
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  static Client& client() { return *server_->client; }

  struct Compared {
    std::vector<v1::CompareRow> rows;
    v1::CompareSummary summary;
  };
  static absl::StatusOr<Compared> Compare(v1::CompareQuantizationsRequest req) {
    Compared out;
    absl::Status s =
        client().CompareQuantizations(req, [&](const v1::CompareEvent& e) {
          if (e.has_row()) out.rows.push_back(e.row());
          if (e.has_summary()) out.summary = e.summary();
          return true;
        });
    if (!s.ok()) return s;
    return out;
  }
  static v1::CompareQuantizationsRequest Request(
      int first, int last, const std::vector<Quantized>& files = Files()) {
    v1::CompareQuantizationsRequest req;
    req.set_source("source.gguf");
    for (int q = first; q < last; ++q) req.add_quantizations(files[q].file);
    return req;
  }

  // QuantDiff's reports of `file` against the source, by tensor name.
  static std::map<std::string, v1::TensorDiffReport> Diff(
      const std::string& file, const std::string& imatrix = "") {
    v1::QuantDiffRequest req;
    req.set_checkpoint(file);
    req.set_reference("source.gguf");
    req.set_imatrix(imatrix);
    std::map<std::string, v1::TensorDiffReport> out;
    EXPECT_TRUE(client()
                    .QuantDiff(req,
                               [&](const v1::QuantDiffEvent& e) {
                                 if (e.has_tensor()) {
                                   out[e.tensor().name()] = e.tensor();
                                 }
                                 return true;
                               })
                    .ok());
    return out;
  }

  static std::string* root_;
  static LoopbackServer* server_;
};
std::string* CompareOracleTest::root_ = nullptr;
LoopbackServer* CompareOracleTest::server_ = nullptr;

TEST_F(CompareOracleTest, EveryCellEqualsThatTensorsQuantDiffReport) {
  auto got = Compare(Request(0, static_cast<int>(Files().size())));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_FALSE(got->rows.empty());
  for (size_t i = 1; i < got->rows.size(); ++i) {
    EXPECT_LT(got->rows[i - 1].reference_name(), got->rows[i].reference_name());
  }
  for (size_t q = 0; q < Files().size(); ++q) {
    const auto reports = Diff(Files()[q].file);
    ASSERT_EQ(reports.size(), got->rows.size()) << Files()[q].file;
    for (const v1::CompareRow& row : got->rows) {
      const v1::CompareCell& c = row.cells(static_cast<int>(q));
      ASSERT_TRUE(c.present()) << row.reference_name();
      const v1::TensorDiffReport& r = reports.at(c.name());
      EXPECT_EQ(c.scheme(), r.scheme());
      EXPECT_EQ(c.sqnr_db(), r.sqnr_db()) << c.name();
      EXPECT_EQ(c.max_excess_steps(), r.max_excess_steps()) << c.name();
      EXPECT_EQ(c.clipped(), r.clipped()) << c.name();
      EXPECT_EQ(c.zeroed_groups(), r.zeroed_groups()) << c.name();
      EXPECT_EQ(c.mse(), r.mse()) << c.name();
      EXPECT_EQ(c.sum_squared_error(),
                r.mse() * static_cast<double>(r.count()));
    }
  }
}

TEST_F(CompareOracleTest, BytesAreGgmlsRowSizes) {
  auto got = Compare(Request(0, static_cast<int>(Files().size())));
  ASSERT_TRUE(got.ok()) << got.status();
  for (size_t q = 0; q < Files().size(); ++q) {
    auto listed = testing::ListGguf(*root_ + "/" + Files()[q].file,
                                    testing::GgmlRowBytes);
    ASSERT_TRUE(listed.ok()) << listed.status();
    std::map<std::string, int64_t> bytes;
    for (const auto& t : listed->tensors) {
      bytes[t.name] = testing::GgmlRowBytes(t.type, t.ne[0]) *
                      (t.ne.size() > 1 ? t.ne[1] : 1);
    }
    for (const v1::CompareRow& row : got->rows) {
      const v1::CompareCell& c = row.cells(static_cast<int>(q));
      EXPECT_EQ(c.bytes(), bytes.at(c.name())) << c.name();
      EXPECT_EQ(c.bits_per_weight(), c.bytes() * 8.0 / row.count());
    }
  }
}

TEST_F(CompareOracleTest, DominatedSetOfAConstructedCase) {
  // The source's values are all BF16 values: its BF16 file is exact at 16
  // bits, so the F32 source itself (exact at 32) is dominated by it, and
  // F16 (as large) is dominated by it where F16 loses anything; Q8_0 is the
  // smallest and dominated by none.
  const LlamaQuantizer& quantizer = testing::SharedLlamaQuantizer();
  ASSERT_TRUE(
      quantizer
          .Quantize(*root_ + "/source.gguf", *root_ + "/bf16.gguf", 32, nullptr)
          .ok());
  ASSERT_TRUE(
      quantizer
          .Quantize(*root_ + "/source.gguf", *root_ + "/f16.gguf", 1, nullptr)
          .ok());
  v1::CompareQuantizationsRequest req;
  req.set_source("source.gguf");
  for (const char* q : {"source.gguf", "bf16.gguf", "f16.gguf", "q8_0.gguf"}) {
    req.add_quantizations(q);
  }
  auto got = Compare(req);
  ASSERT_TRUE(got.ok()) << got.status();
  const auto& t = got->summary.totals();
  ASSERT_EQ(t.size(), 4);
  EXPECT_EQ(t[0].sum_squared_error(), 0);
  EXPECT_EQ(t[1].sum_squared_error(), 0);
  EXPECT_GT(t[0].bytes(), t[1].bytes());
  EXPECT_EQ(t[1].bytes(), t[2].bytes());
  EXPECT_GT(t[2].sum_squared_error(), 0);  // F16 rounds the smallest values
  EXPECT_THAT(t[0].dominated_by(), ::testing::ElementsAre(1));
  EXPECT_THAT(t[1].dominated_by(), ::testing::IsEmpty());
  EXPECT_THAT(t[2].dominated_by(), ::testing::ElementsAre(1));
  EXPECT_THAT(t[3].dominated_by(), ::testing::IsEmpty());
  ASSERT_FALSE(got->summary.layers().empty());
  for (const v1::CompareLayer& l : got->summary.layers()) {
    EXPECT_THAT(l.dominated(), ::testing::Contains(0)) << l.layer();
    EXPECT_THAT(l.dominated(), ::testing::Not(::testing::Contains(1)));
  }
}

// The llama.cpp overrides of `mix`, with the ggml type of each.
std::vector<LlamaTensorType> Overrides(const v1::CompareMix& mix) {
  std::map<std::string, int> type_of;
  for (const v1::CompareChoice& c : mix.choices()) {
    type_of[LlamaTensorPattern(c.name())] = c.ggml_type();
  }
  std::vector<LlamaTensorType> out;
  for (const std::string& o : mix.tensor_type_overrides()) {
    const std::string pattern = o.substr(0, o.rfind('='));
    out.push_back({pattern, type_of.at(pattern)});
  }
  return out;
}

TEST_F(CompareOracleTest, BudgetMixIsWhatLlamaCppMakesOfItsOverrides) {
  auto plain = Compare(Request(0, kPlainFiles));
  ASSERT_TRUE(plain.ok()) << plain.status();
  // Halfway between the smallest quantization and the largest.
  double least = 1e9, most = 0;
  for (const v1::CompareTotals& t : plain->summary.totals()) {
    least = std::min(least, t.bits_per_weight());
    most = std::max(most, t.bits_per_weight());
  }
  v1::CompareQuantizationsRequest req = Request(0, kPlainFiles);
  req.set_budget_bits_per_weight((least + most) / 2);
  req.set_base(kBaseQ4KM);
  auto got = Compare(req);
  ASSERT_TRUE(got.ok()) << got.status();
  const v1::CompareMix& mix = got->summary.mix();
  EXPECT_LE(mix.bytes(), mix.budget_bytes());
  EXPECT_LE(mix.bits_per_weight(), (least + most) / 2);
  EXPECT_EQ(mix.base_ftype(), Files()[kBaseQ4KM].ftype);
  ASSERT_GT(mix.tensor_type_overrides_size(), 0);
  // A mix indeed: tensors from more than one quantization.
  std::set<int> from;
  for (const v1::CompareChoice& c : mix.choices())
    from.insert(c.quantization());
  EXPECT_GE(from.size(), 2u);
  // No single quantization within the budget beats the mix.
  for (const v1::CompareTotals& t : got->summary.totals()) {
    if (t.bytes() <= mix.budget_bytes()) {
      EXPECT_LE(mix.sum_squared_error(), t.sum_squared_error());
    }
  }

  const std::string mixed = *root_ + "/mix.gguf";
  ASSERT_TRUE(testing::SharedLlamaQuantizer()
                  .Quantize(*root_ + "/source.gguf", mixed, mix.base_ftype(),
                            nullptr, 1, Overrides(mix))
                  .ok());
  EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(mixed)),
            mix.predicted_file_size());
  // Every override took effect: the file holds the types chosen.
  auto listed = testing::ListGguf(mixed, testing::GgmlRowBytes);
  ASSERT_TRUE(listed.ok()) << listed.status();
  std::map<std::string, uint32_t> type_of;
  for (const auto& t : listed->tensors) type_of[t.name] = t.type;
  for (const v1::CompareChoice& c : mix.choices()) {
    EXPECT_EQ(static_cast<int>(type_of.at(c.name())), c.ggml_type())
        << c.name();
  }
  // Diffed again, the errors add up to the prediction (in the mix's order).
  const auto reports = Diff("mix.gguf");
  double error = 0;
  for (const v1::CompareChoice& c : mix.choices()) {
    const v1::TensorDiffReport& r = reports.at(c.name());
    error += r.mse() * static_cast<double>(r.count());
  }
  EXPECT_NEAR(error, mix.sum_squared_error(), 1e-9 * mix.sum_squared_error());
}

TEST_F(CompareOracleTest, KnapsackAgreesWithTryingEveryMix) {
  // One layer (7 matrices, 2 norms) of four quantizations: 4^9 mixes.
  v1::CompareQuantizationsRequest req = Request(1, 5);
  req.set_filter("blk.0.*");
  auto all = Compare(req);
  ASSERT_TRUE(all.ok()) << all.status();
  const auto& rows = all->rows;
  ASSERT_EQ(rows.size(), 9u);
  const int n = req.quantizations_size();
  int64_t elements = 0;
  for (const auto& r : rows) elements += r.count();
  for (double bpw : {4.8, 5.3, 6.0}) {
    req.set_budget_bits_per_weight(bpw);
    auto got = Compare(req);
    ASSERT_TRUE(got.ok()) << got.status();
    const v1::CompareMix& mix = got->summary.mix();
    const int64_t budget = static_cast<int64_t>(bpw * elements / 8);
    EXPECT_EQ(mix.budget_bytes(), budget);
    // Every mix, in odometer (lexicographic) order: least error, then
    // fewest bytes, then the first.
    std::vector<int> pick(rows.size(), 0), best;
    double best_error = std::numeric_limits<double>::infinity();
    int64_t best_bytes = 0;
    while (true) {
      int64_t bytes = 0;
      double error = 0;
      for (size_t i = 0; i < rows.size(); ++i) {
        bytes += rows[i].cells(pick[i]).bytes();
        error += rows[i].cells(pick[i]).sum_squared_error();
      }
      if (bytes <= budget &&
          (error < best_error || (error == best_error && bytes < best_bytes))) {
        best = pick;
        best_error = error;
        best_bytes = bytes;
      }
      size_t k = rows.size();
      while (k > 0 && ++pick[k - 1] == n) pick[--k] = 0;
      if (k == 0) break;
    }
    ASSERT_FALSE(best.empty()) << bpw;
    EXPECT_EQ(mix.sum_squared_error(), best_error) << bpw;
    EXPECT_EQ(mix.bytes(), best_bytes) << bpw;
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(mix.choices(static_cast<int>(i)).quantization(), best[i])
          << bpw << " " << rows[i].reference_name();
    }
  }
}

// What an unweighted squared error is multiplied by beside weighted ones:
// the mean of every weight the matrix holds, summed in double in name
// order (the weights are Partial()'s as written: counts of 1).
double MeanImportance(const testing::Imatrix& m) {
  double sum = 0;
  int64_t n = 0;
  for (const auto& [name, w] : m) {
    for (float x : w) sum += x;
    n += static_cast<int64_t>(w.size());
  }
  return sum / static_cast<double>(n);
}

// The error a weighted comparison adds up for one tensor, from QuantDiff's
// report with the imatrix: weighted where it weighs, elsewhere unweighted
// times the matrix's mean importance.
double WeightedCost(const v1::TensorDiffReport& r) {
  return r.imatrix_use() == v1::IMATRIX_USE_WEIGHTED
             ? r.weighted_sq_err()
             : MeanImportance(Partial().weights) *
                   (r.mse() * static_cast<double>(r.count()));
}

TEST_F(CompareOracleTest, WeightedCellsEqualQuantDiffWithTheSameImatrix) {
  v1::CompareQuantizationsRequest req =
      Request(0, static_cast<int>(Files().size()));
  req.set_imatrix(kPartialImatrix);
  auto got = Compare(req);
  ASSERT_TRUE(got.ok()) << got.status();
  const v1::CompareSummary& s = got->summary;
  EXPECT_TRUE(s.weighted());
  EXPECT_EQ(s.unweighted_factor(), MeanImportance(Partial().weights));
  const int n = req.quantizations_size();
  std::vector<double> cost(n, 0), unweighted(n, 0);
  std::vector<int64_t> weighed(n, 0);
  std::set<std::string> not_weighed;
  std::map<std::string, std::vector<double>> layer_cost;  // per quantization
  for (int q = 0; q < n; ++q) {
    const auto reports = Diff(Files()[q].file, kPartialImatrix);
    ASSERT_EQ(reports.size(), got->rows.size()) << Files()[q].file;
    for (const v1::CompareRow& row : got->rows) {
      const v1::CompareCell& c = row.cells(q);
      const v1::TensorDiffReport& r = reports.at(c.name());
      EXPECT_EQ(c.imatrix_use(), r.imatrix_use()) << c.name();
      EXPECT_EQ(c.imatrix_note(), r.imatrix_note()) << c.name();
      EXPECT_EQ(c.weighted_error(), r.weighted_sq_err()) << c.name();
      EXPECT_EQ(c.weighted_source_energy(), r.weighted_source_energy());
      EXPECT_EQ(c.weighted_sqnr_db(), r.weighted_sqnr_db()) << c.name();
      EXPECT_EQ(c.sqnr_db(), r.sqnr_db()) << c.name();  // unweighted beside
      cost[q] += WeightedCost(r);
      unweighted[q] += r.mse() * static_cast<double>(r.count());
      if (const std::string l = LayerOf(row.reference_name()); !l.empty()) {
        layer_cost[l].resize(n);
        layer_cost[l][q] += WeightedCost(r);
      }
      if (r.imatrix_use() == v1::IMATRIX_USE_WEIGHTED) {
        ++weighed[q];
      } else {
        not_weighed.insert(row.reference_name());
      }
    }
  }
  // The dropped matrix is reported missing, as diff reports it.
  ASSERT_TRUE(not_weighed.count(Partial().dropped));
  for (const v1::CompareRow& row : got->rows) {
    if (row.reference_name() != Partial().dropped) continue;
    for (const v1::CompareCell& c : row.cells()) {
      EXPECT_EQ(c.imatrix_use(), v1::IMATRIX_USE_MISSING);
    }
  }
  EXPECT_THAT(s.unweighted(),
              ::testing::UnorderedElementsAreArray(not_weighed));
  ASSERT_EQ(s.totals_size(), n);
  for (int q = 0; q < n; ++q) {
    const v1::CompareTotals& t = s.totals(q);
    EXPECT_EQ(t.weighted_error(), cost[q]) << q;  // both in name order
    EXPECT_EQ(t.sum_squared_error(), unweighted[q]) << q;
    EXPECT_EQ(t.tensors_weighted(), weighed[q]) << q;
    EXPECT_GT(weighed[q], 10) << q;  // every matrix but the dropped one
    // Dominance on the weighted error: another no larger and no worse, and
    // strictly one of them.
    std::vector<int> by;
    for (int r = 0; r < n; ++r) {
      const v1::CompareTotals& o = s.totals(r);
      if (r != q && o.bytes() <= t.bytes() &&
          o.weighted_error() <= t.weighted_error() &&
          (o.bytes() < t.bytes() || o.weighted_error() < t.weighted_error())) {
        by.push_back(r);
      }
    }
    EXPECT_THAT(t.dominated_by(), ::testing::ElementsAreArray(by)) << q;
  }
  // Per layer too: the weighted sums, and dominance on them.
  ASSERT_EQ(static_cast<size_t>(s.layers_size()), layer_cost.size());
  for (const v1::CompareLayer& l : s.layers()) {
    ASSERT_EQ(l.weighted_error_size(), n) << l.layer();
    std::vector<int> dominated;
    for (int q = 0; q < n; ++q) {
      EXPECT_EQ(l.weighted_error(q), layer_cost.at(l.layer())[q]) << l.layer();
      for (int r = 0; r < n; ++r) {
        if (r != q && l.bytes(r) <= l.bytes(q) &&
            l.weighted_error(r) <= l.weighted_error(q) &&
            (l.bytes(r) < l.bytes(q) ||
             l.weighted_error(r) < l.weighted_error(q))) {
          dominated.push_back(q);
          break;
        }
      }
    }
    EXPECT_THAT(l.dominated(), ::testing::ElementsAreArray(dominated))
        << l.layer();
  }
}

TEST_F(CompareOracleTest, WeightedMixIsWhatLlamaCppMakesWithTheSameImatrix) {
  const int n = static_cast<int>(WeightedFiles().size());
  v1::CompareQuantizationsRequest req = Request(0, n, WeightedFiles());
  req.set_imatrix(kPartialImatrix);
  auto whole = Compare(req);
  ASSERT_TRUE(whole.ok()) << whole.status();
  double least = 1e9, most = 0;
  for (const v1::CompareTotals& t : whole->summary.totals()) {
    least = std::min(least, t.bits_per_weight());
    most = std::max(most, t.bits_per_weight());
  }
  req.set_budget_bits_per_weight((least + most) / 2);
  req.set_base(kWeightedBaseQ4KM);
  auto got = Compare(req);
  ASSERT_TRUE(got.ok()) << got.status();
  const v1::CompareMix& mix = got->summary.mix();
  EXPECT_LE(mix.bytes(), mix.budget_bytes());
  EXPECT_EQ(mix.base_ftype(), WeightedFiles()[kWeightedBaseQ4KM].ftype);
  std::set<int> from;
  for (const v1::CompareChoice& c : mix.choices()) {
    from.insert(c.quantization());
  }
  EXPECT_GE(from.size(), 2u);
  // The knapsack minimised the weighted error: no single quantization
  // within the budget is below it.
  for (const v1::CompareTotals& t : got->summary.totals()) {
    if (t.bytes() <= mix.budget_bytes()) {
      EXPECT_LE(mix.weighted_error(), t.weighted_error());
    }
  }

  const std::string mixed = *root_ + "/mix-partial.gguf";
  ASSERT_TRUE(testing::SharedLlamaQuantizer()
                  .Quantize(*root_ + "/source.gguf", mixed, mix.base_ftype(),
                            &Partial().weights, 1, Overrides(mix))
                  .ok());
  EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(mixed)),
            mix.predicted_file_size());
  // Diffed again with the imatrix: the weighted error the mix predicted,
  // and the unweighted one beside it.
  const auto reports = Diff("mix-partial.gguf", kPartialImatrix);
  double weighted = 0, error = 0;
  for (const v1::CompareChoice& c : mix.choices()) {
    const v1::TensorDiffReport& r = reports.at(c.name());
    weighted += WeightedCost(r);
    error += r.mse() * static_cast<double>(r.count());
  }
  EXPECT_GT(mix.weighted_error(), 0);
  EXPECT_NEAR(weighted, mix.weighted_error(), 1e-9 * mix.weighted_error());
  EXPECT_NEAR(error, mix.sum_squared_error(), 1e-9 * mix.sum_squared_error());
}

TEST_F(CompareOracleTest, RefusesWhatItCannotDo) {
  v1::CompareQuantizationsRequest one = Request(0, 1);
  EXPECT_THAT(Compare(one).status(), HasReason(ErrorReason::kRequestInvalid));
  v1::CompareQuantizationsRequest imatrix = Request(0, 2);
  imatrix.set_imatrix("/etc/hostname");  // refused as QuantDiff refuses it
  EXPECT_THAT(Compare(imatrix).status(), HasReason(ErrorReason::kOutsideRoots));
  v1::CompareQuantizationsRequest tiny = Request(0, 2);
  tiny.set_budget_bytes(1000);  // no refusal: the mix says it is unmet
  auto unmet = Compare(tiny);
  ASSERT_TRUE(unmet.ok()) << unmet.status();
  EXPECT_TRUE(unmet->summary.mix().budget_unmet());
  EXPECT_GT(unmet->summary.mix().least_bytes(), 1000);
  v1::CompareQuantizationsRequest base = Request(0, 2);
  base.set_base(2);
  EXPECT_THAT(Compare(base).status(), HasReason(ErrorReason::kRequestInvalid));
  v1::CompareQuantizationsRequest missing = Request(0, 2);
  missing.add_quantizations("absent.gguf");
  EXPECT_THAT(Compare(missing).status(),
              HasReason(ErrorReason::kCheckpointNotFound));
}

TEST_F(CompareOracleTest, ACallItsClientCancelsEndsAndTheServerGoesOn) {
  int rows = 0;
  absl::Status s = client().CompareQuantizations(
      Request(0, static_cast<int>(Files().size())),
      [&](const v1::CompareEvent& e) { return !e.has_row() || ++rows < 2; });
  EXPECT_THAT(s, HasReason(ErrorReason::kCancelled));
  EXPECT_EQ(rows, 2);
  auto again = Compare(Request(0, 2));
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST_F(CompareOracleTest, CliPrintsTheSameMixEmbedded) {
  v1::CompareQuantizationsRequest req = Request(0, kPlainFiles);
  req.set_budget_bits_per_weight(5.5);
  auto got = Compare(req);
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<std::string> argv = {testing::CliPath(), "--json", "compare",
                                   *root_ + "/source.gguf"};
  for (int q = 0; q < kPlainFiles; ++q) {
    argv.push_back(*root_ + "/" + Files()[q].file);
  }
  argv.push_back("--budget-bpw");
  argv.push_back("5.5");
  const testing::CommandResult json = testing::RunCommand(argv);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const std::vector<std::string> lines =
      absl::StrSplit(json.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), got->rows.size() + 1);
  EXPECT_THAT(lines.back(),
              ::testing::HasSubstr(absl::StrCat(
                  "\"predictedFileSize\":\"",
                  got->summary.mix().predicted_file_size(), "\"")));
  argv.erase(argv.begin() + 1);  // the text
  const testing::CommandResult text = testing::RunCommand(argv);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, ::testing::HasSubstr(
                            "--tensor-type '" +
                            got->summary.mix().tensor_type_overrides(0) + "'"));
  EXPECT_THAT(text.out,
              ::testing::HasSubstr(absl::StrCat(
                  "predicted file size ",
                  got->summary.mix().predicted_file_size(), " bytes")));
}

TEST_F(CompareOracleTest, CliPrintsTheWeightedFiguresEmbedded) {
  const int n = static_cast<int>(WeightedFiles().size());
  std::vector<std::string> argv = {testing::CliPath(), "--json", "compare",
                                   *root_ + "/source.gguf"};
  for (int q = 0; q < n; ++q) {
    argv.push_back(*root_ + "/" + WeightedFiles()[q].file);
  }
  argv.insert(argv.end(), {"--imatrix", *root_ + "/" + kPartialImatrix,
                           "--budget-bpw", "5.5"});
  const testing::CommandResult json = testing::RunCommand(argv);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const std::vector<std::string> lines =
      absl::StrSplit(json.out, '\n', absl::SkipEmpty());
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(json.out, ::testing::HasSubstr("\"weightedSqnrDb\":"));
  EXPECT_THAT(lines.back(), ::testing::HasSubstr("\"weighted\":true"));
  EXPECT_THAT(lines.back(), ::testing::HasSubstr("\"unweighted\":["));
  EXPECT_THAT(lines.back(),
              ::testing::HasSubstr("\"" + Partial().dropped + "\""));
  argv.erase(argv.begin() + 1);  // the text
  const testing::CommandResult text = testing::RunCommand(argv);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, ::testing::HasSubstr("W SQNR dB"));
  EXPECT_THAT(text.out, ::testing::HasSubstr("no worse in weighted error"));
  EXPECT_THAT(text.out, ::testing::HasSubstr("weighted error "));
  EXPECT_THAT(text.out, ::testing::HasSubstr(Partial().dropped));
}

// The demo's F32 GGUF (tensormorph-make-demo) carries the keys llama.cpp's
// loader needs: llama-quantize makes a Q4_K_M of it, which compares beside
// the demo's own Q8_0 (what docs/compare.md's trial does).
TEST_F(CompareOracleTest, TheDemosF32GgufQuantizesWithLlamaCpp) {
  const std::string demo = *root_ + "/demo";
  ASSERT_TRUE(testing::WriteDemoCheckpoints(demo));
  ASSERT_TRUE(testing::WriteDemoImatrix(demo + "/imatrix.dat"));
  const LlamaQuantizer& quantizer = testing::SharedLlamaQuantizer();
  const absl::Status made = quantizer.Quantize(
      demo + "/model-f32.gguf", demo + "/llama-q4_k_m.gguf", 15, nullptr);
  ASSERT_TRUE(made.ok()) << made;
  v1::CompareQuantizationsRequest req;
  req.set_source("demo/model-f32.gguf");
  req.add_quantizations("demo/model-q8_0.gguf");
  req.add_quantizations("demo/llama-q4_k_m.gguf");
  req.set_imatrix("demo/imatrix.dat");
  auto got = Compare(req);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->summary.not_shared_size(), 0);
  ASSERT_EQ(got->summary.totals_size(), 2);
  EXPECT_LT(got->summary.totals(1).bytes(), got->summary.totals(0).bytes());
  EXPECT_GT(got->summary.totals(1).tensors_weighted(), 0);
}

}  // namespace
}  // namespace tensormorph
