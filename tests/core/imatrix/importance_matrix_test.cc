// ImportanceMatrix: both of llama-imatrix's forms read as llama-quantize
// reads them, one test per refusal rule; the weighted-error kernel against a
// long double sum; a weighted diff in parts merging to the very bits of one.
#include "core/imatrix/importance_matrix.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/diff/tensor_diff.h"
#include "core/diff/weighted_error.h"
#include "core/format/checkpoint.h"
#include "core/util/error_reason.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"

namespace tensormorph {
namespace {

using ::testing::AllOf;
using testing::BuildGguf;
using testing::GgufArray;
using testing::GgufSpec;
using testing::GgufString;
using testing::GgufTensorSpec;
using testing::GgufU32;
using testing::HasMetadata;
using testing::HasReason;

constexpr uint32_t kF32 = 0, kF16 = 1;

template <typename T>
std::string Le(T v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
}
std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

absl::StatusOr<std::shared_ptr<const ImportanceMatrix>> ParseBytes(
    const std::string& bytes) {
  return ImportanceMatrix::Parse(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()),
                          bytes.size()),
      "test.imatrix");
}

// One legacy entry as save_imatrix_legacy writes it.
std::string LegacyEntry(const std::string& name, int32_t ncall,
                        const std::vector<float>& values) {
  return Le<int32_t>(static_cast<int32_t>(name.size())) + name +
         Le<int32_t>(ncall) + Le<int32_t>(static_cast<int32_t>(values.size())) +
         Floats(values);
}
std::string Legacy(const std::vector<std::string>& entries,
                   const std::string& trailer) {
  std::string out = Le<int32_t>(static_cast<int32_t>(entries.size()));
  for (const std::string& e : entries) out += e;
  return out + trailer;
}
std::string Trailer(int32_t chunks, const std::string& dataset) {
  return Le<int32_t>(chunks) +
         Le<int32_t>(static_cast<int32_t>(dataset.size())) + dataset;
}

// A GGUF imatrix: entry NAME of [experts, columns] sums and its counts.
struct GgufEntry {
  std::string name;
  int64_t experts, columns;
  std::vector<float> in_sum2, counts;
};
GgufSpec ImatrixSpec(const std::vector<GgufEntry>& entries) {
  GgufSpec spec;
  spec.kv = {{"general.type", GgufString("imatrix")},
             {"imatrix.datasets",
              GgufArray(8, {GgufString("calib.txt"), GgufString("b.txt")})},
             {"imatrix.chunk_count", GgufU32(7)},
             {"imatrix.chunk_size", GgufU32(512)}};
  for (const GgufEntry& e : entries) {
    std::vector<int64_t> ne = {e.columns};
    if (e.experts > 1) ne.push_back(e.experts);
    spec.tensors.push_back(
        {e.name + ".in_sum2", ne, kF32, Floats(e.in_sum2), {}, {}});
    std::vector<int64_t> cne = {1};
    if (e.experts > 1) cne.push_back(e.experts);
    spec.tensors.push_back(
        {e.name + ".counts", cne, kF32, Floats(e.counts), {}, {}});
  }
  return spec;
}
GgufEntry Moe() {
  return {"blk.0.ffn_up_exps.weight",
          3,
          4,
          {1, 2, 3, 4, 0, 0, 0, 0, 10, 20, 30, 40},
          {3, 0, 7}};
}
GgufEntry Dense() { return {"blk.0.attn_q.weight", 1, 2, {5, 6}, {1300}}; }

#define EXPECT_RULE(result, rule)                                              \
  EXPECT_THAT((result).status(), AllOf(HasReason(ErrorReason::kHeaderInvalid), \
                                       HasMetadata("rule", rule),              \
                                       HasMetadata("file", "test.imatrix")))

