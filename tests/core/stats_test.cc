// ComputeStats of one group, and the levels it lists: every decoded value of
// the group lands on one of them, across the fixture formats. The order the
// mean and std are summed in (sixteen lanes by index, whatever the chunks
// or the CPU), the sign of a zero min or max, and values billions of bins
// outside the histogram's range.
#include "core/stats.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/format/checkpoint.h"
#include "core/io/fault_guard.h"
#include "core/quant/decode_simd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph::stats_test {
namespace {

using ::tensormorph::testing::BuildGguf;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::GgufSpec;
using ::tensormorph::testing::GgufString;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::StatusIs;
using ::testing::AllOf;

struct Case {
  const char* fixture;
  const char* tensor;
};

// Decoded values (what ReadSlice returns) and group ids of every element.
void DecodeAll(const LogicalTensor& t, std::vector<float>* values,
               std::vector<int64_t>* groups) {
  values->assign(static_cast<size_t>(t.num_elements), 0);
  ASSERT_TRUE(t.encoding->Decode(0, t.num_elements, values->data()).ok());
  groups->assign(values->size(), -1);
  for (int64_t i = 0; i < t.num_elements; ++i) {
    ScalarInfo s;
    ASSERT_TRUE(t.encoding->Inspect(i, &s).ok());
    (*groups)[i] = s.group;
  }
}

TEST(StatsGroupTest, EveryDecodedValueOfTheGroupIsOneOfItsLevels) {
  const Case cases[] = {
      {"gguf/Q4_0.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q4_1.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q5_0.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q5_1.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q8_0.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q2_K.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q3_K.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q4_K.gguf", "blk.0.ffn_down.weight"},
      {"gguf/Q5_K.gguf", "blk.0.attn_q.weight"},
      {"gguf/Q6_K.gguf", "blk.0.attn_q.weight"},
      {"gguf/IQ4_NL.gguf", "blk.0.attn_q.weight"},
      {"gguf/IQ4_XS.gguf", "blk.0.attn_q.weight"},
      {"gguf/MXFP4.gguf", "blk.0.attn_q.weight"},
      {"gguf/NVFP4.gguf", "blk.0.attn_q.weight"},
      {"gguf/TQ1_0.gguf", "blk.0.attn_q.weight"},
      {"safetensors/gptq_4bit_g32", "model.layers.0.self_attn.q_proj.weight"},
      {"safetensors/gptq_4bit_g32_actorder",
       "model.layers.0.self_attn.q_proj.weight"},
      {"safetensors/awq_4bit_g32", "model.layers.0.self_attn.q_proj.weight"},
      {"safetensors/ct_w4a16_group", "model.layers.0.self_attn.q_proj.weight"},
      {"safetensors/fp8_block_sharded", "model.layers.0.mlp.down_proj.weight"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.fixture) + " " + c.tensor);
    auto ckpt = Checkpoint::Open(Fixture(c.fixture));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    const LogicalTensor* t = (*ckpt)->FindTensor(c.tensor);
    ASSERT_NE(t, nullptr);
    std::vector<float> values;
    std::vector<int64_t> groups;
    DecodeAll(*t, &values, &groups);
    const int64_t last = *std::max_element(groups.begin(), groups.end());
    ASSERT_GE(last, 1);
    for (int64_t g : {int64_t{0}, last / 2, last}) {
      StatsOptions o;
      o.group = g;
      auto st = ComputeStats(*t, nullptr, o);
      ASSERT_TRUE(st.ok()) << st.status();
      ASSERT_FALSE(st->levels.empty()) << "group " << g;
      EXPECT_TRUE(std::is_sorted(st->levels.begin(), st->levels.end()));
      EXPECT_EQ(std::adjacent_find(st->levels.begin(), st->levels.end()),
                st->levels.end())
          << "levels are distinct";
      EXPECT_LE(st->levels.size(), size_t{1} << t->encoding->info().bits);
      int64_t members = 0;
      for (size_t i = 0; i < values.size(); ++i) {
        if (groups[i] != g) continue;
        ++members;
        EXPECT_TRUE(std::binary_search(st->levels.begin(), st->levels.end(),
                                       static_cast<double>(values[i])))
            << "group " << g << " element " << i << " = " << values[i];
      }
      EXPECT_EQ(st->count, members) << "group " << g;
      EXPECT_EQ(st->groups, 1);
      int64_t in_hist = 0;
      for (int64_t h : st->histogram) in_hist += h;
      EXPECT_EQ(in_hist, members - st->nan_count - st->inf_count);
    }
  }
}