TEST(ImportanceMatrixTest,
     GgufWeightsAreSumsOverCountsAndOneWhereNeverReached) {
  auto m = ParseBytes(BuildGguf(ImatrixSpec({Moe(), Dense()})));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->form(), ImatrixForm::kGguf);
  EXPECT_EQ((*m)->chunk_count(), 7);
  EXPECT_EQ((*m)->chunk_size(), 512);
  EXPECT_EQ((*m)->datasets(), (std::vector<std::string>{"calib.txt", "b.txt"}));
  ASSERT_EQ((*m)->entries().size(), 2u);
  EXPECT_EQ((*m)->entries()[0].name, "blk.0.attn_q.weight");  // sorted
  const ImatrixEntry* e = (*m)->Find("blk.0.ffn_up_exps.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->columns, 4);
  EXPECT_EQ(e->experts, 3);
  EXPECT_EQ(e->counts, (std::vector<double>{3, 0, 7}));
  EXPECT_EQ(e->ExpertsNeverReached(), (std::vector<int64_t>{1}));
  EXPECT_EQ(e->chunks, 1);  // ceil(7 / 512)
  const std::vector<float> want = {1.0f / 3,  2.0f / 3,  3.0f / 3,  4.0f / 3,
                                   1,         1,         1,         1,
                                   10.0f / 7, 20.0f / 7, 30.0f / 7, 40.0f / 7};
  EXPECT_EQ(e->weights, want);
  EXPECT_EQ(e->Weights(2, 3)[1], 20.0f / 7);
  const ImatrixEntry* d = (*m)->Find("blk.0.attn_q.weight");
  EXPECT_EQ(d->experts, 1);
  EXPECT_EQ(d->chunks, 3);  // ceil(1300 / 512)
  EXPECT_EQ(d->weights, (std::vector<float>{5.0f / 1300, 6.0f / 1300}));
  EXPECT_EQ((*m)->Find("blk.0.attn_k.weight"), nullptr);
}

TEST(ImportanceMatrixTest, LegacyWeightsAreValuesOverNcall) {
  auto m = ParseBytes(Legacy({LegacyEntry("b.weight", 3, {3, 6, 1}),
                              LegacyEntry("a.weight", 0, {2.5f})},
                             Trailer(9, "calib.txt")));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->form(), ImatrixForm::kLegacy);
  EXPECT_EQ((*m)->chunk_count(), 9);
  EXPECT_EQ((*m)->datasets(), (std::vector<std::string>{"calib.txt"}));
  const ImatrixEntry* b = (*m)->Find("b.weight");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->weights, (std::vector<float>{1, 2, 1.0f / 3}));
  EXPECT_EQ(b->chunks, 3);
  EXPECT_EQ(b->columns, 3);
  EXPECT_TRUE(b->ExpertsNeverReached().empty());
  EXPECT_EQ((*m)->Find("a.weight")->weights, (std::vector<float>{2.5f}));
}

TEST(ImportanceMatrixTest, LegacyWithoutTrailerReads) {
  auto m = ParseBytes(Legacy({LegacyEntry("a", 1, {1})}, ""));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->chunk_count(), 0);
  EXPECT_TRUE((*m)->datasets().empty());
}

TEST(ImportanceMatrixTest, LegacyRefusals) {
  const std::string one = LegacyEntry("a", 1, {1, 2});
  EXPECT_RULE(ParseBytes(""), "truncated");
  EXPECT_RULE(ParseBytes(Le<int32_t>(0)), "entry_count");
  EXPECT_RULE(ParseBytes(Le<int32_t>(-3) + one), "entry_count");
  EXPECT_RULE(ParseBytes(Le<int32_t>(0x7fffffff) + one), "entry_count");
  EXPECT_RULE(ParseBytes(Legacy({Le<int32_t>(-1) + std::string(20, 'x')}, "")),
              "name_length");
  EXPECT_RULE(
      ParseBytes(Legacy({Le<int32_t>(4000) + std::string(20, 'x')}, "")),
      "truncated");
  EXPECT_RULE(ParseBytes(Legacy({LegacyEntry("a", -1, {1})}, "")), "ncall");
  EXPECT_RULE(ParseBytes(Legacy({Le<int32_t>(1) + "a" + Le<int32_t>(1) +
                                 Le<int32_t>(-2) + Floats({1, 2})},
                                "")),
              "nval");
  // nval past the end: a truncated file.
  const std::string cut = Legacy({one}, "");
  EXPECT_RULE(ParseBytes(cut.substr(0, cut.size() - 2)), "nval");
  EXPECT_RULE(ParseBytes(Legacy({LegacyEntry("a", 1, {1, NAN})}, "")), "value");
  EXPECT_RULE(ParseBytes(Legacy({LegacyEntry("a", 1, {-1})}, "")), "value");
  EXPECT_RULE(ParseBytes(Legacy({LegacyEntry("a", 1, {1, INFINITY})}, "")),
              "value");
  EXPECT_RULE(ParseBytes(Legacy({one, one}, "")), "duplicate_name");
  EXPECT_RULE(ParseBytes(Legacy({one}, "abc")), "trailer");
  EXPECT_RULE(ParseBytes(Legacy({one}, Trailer(-1, "x"))), "trailer");
  EXPECT_RULE(ParseBytes(Legacy({one}, Trailer(1, "calib") + "z")), "trailer");
}

TEST(ImportanceMatrixTest, GgufRefusals) {
  auto with = [](auto change) {
    GgufSpec spec = ImatrixSpec({Moe(), Dense()});
    change(spec);
    return ParseBytes(BuildGguf(spec));
  };
  auto drop_kv = [](GgufSpec& s, const std::string& key) {
    std::erase_if(s.kv, [&](const auto& kv) { return kv.first == key; });
  };
  EXPECT_RULE(with([&](GgufSpec& s) { drop_kv(s, "general.type"); }),
              "general.type");
  EXPECT_RULE(with([](GgufSpec& s) { s.kv[0].second = GgufString("model"); }),
              "general.type");
  EXPECT_RULE(with([&](GgufSpec& s) { drop_kv(s, "imatrix.chunk_count"); }),
              "imatrix.chunk_count");
  EXPECT_RULE(with([](GgufSpec& s) { s.kv[3].second = GgufString("512"); }),
              "imatrix.chunk_size");
  EXPECT_RULE(with([&](GgufSpec& s) { drop_kv(s, "imatrix.datasets"); }),
              "imatrix.datasets");
  EXPECT_RULE(with([](GgufSpec& s) {
                s.tensors[0].type_id = kF16;
                s.tensors[0].data = s.tensors[0].data.substr(0, 24);
              }),
              "dtype");
  EXPECT_RULE(with([](GgufSpec& s) { s.tensors.erase(s.tensors.begin() + 1); }),
              "pairs");
  EXPECT_RULE(with([](GgufSpec& s) {
                s.tensors[1].ne = {1, 2};
                s.tensors[1].data = Floats({3, 0});
              }),
              "counts.shape");
  EXPECT_RULE(with([](GgufSpec& s) {
                s.tensors[1].data = Floats({3, -1, 7});
              }),
              "counts.value");
  EXPECT_RULE(with([](GgufSpec& s) {
                s.tensors[1].data = Floats({3, 0.5, 7});
              }),
              "counts.value");
  EXPECT_RULE(with([](GgufSpec& s) {
                s.tensors[1].data = Floats({3, NAN, 7});
              }),
              "counts.value");
  EXPECT_RULE(with([](GgufSpec& s) {
                std::vector<float> v = Moe().in_sum2;
                v[5] = NAN;
                s.tensors[0].data = Floats(v);
              }),
              "in_sum2.value");
  EXPECT_RULE(with([](GgufSpec& s) {
                std::vector<float> v = Moe().in_sum2;
                v[0] = -2;
                s.tensors[0].data = Floats(v);
              }),
              "in_sum2.value");
  EXPECT_RULE(with([](GgufSpec& s) {
                s.tensors.push_back({"blk.0.ffn_up_exps.weight.in_sum",
                                     {4, 2},
                                     kF32,
                                     Floats(std::vector<float>(8)),
                                     {},
                                     {}});
              }),
              "in_sum.shape");
  EXPECT_RULE(
      with([](GgufSpec& s) {
        s.tensors.push_back({".in_sum2", {1}, kF32, Floats({1}), {}, {}});
      }),
      "entry_name");
  EXPECT_RULE(with([](GgufSpec& s) { s.tensors.clear(); }), "entries");
  // The GGUF reader's own rules come first: a truncated file is its refusal.
  const std::string whole = BuildGguf(ImatrixSpec({Moe()}));
  auto cut = ParseBytes(whole.substr(0, whole.size() / 2));
  EXPECT_THAT(cut.status(), HasReason(ErrorReason::kHeaderInvalid));
}

TEST(ImportanceMatrixTest, OtherTensorsArePassedOverAsLlamaQuantizeDoes) {
  GgufSpec spec = ImatrixSpec({Dense()});
  spec.tensors.push_back(
      {"token_embd.weight", {2, 2}, kF32, Floats({1, 2, 3, 4}), {}, {}});
  auto m = ParseBytes(BuildGguf(spec));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->entries().size(), 1u);
}