TEST(StatsGroupTest, APerTensorScaleListsItsLevelsWithoutAGroup) {
  auto ckpt = Checkpoint::Open(Fixture("safetensors/ct_int8_tensor_asym"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor* t =
      (*ckpt)->FindTensor("model.layers.0.mlp.down_proj.weight");
  ASSERT_NE(t, nullptr);
  auto st = ComputeStats(*t, nullptr, StatsOptions());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->levels.size(), 256u);
  std::vector<float> values(static_cast<size_t>(t->num_elements));
  ASSERT_TRUE(t->encoding->Decode(0, t->num_elements, values.data()).ok());
  for (float v : values) {
    EXPECT_TRUE(std::binary_search(st->levels.begin(), st->levels.end(),
                                   static_cast<double>(v)))
        << v;
  }
  // Many groups and no group asked: no one set of levels.
  auto q = Checkpoint::Open(Fixture("gguf/Q4_0.gguf"));
  ASSERT_TRUE(q.ok());
  auto all = ComputeStats(*(*q)->FindTensor("blk.0.attn_q.weight"), nullptr,
                          StatsOptions());
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->levels.empty());
  EXPECT_EQ(all->count, 1024);
}

TEST(StatsGroupTest, RefusesAGroupPastTheLastNegativeOrOfAPlainTensor) {
  auto q = Checkpoint::Open(Fixture("gguf/Q4_0.gguf"));
  ASSERT_TRUE(q.ok());
  const LogicalTensor* t = (*q)->FindTensor("blk.0.attn_q.weight");
  StatsOptions o;
  o.group = 32;  // 1024 elements in blocks of 32: groups 0..31
  EXPECT_THAT(
      ComputeStats(*t, nullptr, o),
      AllOf(HasReason(ErrorReason::kRequestInvalid),
            HasMetadata("field", "group"), MessageNames("32"),
            MessageNames("'blk.0.attn_q.weight'"), MessageNames("0..31")));
  // Act-order: the range is found by the pass over the values.
  auto act = Checkpoint::Open(Fixture("safetensors/gptq_4bit_g32_actorder"));
  ASSERT_TRUE(act.ok());
  o.group = 1000;
  EXPECT_THAT(ComputeStats(
                  *(*act)->FindTensor("model.layers.0.self_attn.q_proj.weight"),
                  nullptr, o),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    HasMetadata("field", "group"), MessageNames("1000")));
  o.group = -1;
  EXPECT_THAT(ComputeStats(*t, nullptr, o),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    HasMetadata("field", "group"), MessageNames("-1")));
  auto f = Checkpoint::Open(Fixture("gguf/F32.gguf"));
  ASSERT_TRUE(f.ok());
  o.group = 0;
  EXPECT_THAT(
      ComputeStats(*(*f)->FindTensor("blk.0.attn_q.weight"), nullptr, o),
      AllOf(HasReason(ErrorReason::kRequestInvalid),
            HasMetadata("field", "group")));
  LogicalTensor empty = *t;
  empty.shape = {0, 32};
  empty.num_elements = 0;
  EXPECT_THAT(ComputeStats(empty, nullptr, o),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    HasMetadata("field", "group"), MessageNames("empty")));
}

// A GGUF holding `v` as the F32 tensor "t" of one row.
std::shared_ptr<const Checkpoint> OpenF32(const std::vector<float>& v) {
  GgufSpec s;
  s.kv.push_back({"general.architecture", GgufString("llama")});
  s.tensors.push_back(
      {"t", {static_cast<int64_t>(v.size()), 1}, 0, testing::ToF32Bytes(v)});
  const std::string path = MakeTempDir() + "/t.gguf";
  testing::WriteFile(path, BuildGguf(s));
  auto ckpt = Checkpoint::Open(path);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  return ckpt.ok() ? std::shared_ptr<const Checkpoint>(std::move(*ckpt))
                   : nullptr;
}

// ComputeStats at every SIMD level this CPU has and at several chunk sizes
// (chunks that end inside a lane block and whole blocks): `check` on each.
template <typename Check>
void AtEveryLevelAndChunk(const LogicalTensor& t, StatsOptions o, Check check,
                          std::vector<int64_t> chunks = {1, 7, 16, 1000,
                                                         1 << 18}) {
  for (DecodeSimd level :
       {DecodeSimd::kScalar, DecodeSimd::kAvx2, DecodeSimd::kAvx512}) {
    if (level > SupportedDecodeSimd()) break;
    for (int64_t chunk : chunks) {
      SCOPED_TRACE(
          absl::StrCat("simd ", static_cast<int>(level), " chunk ", chunk));
      o.chunk_elements = chunk;
      CapDecodeSimdForTesting(level);
      auto st = ComputeStats(t, nullptr, o);
      CapDecodeSimdForTesting(DecodeSimd::kAvx512);
      ASSERT_TRUE(st.ok()) << st.status();
      check(*st);
    }
  }
}

// Element i is added to partial sum i % 16: here lane 0 holds +2^54 and
// -2^54 in turn (each pair cancels exactly) and the other lanes ones, so
// the sum is exactly the ones. A sum in element order would lose every one
// added beside 2^54 (half its spacing there); chunking and SIMD change
// nothing.
TEST(StatsMomentsTest, SumsElementIInLaneIModSixteenWhateverTheChunks) {
  constexpr int kN = 4096;
  const float big = std::ldexp(1.0f, 54);
  std::vector<float> v(kN, 1.0f);
  for (int i = 0; i < kN; i += 16) v[i] = (i / 16) % 2 ? -big : big;
  auto ckpt = OpenF32(v);
  ASSERT_NE(ckpt, nullptr);
  const double ones = kN - kN / 16;
  // sum_sq: lane 0 is 256 * 2^108 exactly, the ones round away beside it.
  const double sum_sq = (kN / 16) * std::ldexp(1.0, 108) + ones;
  const double mean = ones / kN;
  const double std_dev = std::sqrt(sum_sq / kN - mean * mean);
  AtEveryLevelAndChunk(*ckpt->FindTensor("t"), StatsOptions(),
                       [&](const TensorStats& st) {
                         EXPECT_EQ(st.mean, mean);
                         EXPECT_EQ(st.std, std_dev);
                         EXPECT_EQ(st.min, -big);
                         EXPECT_EQ(st.max, big);
                       });
}

// +0 and -0 compare equal: a min (or max) of zero is the first zero in
// index order, as the element-order comparison keeps it, though lanes meet
// the zeros in another order.
TEST(StatsMomentsTest, AZeroMinOrMaxHasTheSignOfTheFirstZero) {
  for (const float first : {-0.0f, 0.0f}) {
    for (const float others : {1.0f, -1.0f}) {
      std::vector<float> v(3000, others);
      v[1234] = first;  // not lane 0 of a block, and after other values
      for (int i = 1235; i < 3000; i += 3) v[i] = -first;
      auto ckpt = OpenF32(v);
      ASSERT_NE(ckpt, nullptr);
      SCOPED_TRACE(absl::StrCat("first zero ", std::signbit(first) ? "-" : "+",
                                "0, others ", others));
      AtEveryLevelAndChunk(*ckpt->FindTensor("t"), StatsOptions(),
                           [&](const TensorStats& st) {
                             const double zero = others > 0 ? st.min : st.max;
                             EXPECT_EQ(zero, 0);
                             EXPECT_EQ(std::signbit(zero), std::signbit(first));
                           });
    }
  }
}