TEST(ImportanceMatrixTest, OpenRefusesAFileOutsideTheRoots) {
  const std::string dir = ::testing::TempDir() + "/imatrix_roots";
  std::filesystem::create_directories(dir + "/root");
  testing::WriteFile(dir + "/outside.imatrix",
                     Legacy({LegacyEntry("a", 1, {1})}, ""));
  testing::WriteFile(dir + "/root/in.imatrix",
                     Legacy({LegacyEntry("a", 1, {1})}, ""));
  auto access =
      FileAccess::Beneath({std::filesystem::canonical(dir + "/root").string()});
  ASSERT_TRUE(access.ok()) << access.status();
  const std::string root = std::filesystem::canonical(dir + "/root").string();
  EXPECT_TRUE(ImportanceMatrix::Open(root + "/in.imatrix", **access).ok());
  EXPECT_THAT(
      ImportanceMatrix::Open(root + "/../outside.imatrix", **access).status(),
      HasReason(ErrorReason::kOutsideRoots));
}

// A weighted comparison's factor for the errors the matrix does not weigh:
// the mean of every weight it holds (experts and their never-reached 1s
// included), which scales with the matrix.
TEST(WeightedErrorTest, UnweightedErrorFactorIsTheMeanWeight) {
  for (const float scale : {1.0f, 0.01f, 100.0f}) {
    std::vector<float> a = {1, 3}, b = {2, 4, 6, 8};
    for (float& x : a) x *= scale;
    for (float& x : b) x *= scale;
    auto m = ParseBytes(
        Legacy({LegacyEntry("a", 1, a), LegacyEntry("b", 1, b)}, ""));
    ASSERT_TRUE(m.ok()) << m.status();
    double want = 0;
    for (float x : a) want += x;
    for (float x : b) want += x;
    EXPECT_DOUBLE_EQ(UnweightedErrorFactor(**m), want / 6) << scale;
  }
  // A MoE entry: expert 1 never reached weighs 1 in each of its columns.
  auto moe = ParseBytes(BuildGguf(ImatrixSpec({Moe()})));
  ASSERT_TRUE(moe.ok()) << moe.status();
  const double moe_sum =
      (1 + 2 + 3 + 4) / 3.0 + 4 * 1.0 + (10 + 20 + 30 + 40) / 7.0;
  EXPECT_NEAR(UnweightedErrorFactor(**moe), moe_sum / 12, 1e-6);
  // Every weight 0: 1, and the plain errors decide.
  auto zero = ParseBytes(Legacy({LegacyEntry("z", 1, {0, 0})}, ""));
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(UnweightedErrorFactor(**zero), 1.0);
}

TEST(WeightedErrorTest, MatchesLlamaQuantizesSizeRule) {
  auto m = ParseBytes(BuildGguf(ImatrixSpec({Moe(), Dense()})));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(MatchImatrix(nullptr, "x", {2, 2}).use, ImatrixUse::kNone);
  EXPECT_EQ(MatchImatrix(m->get(), "x", {2, 2}).use, ImatrixUse::kMissing);
  EXPECT_EQ(MatchImatrix(m->get(), "blk.0.attn_q.weight", {5, 2}).use,
            ImatrixUse::kWeighted);
  EXPECT_EQ(MatchImatrix(m->get(), "blk.0.attn_q.weight", {5, 3}).use,
            ImatrixUse::kMismatch);
  EXPECT_EQ(MatchImatrix(m->get(), "blk.0.attn_q.weight", {2}).use,
            ImatrixUse::kMismatch);
  const ImatrixMatch moe =
      MatchImatrix(m->get(), "blk.0.ffn_up_exps.weight", {3, 5, 4});
  EXPECT_EQ(moe.use, ImatrixUse::kWeighted);
  EXPECT_EQ(moe.weights.expert_elements, 20);
  EXPECT_EQ(MatchImatrix(m->get(), "blk.0.ffn_up_exps.weight", {2, 5, 4}).use,
            ImatrixUse::kMismatch);
}