// The header's promise that out-of-range values clamp holds however far
// out they are: a value 2^31 bins or more past the range lands in the last
// bin (below it, the first), with two plain passes (small tensors) and with
// pass 1's buckets (from 2^16 elements).
TEST(StatsHistogramTest, ValuesBillionsOfBinsOutsideTheRangeClampToTheEnds) {
  for (const int n : {1000, 1 << 17}) {
    std::vector<float> v(static_cast<size_t>(n), 0.3f);  // bin 1 of 4
    v[0] = 1e30f;
    v[1] = 3e9f;
    v[2] = std::nextafter(1.0f, 2.0f);  // just past the top
    v[3] = -1e30f;
    v[4] = -3e9f;
    v[5] = -1e-30f;  // just below the bottom
    v[6] = 0.9f;     // bin 3 of 4
    auto ckpt = OpenF32(v);
    ASSERT_NE(ckpt, nullptr);
    StatsOptions o;
    o.bins = 4;
    o.range_min = 0;
    o.range_max = 1;
    SCOPED_TRACE(absl::StrCat(n, " elements"));
    AtEveryLevelAndChunk(*ckpt->FindTensor("t"), o, [&](const TensorStats& st) {
      EXPECT_EQ(st.histogram, (std::vector<int64_t>{3, n - 7, 0, 4}));
    });
  }
}

// From 2^16 elements, pass 1 buckets values by their top 16 bits and pass 2
// looks only at values near a bin edge (a float-arithmetic filter with an
// error margin, on AVX2): values on every edge, on the floats either side of
// it and on the ends of its bucket land where the plain formula puts them;
// for a range whose width no float holds, and for one whose edge is the
// float after a bucket's first (that first value alone in the bin below,
// which the filter without its margin misses).
TEST(StatsHistogramTest, ValuesOnAndBesideEveryBinEdgeLandInTheirOwnBins) {
  const float after_half = std::nextafter(0.5f, 1.0f);  // low bits 0x0001
  struct Range {
    double lo, hi;
    int bins;
  };
  std::vector<Range> ranges = {{-1, 3, 7}, {0, 2.0 * after_half, 2}};
  // Ranges whose bounds and width no float holds, with many edges.
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int k = 0; k < 6; ++k) {
    const double lo = (unit(rng) - 0.5) * std::ldexp(1.0, k * 3 - 6);
    ranges.push_back({lo, lo + unit(rng) * std::ldexp(1.0, k * 2 - 4), 997});
  }
  // Edge 5 of 10 on the float after a bucket's first or before its last,
  // from bounds no float holds (so the filter's arithmetic errs there).
  for (const float start : {0.5f, 0.75f, 1.5f, -0.625f, 3.0f, 0.046875f}) {
    const uint32_t bits = std::bit_cast<uint32_t>(start);
    for (const uint32_t edge_bits : {bits | 1u, bits | 0xfffeu}) {
      for (const double lo : {0.1, -0.3, 0.013, -7.77}) {
        const double edge = std::bit_cast<float>(edge_bits);
        if (edge <= lo) continue;
        const double w = (edge - lo) / 5;
        ranges.push_back({lo, lo + 10 * w, 10});
      }
    }
  }
  for (const Range& r : ranges) {
    const double width = (r.hi - r.lo) / r.bins;
    std::vector<float> v;
    for (int k = 0; k <= r.bins; ++k) {
      const float edge = static_cast<float>(r.lo + k * width);
      float below = edge, above = edge;
      for (int step = 0; step < 40; ++step) {
        v.insert(v.end(), {below, edge, above});
        below = std::nextafter(below, -INFINITY);
        above = std::nextafter(above, INFINITY);
      }
      const uint32_t bits = std::bit_cast<uint32_t>(edge);
      for (uint32_t end : {bits & 0xffff0000u, bits | 0xffffu}) {
        const float f = std::bit_cast<float>(end);
        v.insert(v.end(), {f, std::nextafter(f, -INFINITY),
                           std::nextafter(f, INFINITY)});
      }
    }
    while (v.size() < (size_t{1} << 17)) v.push_back(0.1f * (v.size() % 37));
    ASSERT_EQ(v.size(), size_t{1} << 17);
    std::vector<int64_t> want(r.bins, 0);
    for (float f : v) {
      const double b = std::floor((f - r.lo) / width);
      ++want[static_cast<size_t>(std::clamp(b, 0.0, r.bins - 1.0))];
    }
    auto ckpt = OpenF32(v);
    ASSERT_NE(ckpt, nullptr);
    StatsOptions o;
    o.bins = r.bins;
    o.range_min = r.lo;
    o.range_max = r.hi;
    SCOPED_TRACE(absl::StrCat("range ", r.lo, "..", r.hi, " in ", r.bins));
    AtEveryLevelAndChunk(
        *ckpt->FindTensor("t"), o,
        [&](const TensorStats& st) { EXPECT_EQ(st.histogram, want); },
        {4099, 1 << 18});
  }
}

// Float32 is read where it is stored (no copy): a file cut short under its
// mapping must still fail the call (FAILED_PRECONDITION, the guard's SIGBUS)
// rather than the process, in both passes.
TEST(StatsInPlaceTest, AFloat32FileTruncatedUnderTheMappingFailsTheCall) {
  InstallMappedFileFaultHandler();
  std::vector<float> v(1 << 20);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1000);
  GgufSpec s;
  s.kv.push_back({"general.architecture", GgufString("llama")});
  s.tensors.push_back(
      {"t", {static_cast<int64_t>(v.size()), 1}, 0, testing::ToF32Bytes(v)});
  const std::string path = MakeTempDir() + "/cut.gguf";
  const std::string bytes = BuildGguf(s);
  testing::WriteFile(path, bytes);
  auto ckpt = Checkpoint::Open(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor& t = *(*ckpt)->FindTensor("t");
  ASSERT_TRUE(ComputeStats(t, nullptr, StatsOptions()).ok());
  // Keep the first eighth of the data: the first chunk reads, a later one
  // faults.
  ASSERT_EQ(::truncate(path.c_str(),
                       static_cast<off_t>(bytes.size() - v.size() * 4 * 7 / 8)),
            0);
  EXPECT_THAT(ComputeStats(t, nullptr, StatsOptions()),
              StatusIs(absl::StatusCode::kFailedPrecondition, "SIGBUS"));
}