// The kernel over any chunking equals sum w * err^2 taken in long double.
TEST(WeightedErrorTest, AgreesWithALongDoubleSumOverAnyChunking) {
  const int64_t experts = 3, rows = 5, cols = 7, n = experts * rows * cols;
  std::mt19937 gen(34);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uniform(0, 4);
  std::vector<float> x(n), q(n), w(experts * cols);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = normal(gen);
    q[i] = std::round(x[i] * 8) / 8;
  }
  for (float& v : w) v = uniform(gen);
  long double se = 0, xx = 0;
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = (e * rows + r) * cols + c;
        const long double err = (long double)x[i] - q[i];
        se += w[e * cols + c] * err * err;
        xx += w[e * cols + c] * (long double)x[i] * x[i];
      }
    }
  }
  const TensorWeights tw{w.data(), cols, rows * cols};
  for (int64_t chunk : {int64_t{1}, int64_t{4}, int64_t{7}, int64_t{33}, n}) {
    SCOPED_TRACE(chunk);
    WeightedSums s;
    for (int64_t first = 0; first < n; first += chunk) {
      const int64_t m = std::min(chunk, n - first);
      AccumulateWeighted(x.data() + first, q.data() + first, first, m, tw, &s);
    }
    EXPECT_NEAR(s.sum_w_sq_err, (double)se, 1e-13 * (double)se);
    EXPECT_NEAR(s.sum_w_xx, (double)xx, 1e-13 * (double)xx);
    EXPECT_NEAR(WeightedSqnrDb(s), 10 * std::log10((double)(xx / se)), 1e-9);
  }
}

// A float16 copy of a float32 tensor diffed in parts (core/diff/float_runs
// splits it) merges to the very bits of the whole, weighted sums included.
TEST(WeightedErrorTest, PartsMergeToTheBitsOfTheWhole) {
  const std::string dir = ::testing::TempDir() + "/imatrix_parts";
  std::filesystem::create_directories(dir + "/src");
  std::filesystem::create_directories(dir + "/q");
  const int64_t rows = 700, cols = 48;
  const std::vector<float> x =
      testing::Gaussian(static_cast<size_t>(rows * cols), 7);
  std::string f16;
  for (float v : x) f16 += Le<uint16_t>(testing::F32ToF16Bits(v));
  testing::WriteFile(
      dir + "/src/model.safetensors",
      testing::BuildSafetensors({{"w", "F32", {rows, cols}, Floats(x)}}));
  testing::WriteFile(
      dir + "/q/model.safetensors",
      testing::BuildSafetensors({{"w", "F16", {rows, cols}, f16}}));
  std::vector<float> sums(cols);
  for (int64_t c = 0; c < cols; ++c) sums[c] = 1.5f + c;
  auto m = ParseBytes(Legacy({LegacyEntry("w", 3, sums)}, ""));
  ASSERT_TRUE(m.ok());
  auto quant = Checkpoint::Open(dir + "/q");
  auto ref = Checkpoint::Open(dir + "/src");
  ASSERT_TRUE(quant.ok() && ref.ok());
  const LogicalTensor& qt = *(*quant)->FindTensor("w");
  const LogicalTensor& rt = *(*ref)->FindTensor("w");
  ASSERT_TRUE(DiffSplits(qt, rt, {}));
  DiffOptions o;
  o.chunk_elements = 1000;
  o.segment_elements = 4000;
  o.imatrix = *m;
  auto whole = DiffTensor(qt, rt, o);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->imatrix_use, ImatrixUse::kWeighted);
  EXPECT_GT(whole->weighted.sum_w_sq_err, 0);
  std::vector<DiffPart> parts;
  const int64_t n = rows * cols;
  for (auto [b, e] :
       {std::pair<int64_t, int64_t>{0, 8000}, {8000, 20000}, {20000, n}}) {
    auto p = DiffTensorPart(qt, rt, o, b, e);
    ASSERT_TRUE(p.ok()) << p.status();
    parts.push_back(*std::move(p));
  }
  auto merged = MergeDiffParts(qt, rt, o, {}, std::move(parts));
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->weighted.sum_w_sq_err, whole->weighted.sum_w_sq_err);
  EXPECT_EQ(merged->weighted.sum_w_xx, whole->weighted.sum_w_xx);
  EXPECT_EQ(merged->weighted_sqnr_db, whole->weighted_sqnr_db);
  // And without the matrix, nothing weighted.
  DiffOptions plain = o;
  plain.imatrix = nullptr;
  auto unweighted = DiffTensor(qt, rt, plain);
  ASSERT_TRUE(unweighted.ok());
  EXPECT_EQ(unweighted->imatrix_use, ImatrixUse::kNone);
  EXPECT_EQ(unweighted->mse, whole->mse);
}

}  // namespace
}  // namespace tensormorph