// Q4_K's second pass reads its blocks where they are stored (its codes per
// sub-block, not a decode): a file cut short between the passes must fail
// the call too, with the guard's FILE_CHANGED, not the process. The cut is
// made from the cancellation poll, after the first pass's last chunk.
TEST(StatsInPlaceTest, AQ4KFileTruncatedBetweenThePassesFailsTheCall) {
  InstallMappedFileFaultHandler();
  constexpr int64_t kElements = int64_t{1} << 20;
  std::vector<float> v(kElements);
  for (int64_t i = 0; i < kElements; ++i)
    v[i] = static_cast<float>(i % 1000) / 1000 - 0.5f;
  GgufSpec s;
  s.kv.push_back({"general.architecture", GgufString("llama")});
  s.tensors.push_back(
      {"t", {4096, kElements / 4096}, 12, testing::QuantizeQ4_K(v)});
  const std::string path = MakeTempDir() + "/cut_q4k.gguf";
  const std::string bytes = BuildGguf(s);
  testing::WriteFile(path, bytes);
  auto ckpt = Checkpoint::Open(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor& t = *(*ckpt)->FindTensor("t");
  ASSERT_TRUE(ComputeStats(t, nullptr, StatsOptions()).ok());
  StatsOptions o;
  o.chunk_elements = kElements / 4;  // four polls in the first pass
  int polls = 0;
  o.cancelled = [&] {
    if (++polls == 5) {  // the second pass's first: keep an eighth
      EXPECT_EQ(
          ::truncate(path.c_str(), static_cast<off_t>(bytes.size() * 1 / 8)),
          0);
    }
    return false;
  };
  EXPECT_THAT(ComputeStats(t, nullptr, o),
              AllOf(StatusIs(absl::StatusCode::kFailedPrecondition, "SIGBUS"),
                    HasReason(ErrorReason::kFileChanged)));
  EXPECT_GE(polls, 5);
}

// The code histogram is by raw bits; codes_signed says how the format reads
// them, as the Scalar Inspector's raw code does: Q8_0's int8 codes are
// signed, Q4_0's nibbles (level = code - 8) are not.
TEST(StatsCodesTest, CodesSignedIsTheInspectorsReadingOfTheCodes) {
  const std::vector<float> v = testing::Gaussian(256, 3);
  GgufSpec s;
  s.tensors = {{"q8", {64, 4}, 8, testing::QuantizeQ8_0(v)},
               {"q4", {64, 4}, 2, testing::QuantizeQ4_0(v)}};
  const std::string path = MakeTempDir() + "/codes.gguf";
  testing::WriteFile(path, BuildGguf(s));
  auto ckpt = Checkpoint::Open(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  for (const auto& [name, is_signed] :
       {std::pair<const char*, bool>{"q8", true}, {"q4", false}}) {
    SCOPED_TRACE(name);
    const LogicalTensor& t = *(*ckpt)->FindTensor(name);
    auto st = ComputeStats(t, nullptr, StatsOptions());
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->codes_signed, is_signed);
    // Each element's raw code, read as codes_signed says, is the
    // inspector's; the histogram counts it under its bits.
    std::vector<int64_t> by_bits(st->code_histogram.size(), 0);
    const int64_t size = static_cast<int64_t>(by_bits.size());
    for (int64_t i = 0; i < t.num_elements; ++i) {
      ScalarInfo sc;
      ASSERT_TRUE(t.encoding->Inspect(i, &sc).ok());
      const int64_t k = static_cast<int64_t>(sc.code_bits_value);
      EXPECT_EQ(sc.code, st->codes_signed && k >= size / 2 ? k - size : k);
      ++by_bits[k];
    }
    EXPECT_EQ(st->code_histogram, by_bits);
  }
}

TEST(StatsCancelTest, ACancelledPassStopsAtItsNextChunkWithCancelled) {
  auto ckpt =
      Checkpoint::Open(::tensormorph::testing::Fixture("gguf/Q4_K.gguf"));
  ASSERT_TRUE(ckpt.ok());
  const LogicalTensor* t = (*ckpt)->FindTensor("blk.0.ffn_down.weight");
  ASSERT_NE(t, nullptr);
  int polls = 0;
  StatsOptions o;
  o.chunk_elements = 256;  // a poll per row
  o.cancelled = [&polls] { return ++polls == 3; };
  EXPECT_THAT(ComputeStats(*t, nullptr, o),
              ::testing::AllOf(
                  ::tensormorph::testing::HasReason(ErrorReason::kCancelled),
                  ::tensormorph::testing::MessageNames("element 512")));
  EXPECT_EQ(polls, 3);  // nothing after the cancellation was decoded
  o.cancelled = [] { return false; };
  EXPECT_TRUE(ComputeStats(*t, nullptr, o).ok());
}

}  // namespace
}  // namespace tensormorph::stats_test
