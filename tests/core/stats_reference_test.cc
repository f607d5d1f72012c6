// ComputeStats bit for bit against the element-by-element pass it replaced
// for speed (kept below as ReferenceStats): every element's ElementQuant
// from DecodeDetailed and its code from Inspect, folded one at a time in
// row-major order. Two changes since, both the contract of stats.h: the
// mean and std sum element i into partial sum i % 16 of its global index,
// the 16 combined in a fixed tree (SumOfLanes), and a bin index is clamped
// in double before it becomes an int. Both the vector and the scalar
// moments (CapDecodeSimdForTesting) are held to it. On ggml types,
// safetensors conventions and plain floats; on values with NaN, infinities,
// signed zeros and magnitudes whose sums round at every step; with a
// reference (its values binned alike: reference_histogram), with
// options.group, with a histogram range that clamps, with chunks that end
// inside groups; and on adversarial groups (NaN, infinite and zero scales,
// groups of one code, every F16/BF16 code), where a statistic taken from
// codes rather than values could go wrong.
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/format/checkpoint.h"
#include "core/io/fault_guard.h"
#include "core/quant/decode_simd.h"
#include "core/quant/levels.h"
#include "core/stats.h"
#include "core/util/status_macros.h"
#include "gtest/gtest.h"
#include "tests/support/fixture_copy.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/python_writer.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/same_bits.h"
#include "tests/support/test_paths.h"

namespace tensormorph::stats_reference_test {
namespace {

using ::tensormorph::testing::BuildGguf;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::GgufSpec;
using ::tensormorph::testing::GgufString;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::SameBits;
using ::tensormorph::testing::WriteFile;

// The fixed tree of stats.h: (0+8), (1+9), ... (7+15); then those eight
// as (0+4) ... (3+7); then (0+2), (1+3); then the two.
double SumOfLanes(const double* s) {
  const double a0 = s[0] + s[8], a1 = s[1] + s[9], a2 = s[2] + s[10],
               a3 = s[3] + s[11], a4 = s[4] + s[12], a5 = s[5] + s[13],
               a6 = s[6] + s[14], a7 = s[7] + s[15];
  const double b0 = a0 + a4, b1 = a1 + a5, b2 = a2 + a6, b3 = a3 + a7;
  const double c0 = b0 + b2, c1 = b1 + b3;
  return c0 + c1;
}

absl::StatusOr<TensorStats> ReferenceStats(const LogicalTensor& t,
                                           const LogicalTensor* ref,
                                           const StatsOptions& o) {
  const std::atomic<bool>* cancelled = nullptr;
  // The request's checks are ComputeStats' own: what this reference holds
  // to account is the values.
  if (absl::Status s = CheckStatsRequest(t, ref, o); !s.ok()) return s;
  TensorStats st;
  const int64_t n = t.num_elements;
  const bool one_group = o.group.has_value();
  const int64_t want = o.group.value_or(-1);
  const int64_t chunk = std::max<int64_t>(1, o.chunk_elements);
  std::vector<ElementQuant> q(
      static_cast<size_t>(std::min(chunk, std::max<int64_t>(n, 1))));
  std::vector<float> x(ref != nullptr ? q.size() : 0);
  const EncodingInfo& info = t.encoding->info();
  st.has_levels = info.quantized && info.bits <= 8;
  st.code_bits = info.bits;
  if (st.has_levels) st.code_histogram.assign(size_t{1} << info.bits, 0);
  st.has_reference = ref != nullptr;

  // The partial sums of stats.h: element i in sum[i % 16]; for plain F16
  // and BF16, each finite value's count by its 16-bit code instead (the
  // value, the count), summed in ascending code order.
  double sum[16] = {}, sum_sq[16] = {};
  const bool float_codes = t.encoding->PlainFloatSteps() != nullptr &&
                           (info.scheme == "F16" || info.scheme == "BF16");
  std::map<uint16_t, std::pair<double, int64_t>> by_code;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  absl::flat_hash_set<int64_t> groups, saturated;
  int64_t counted = 0;       // elements of the group (all: n)
  int64_t max_group = -1;    // the last group id seen, to name the range
  int64_t level_index = -1;  // an element whose group's levels are listed
  bool many_groups = false;  // no group asked and elements in several
  int64_t only_group = -1;
  // Pass 1: everything but the histogram (whose range may depend on it).
  for (int64_t first = 0; first < n; first += chunk) {
    if (cancelled != nullptr && cancelled->load())
      return absl::CancelledError("cancelled");
    const int64_t m = std::min(chunk, n - first);
    absl::Status read = GuardedRead([&]() -> absl::Status {
      if (absl::Status s = t.encoding->DecodeDetailed(first, m, q.data());
          !s.ok())
        return s;
      return ref != nullptr
                 ? DecodeMappedRows(*ref, o.ref_rows, first, m, x.data())
                 : absl::OkStatus();
    });
    if (!read.ok()) return read;
    for (int64_t i = 0; i < m; ++i) {
      max_group = std::max(max_group, q[i].group);
      if (one_group && q[i].group != want) continue;
      ++counted;
      if (level_index < 0) {
        level_index = first + i;
        only_group = q[i].group;
      } else if (q[i].group != only_group) {
        many_groups = true;
      }
      const double v = q[i].value;
      if (std::isnan(v)) {
        ++st.nan_count;
        continue;
      }
      if (std::isinf(v)) {
        ++st.inf_count;
        continue;
      }
      const int64_t lane = (first + i) % 16;
      sum[lane] += v;
      sum_sq[lane] += v * v;
      if (float_codes) {
        const float f = q[i].value;
        const uint16_t code =
            info.scheme == "F16"
                ? testing::F32ToF16Bits(f)  // exact: f is a float16 value
                : static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16);
        by_code[code].first = v;
        ++by_code[code].second;
      }
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      if (v == 0) {
        ++st.zeros;
        if (ref != nullptr) (x[i] == 0 ? st.pruned_zeros : st.induced_zeros)++;
      }
      if (st.has_levels && q[i].group >= 0) {
        groups.insert(q[i].group);
        const bool at_low = v == q[i].range_min, at_high = v == q[i].range_max;
        st.at_lowest_level += at_low;
        st.at_highest_level += at_high && !at_low;
        if (at_low || at_high) saturated.insert(q[i].group);
      }
    }
    if (st.has_levels) {
      absl::Status codes = GuardedRead([&]() -> absl::Status {
        for (int64_t i = 0; i < m; ++i) {
          ScalarInfo s;
          if (one_group && q[i].group != want) continue;
          if (absl::Status e = t.encoding->Inspect(first + i, &s); !e.ok())
            return e;
          ++st.code_histogram[s.code_bits_value &
                              ((uint64_t{1} << info.bits) - 1)];
        }
        return absl::OkStatus();
      });
      if (!codes.ok()) return codes;
    }
  }
  if (one_group && counted == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("group ", want, " is past the last group of tensor '",
                     t.name, "', which has groups 0..", max_group));
  }
  st.count = counted;
  if (level_index >= 0 && !many_groups) {
    ScalarInfo s;
    if (absl::Status e =
            GuardedRead([&] { return t.encoding->Inspect(level_index, &s); });
        !e.ok()) {
      return e;
    }
    st.levels = GroupLevels(s);
  }
  const int64_t finite = counted - st.nan_count - st.inf_count;
  if (finite > 0) {
    st.min = lo;
    st.max = hi;
    double s = SumOfLanes(sum), s2 = SumOfLanes(sum_sq);
    if (float_codes) {
      s = s2 = 0;
      for (const auto& [code, value_count] : by_code) {
        const auto& [value, count] = value_count;
        s += static_cast<double>(count) * value;
        s2 += static_cast<double>(count) * (value * value);
      }
    }
    st.mean = s / finite;
    st.std = std::sqrt(std::max(0.0, s2 / finite - st.mean * st.mean));
    st.absmax = std::max(std::fabs(lo), std::fabs(hi));
  }
  st.sparsity = counted > 0 ? static_cast<double>(st.zeros) / counted : 0;
  st.groups = static_cast<int64_t>(groups.size());
  st.groups_at_end_level = static_cast<int64_t>(saturated.size());
  for (int64_t c : st.code_histogram) st.levels_used += c > 0;

  // Pass 2: the histogram over [hist_min, hist_max].
  st.hist_min = o.range_min.value_or(st.min);
  st.hist_max = o.range_max.value_or(st.max);
  const int bins = std::max(1, o.bins);
  st.histogram.assign(bins, 0);
  if (ref != nullptr) st.reference_histogram.assign(bins, 0);
  const double width = (st.hist_max - st.hist_min) / bins;
  std::vector<float> v(q.size());
  for (int64_t first = 0; first < n; first += chunk) {
    if (cancelled != nullptr && cancelled->load())
      return absl::CancelledError("cancelled");
    const int64_t m = std::min(chunk, n - first);
    // One group: the values come with their groups, to pick the group's.
    if (absl::Status s = GuardedRead([&] {
          if (ref != nullptr) {
            TM_RETURN_IF_ERROR(
                DecodeMappedRows(*ref, o.ref_rows, first, m, x.data()));
          }
          if (!one_group) return t.encoding->Decode(first, m, v.data());
          absl::Status d = t.encoding->DecodeDetailed(first, m, q.data());
          for (int64_t i = 0; d.ok() && i < m; ++i) {
            v[i] = q[i].group == want ? q[i].value : NAN;
            // The source of an element of another group is not counted.
            if (ref != nullptr && q[i].group != want) x[i] = NAN;
          }
          return d;
        });
        !s.ok()) {
      return s;
    }
    auto bin = [&](float f) {
      double b = width > 0 ? std::floor((f - st.hist_min) / width) : 0;
      if (std::isnan(b)) b = 0;  // an infinite bound
      return static_cast<int>(std::clamp(b, 0.0, bins - 1.0));
    };
    for (int64_t i = 0; i < m; ++i) {
      if (std::isfinite(v[i])) ++st.histogram[bin(v[i])];
      if (ref != nullptr && std::isfinite(x[i]))
        ++st.reference_histogram[bin(x[i])];
    }
  }
  return st;
}

// Every field, doubles by their bits (-0 against +0 differs).
void ExpectSameStats(const TensorStats& got, const TensorStats& want) {
  EXPECT_EQ(got.count, want.count);
  EXPECT_TRUE(SameBits(got.min, want.min)) << "min";
  EXPECT_TRUE(SameBits(got.max, want.max)) << "max";
  EXPECT_TRUE(SameBits(got.mean, want.mean)) << "mean";
  EXPECT_TRUE(SameBits(got.std, want.std)) << "std";
  EXPECT_TRUE(SameBits(got.absmax, want.absmax)) << "absmax";
  EXPECT_EQ(got.nan_count, want.nan_count);
  EXPECT_EQ(got.inf_count, want.inf_count);
  EXPECT_EQ(got.zeros, want.zeros);
  EXPECT_TRUE(SameBits(got.sparsity, want.sparsity)) << "sparsity";
  EXPECT_EQ(got.has_reference, want.has_reference);
  EXPECT_EQ(got.pruned_zeros, want.pruned_zeros);
  EXPECT_EQ(got.induced_zeros, want.induced_zeros);
  EXPECT_TRUE(SameBits(got.hist_min, want.hist_min)) << "hist_min";
  EXPECT_TRUE(SameBits(got.hist_max, want.hist_max)) << "hist_max";
  EXPECT_EQ(got.histogram, want.histogram);
  EXPECT_EQ(got.reference_histogram, want.reference_histogram);
  EXPECT_EQ(got.has_levels, want.has_levels);
  EXPECT_EQ(got.code_bits, want.code_bits);
  EXPECT_EQ(got.code_histogram, want.code_histogram);
  EXPECT_EQ(got.levels_used, want.levels_used);
  EXPECT_EQ(got.at_lowest_level, want.at_lowest_level);
  EXPECT_EQ(got.at_highest_level, want.at_highest_level);
  EXPECT_EQ(got.groups, want.groups);
  EXPECT_EQ(got.groups_at_end_level, want.groups_at_end_level);
  ASSERT_EQ(got.levels.size(), want.levels.size());
  for (size_t i = 0; i < got.levels.size(); ++i)
    EXPECT_TRUE(SameBits(got.levels[i], want.levels[i])) << "level " << i;
}

// Both paths, and the same answer (errors included).
// At each SIMD level this CPU has (the moments' vector path and its scalar
// twin), decoders included.
void ExpectSameAsReference(const LogicalTensor& t, const LogicalTensor* ref,
                           const StatsOptions& o) {
  auto want = ReferenceStats(t, ref, o);
  for (DecodeSimd level :
       {DecodeSimd::kScalar, DecodeSimd::kAvx2, DecodeSimd::kAvx512}) {
    if (level > SupportedDecodeSimd()) break;
    SCOPED_TRACE(absl::StrCat("simd level ", static_cast<int>(level)));
    CapDecodeSimdForTesting(level);
    auto got = ComputeStats(t, ref, o);
    CapDecodeSimdForTesting(DecodeSimd::kAvx512);
    ASSERT_EQ(got.ok(), want.ok()) << got.status() << " vs " << want.status();
    if (!want.ok()) {
      EXPECT_EQ(got.status(), want.status());
      continue;
    }
    ExpectSameStats(*got, *want);
  }
}

// The option sets each tensor is held to: defaults; small chunks that end
// inside groups and rows; a histogram range inside the values (so both ends
// clamp) with an odd bin count; one bin; a range far narrower than the
// values; an empty range; each of a few groups (where the tensor has them).
std::vector<StatsOptions> OptionSets(const LogicalTensor& t, int64_t groups) {
  std::vector<StatsOptions> sets(1);
  StatsOptions o;
  o.chunk_elements = 1000;
  sets.push_back(o);
  o = StatsOptions();
  o.bins = 37;
  o.range_min = -0.5;
  o.range_max = 0.25;
  o.chunk_elements = 4099;
  sets.push_back(o);
  o = StatsOptions();
  o.bins = 1;
  sets.push_back(o);
  // A range so narrow that values far above it are more than 2^31 bins
  // past it (clamped to the last bin, those below to the first).
  o = StatsOptions();
  o.range_min = 0.1;
  o.range_max = 0.1000001;
  sets.push_back(o);
  o = StatsOptions();
  o.range_min = 0.125;
  o.range_max = 0.125;
  sets.push_back(o);
  if (groups > 0) {
    for (int64_t g : {int64_t{0}, groups / 2, groups - 1}) {
      o = StatsOptions();
      o.group = g;
      o.chunk_elements = 777;
      sets.push_back(o);
    }
  }
  (void)t;
  return sets;
}

int64_t GroupCount(const LogicalTensor& t) {
  if (t.num_elements == 0) return 0;
  int64_t last = -1;
  const int64_t index = t.num_elements - 1;
  if (!t.encoding->GroupIds({&index, 1}, &last).ok()) return 0;
  return last + 1;
}

// Random values of every kind a decoder can produce: ordinary gaussians, a
// tenth exact zeros of either sign, magnitudes 2^-40..2^40 (sums that round
// at nearly every step), and NaN, +inf and -inf about one in 50 each.
std::vector<float> WildValues(size_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, 149), exponent(-40, 40);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::normal_distribution<float> gaussian(0.0f, 0.3f);
  std::vector<float> v(n);
  for (float& f : v) {
    const int k = pick(rng);
    if (k < 8) {
      f = k % 2 ? -0.0f : 0.0f;
    } else if (k < 15) {
      f = std::ldexp(mantissa(rng), exponent(rng)) * (k % 2 ? 1 : -1);
    } else if (specials && k == 15) {
      f = std::bit_cast<float>(static_cast<uint32_t>(
          0x7fc00000u | (rng() & 0x3fffff) | (rng() & 1 ? 0x80000000u : 0)));
    } else if (specials && k == 16) {
      f = std::numeric_limits<float>::infinity();
    } else if (specials && k == 17) {
      f = -std::numeric_limits<float>::infinity();
    } else {
      f = gaussian(rng);
    }
  }
  return v;
}

std::string F16Bytes(const std::vector<float>& v) {
  std::string out(v.size() * 2, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = testing::F32ToF16Bits(v[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

// A GGUF of [rows, 512] tensors: F32 and F16 with specials, the ggml types
// the test quantizers write from gaussians with a tenth zeros (Q8_0, Q4_0,
// Q4_K, Q6_K), and an F32 reference "ref" with zeros of its own where the
// quantized values have some and some not.
std::string WriteRandomGguf(int64_t rows) {
  constexpr int64_t kCols = 512;
  const size_t n = static_cast<size_t>(rows * kCols);
  std::vector<float> wild = WildValues(n, 3, true);
  std::vector<float> plain = WildValues(n, 5, false);
  for (float& f : plain) f = std::isfinite(f) && std::fabs(f) < 4 ? f : 0.5f;
  std::vector<float> ref = plain;
  std::mt19937 rng(11);
  for (size_t i = 0; i < n; ++i) {
    if (rng() % 7 == 0) ref[i] = 0;
    if (rng() % 5 == 0) plain[i] = 0;  // pruned where ref is 0 too
  }
  GgufSpec s;
  s.kv.push_back({"general.architecture", GgufString("llama")});
  s.tensors.push_back({"f32", {kCols, rows}, 0, testing::ToF32Bytes(wild)});
  s.tensors.push_back({"f16", {kCols, rows}, 1, F16Bytes(wild)});
  s.tensors.push_back({"q8_0", {kCols, rows}, 8, testing::QuantizeQ8_0(plain)});
  s.tensors.push_back({"q4_0", {kCols, rows}, 2, testing::QuantizeQ4_0(plain)});
  s.tensors.push_back(
      {"q4_k", {kCols, rows}, 12, testing::QuantizeQ4_K(plain)});
  s.tensors.push_back(
      {"q6_k", {kCols, rows}, 14, testing::QuantizeQ6_K(plain)});
  s.tensors.push_back({"ref", {kCols, rows}, 0, testing::ToF32Bytes(ref)});
  const std::string path = MakeTempDir() + "/random.gguf";
  WriteFile(path, BuildGguf(s));
  return path;
}

// 160 rows of 512: past the size where pass 1 buckets values for the
// histogram (the fixtures below are smaller, and take two plain passes).
TEST(StatsReferenceTest, RandomGgufTensorsMatchTheElementwisePass) {
  auto ckpt = Checkpoint::Open(WriteRandomGguf(160));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const LogicalTensor* ref = (*ckpt)->FindTensor("ref");
  ASSERT_NE(ref, nullptr);
  for (const char* name : {"f32", "f16", "q8_0", "q4_0", "q4_k", "q6_k"}) {
    const LogicalTensor* t = (*ckpt)->FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    const int64_t groups = GroupCount(*t);
    for (const StatsOptions& o : OptionSets(*t, groups)) {
      for (const LogicalTensor* r :
           {static_cast<const LogicalTensor*>(nullptr), ref}) {
        SCOPED_TRACE(absl::StrCat(name, " chunk ", o.chunk_elements, " bins ",
                                  o.bins, " group ", o.group.value_or(-1),
                                  r != nullptr ? " with ref" : ""));
        ExpectSameAsReference(*t, r, o);
      }
    }
  }
}

// The numpy writers' MLX model and HQQ checkpoints (tests/python/writers).
std::vector<std::string> WriterModels() {
  const std::string hqq = testing::WriterOutput("hqq.py");
  return {testing::WriterOutput("mlx_writer.py") + "/model",
          hqq + "/hqq_4bit_g64", hqq + "/hqq_mixed_bits",
          hqq + "/hqq_axis0_bf16"};
}

// The fixtures' formats: every ggml type and convention the suite carries,
// with each option set (their own tensor as the reference: every zero
// pruned).
TEST(StatsReferenceTest, FixtureFormatsMatchTheElementwisePass) {
  struct Case {
    const char* fixture;
    const char* tensor;
  };
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
      {"safetensors/bnb_nf4", "model.layers.0.self_attn.q_proj.weight"},
      {"safetensors/mxfp4_gptoss", "model.layers.0.mlp.experts.down_proj"},
  };
  std::vector<std::pair<std::string, std::string>> tensors;
  for (const Case& c : cases) tensors.push_back({Fixture(c.fixture), c.tensor});
  // The numpy writers' MLX (every mode, bits and group size) and HQQ
  // (axis 1 and 0, 1 to 8 bits) models: every quantized tensor.
  for (const std::string& dir : WriterModels()) {
    auto ckpt = Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    for (const LogicalTensor& t : (*ckpt)->tensors()) {
      if (t.encoding->info().quantized) tensors.push_back({dir, t.name});
    }
  }
  for (const auto& [path, name] : tensors) {
    auto ckpt = Checkpoint::Open(path);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    const LogicalTensor* t = (*ckpt)->FindTensor(name);
    ASSERT_NE(t, nullptr) << path << " " << name;
    const int64_t groups = GroupCount(*t);
    for (const StatsOptions& o : OptionSets(*t, groups)) {
      for (const LogicalTensor* r :
           {static_cast<const LogicalTensor*>(nullptr), t}) {
        SCOPED_TRACE(absl::StrCat(
            path, " ", name, " chunk ", o.chunk_elements, " bins ", o.bins,
            " group ", o.group.value_or(-1), r != nullptr ? " with ref" : ""));
        ExpectSameAsReference(*t, r, o);
      }
    }
  }
}

// The conventions whose groups of 32 or more have 16 levels or fewer take
// the pass by codes (Encoding::CodeLevelRuns), and only those: not
// act-order groups, NVFP4's groups of 16, codes wider than 4 bits, HQQ's
// axis 0 (a group a column), nor one group asked for.
TEST(StatsReferenceTest, ConventionGroupsOf32OrMoreGoByCodes) {
  const std::string mlx = testing::WriterOutput("mlx_writer.py") + "/model";
  const std::string hqq = testing::WriterOutput("hqq.py");
  const std::string l0 = "model.layers.0.", l1 = "model.layers.1.";
  const struct {
    std::string path, tensor;
    StatsPath path_taken;
  } cases[] = {
      {Fixture("safetensors/gptq_4bit_g32"), l0 + "self_attn.q_proj.weight",
       StatsPath::kCodeRuns},
      {Fixture("safetensors/awq_4bit_g32"), l0 + "self_attn.q_proj.weight",
       StatsPath::kCodeRuns},
      {Fixture("safetensors/ct_w4a16_group"), l0 + "self_attn.q_proj.weight",
       StatsPath::kCodeRuns},
      {Fixture("safetensors/bnb_nf4"), l0 + "self_attn.q_proj.weight",
       StatsPath::kCodeRuns},
      {Fixture("safetensors/mxfp4_gptoss"), l0 + "mlp.experts.down_proj",
       StatsPath::kCodeRuns},
      {mlx, l0 + "self_attn.q_proj.weight", StatsPath::kCodeRuns},  // int4
      {mlx, l0 + "self_attn.k_proj.weight", StatsPath::kCodeRuns},  // int2
      {mlx, l0 + "self_attn.v_proj.weight", StatsPath::kCodeRuns},  // int3
      {mlx, l1 + "self_attn.q_proj.weight", StatsPath::kCodeRuns},  // mxfp4
      {hqq + "/hqq_4bit_g64", l0 + "self_attn.q_proj.weight",
       StatsPath::kCodeRuns},
      {hqq + "/hqq_mixed_bits", l0 + "self_attn.o_proj.weight",  // 1-bit
       StatsPath::kCodeRuns},
      {Fixture("safetensors/gptq_4bit_g32_actorder"),
       l0 + "self_attn.q_proj.weight", StatsPath::kValues},
      {mlx, l1 + "self_attn.v_proj.weight", StatsPath::kValues},  // nvfp4
      {mlx, l0 + "mlp.up_proj.weight", StatsPath::kValues},       // int8
      {hqq + "/hqq_axis0_bf16", l0 + "mlp.down_proj.weight",
       StatsPath::kValues},
      {hqq + "/hqq_mixed_bits", l0 + "mlp.up_proj.weight",  // 8-bit
       StatsPath::kValues},
  };
  for (const auto& c : cases) {
    auto ckpt = Checkpoint::Open(c.path);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    const LogicalTensor* t = (*ckpt)->FindTensor(c.tensor);
    ASSERT_NE(t, nullptr) << c.path << " " << c.tensor;
    EXPECT_EQ(StatsPathForTesting(*t, StatsOptions()), c.path_taken)
        << c.path << " " << c.tensor;
    StatsOptions one_group;
    one_group.group = 0;
    EXPECT_EQ(StatsPathForTesting(*t, one_group), StatsPath::kValues)
        << c.path << " " << c.tensor;
  }
}

// The ggml types whose sub-blocks hold 16 levels or fewer take the pass by
// codes from their stored blocks (core/stats_code_blocks.h), and only
// those: not Q5_0/Q5_1/Q5_K (32 levels), Q6_K, Q8_0, NVFP4 (sub-blocks of
// 16 with their own scales) nor TQ1_0 (base-3 packing), nor one group asked
// for.
TEST(StatsReferenceTest, GgmlBlocksOf16LevelsOrFewerGoByCodes) {
  const struct {
    const char* fixture;
    StatsPath path_taken;
  } cases[] = {
      {"gguf/Q4_0.gguf", StatsPath::kStoredBlocks},
      {"gguf/Q4_1.gguf", StatsPath::kStoredBlocks},
      {"gguf/Q2_K.gguf", StatsPath::kStoredBlocks},
      {"gguf/Q3_K.gguf", StatsPath::kStoredBlocks},
      {"gguf/IQ4_NL.gguf", StatsPath::kStoredBlocks},
      {"gguf/IQ4_XS.gguf", StatsPath::kStoredBlocks},
      {"gguf/MXFP4.gguf", StatsPath::kStoredBlocks},
      {"gguf/Q5_0.gguf", StatsPath::kValues},
      {"gguf/Q5_1.gguf", StatsPath::kValues},
      {"gguf/Q8_0.gguf", StatsPath::kValues},
      {"gguf/Q5_K.gguf", StatsPath::kValues},
      {"gguf/Q6_K.gguf", StatsPath::kValues},
      {"gguf/NVFP4.gguf", StatsPath::kValues},
      {"gguf/TQ1_0.gguf", StatsPath::kValues},
  };
  for (const auto& c : cases) {
    auto ckpt = Checkpoint::Open(Fixture(c.fixture));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    const LogicalTensor* t = (*ckpt)->FindTensor("blk.0.attn_q.weight");
    ASSERT_NE(t, nullptr) << c.fixture;
    EXPECT_EQ(StatsPathForTesting(*t, StatsOptions()), c.path_taken)
        << c.fixture;
    StatsOptions one_group;
    one_group.group = 0;
    EXPECT_EQ(StatsPathForTesting(*t, one_group), StatsPath::kValues)
        << c.fixture;
  }
}

// Sets the fp16 at `at` of each listed block of `bytes` (blocks of
// `block_bytes`) to `half`: a block's scale made NaN, infinite or zero.
void SetBlockHalf(std::string* bytes, size_t block_bytes, size_t at,
                  std::initializer_list<size_t> blocks, uint16_t half) {
  for (size_t b : blocks)
    std::memcpy(bytes->data() + b * block_bytes + at, &half, 2);
}

// Sets bytes [from, to) of each listed block to `value`: every code of the
// block (or of part of it) equal.
void SetBlockBytes(std::string* bytes, size_t block_bytes, size_t from,
                   size_t to, std::initializer_list<size_t> blocks,
                   uint8_t value) {
  for (size_t b : blocks) {
    std::memset(bytes->data() + b * block_bytes + from, value, to - from);
  }
}

// `blocks` ggml blocks of `block_bytes` random bytes (every byte pattern is
// a valid Q4_1, IQ4_NL, IQ4_XS or MXFP4 block), each f16 at the offsets
// `halves` set to a gaussian of standard deviation `scale`, so that the
// scales are ordinary until the edits below.
std::string RandomBlocks(size_t blocks, size_t block_bytes,
                         std::initializer_list<size_t> halves, float scale,
                         uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(blocks * block_bytes, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  const std::vector<float> g =
      testing::Gaussian(blocks * halves.size(), seed, scale);
  size_t k = 0;
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t at : halves) {
      const uint16_t h = testing::F32ToF16Bits(g[k++]);
      std::memcpy(out.data() + b * block_bytes + at, &h, 2);
    }
  }
  return out;
}

// Groups a statistic from codes would get wrong if it trusted the codes
// alone: scales that are NaN (every value NaN), +Inf (values +-Inf, and NaN
// where the code is 0), zero (every code decodes to 0, so every element sits
// on both end levels), blocks whose codes are all equal (one level used; for
// Q8_0 all -128, the signed end), in the first and last block and in blocks a
// chunk of 777 or 1000 elements straddles; for Q4_K (whose histogram comes
// from its codes per sub-block) also a negative d (levels descending), a
// subnormal d, and d 1 with dmin 0 (integer levels, which land on the edges
// of integer bins). The same for the other types read by codes (random
// blocks): Q4_1 (d at byte 0, m at 2), IQ4_NL (d), IQ4_XS (d; ls 33 with
// d 1 gives integer levels) and MXFP4 (E8M0 scale byte: 0 and 1 subnormal,
// 255 levels past float's range, 128 integer levels) and TQ2_0 (d at byte
// 64; code 3 is 2 d, past the range -d..d) and Q2_K (d at byte 80, dmin at
// 82; scale bytes 0x01 with d 1 give integer levels) and Q3_K (d at 108;
// hmask 0 and codes 0: every element -4 dl). 140 rows of 512: past
// the size
// where pass 1 buckets values; and a one-dimensional F16 and BF16 of 2^17 + 7
// elements (a tail past the last full lane block), with every code pattern
// once among gaussians (every NaN payload, both infinities, subnormals).
std::string WriteAdversarialGguf() {
  constexpr int64_t kRows = 140, kCols = 512;
  const size_t n = static_cast<size_t>(kRows * kCols);
  std::vector<float> plain = WildValues(n, 17, false);
  for (float& f : plain) f = std::isfinite(f) && std::fabs(f) < 4 ? f : 0.25f;
  const size_t last32 = n / 32 - 1, last256 = n / 256 - 1;
  std::string q8 = testing::QuantizeQ8_0(plain);
  SetBlockHalf(&q8, 34, 0, {0, 24, 1500}, 0x7e00);             // NaN
  SetBlockHalf(&q8, 34, 0, {1, 31, 1700}, 0x7c00);             // +Inf
  SetBlockHalf(&q8, 34, 0, {2, 48, last32}, 0x0000);           // zero
  SetBlockHalf(&q8, 34, 0, {3}, 0x8000);                       // -0
  SetBlockBytes(&q8, 34, 2, 34, {4, 62, 2000}, 0x80);          // all -128
  SetBlockBytes(&q8, 34, 2, 34, {5, 2001, last32 - 1}, 0x07);  // all 7
  std::string q4 = testing::QuantizeQ4_0(plain);
  SetBlockHalf(&q4, 18, 0, {0, 24, 1500}, 0x7e00);
  SetBlockHalf(&q4, 18, 0, {1, 31, 1700}, 0xfc00);  // -Inf
  SetBlockHalf(&q4, 18, 0, {2, 48, last32}, 0x0000);
  SetBlockBytes(&q4, 18, 2, 18, {4, 62, 2000}, 0x88);  // code 8: zero
  SetBlockBytes(&q4, 18, 2, 18, {5, 2001, last32 - 1}, 0xff);
  std::string q4k = testing::QuantizeQ4_K(plain);
  SetBlockHalf(&q4k, 144, 0, {0, 40}, 0x7e00);  // d NaN
  SetBlockHalf(&q4k, 144, 2, {1, 41}, 0x7c00);  // dmin +Inf
  SetBlockHalf(&q4k, 144, 0, {2, last256}, 0);  // d zero: every level -m
  SetBlockHalf(&q4k, 144, 2, {2, 3}, 0);        // and dmin zero too
  SetBlockBytes(&q4k, 144, 16, 144, {4, 100}, 0x00);
  SetBlockBytes(&q4k, 144, 16, 80, {5, last256 - 1}, 0xff);
  SetBlockHalf(&q4k, 144, 0, {6, 60}, 0xbc00);  // d -1: levels descending
  SetBlockHalf(&q4k, 144, 0, {7, 61}, 0x0001);  // d the least subnormal
  SetBlockHalf(&q4k, 144, 0, {8, 62}, 0x3c00);  // d 1 and dmin 0: integer
  SetBlockHalf(&q4k, 144, 2, {8, 62}, 0x0000);  // levels, on integer bins
  std::string q6k = testing::QuantizeQ6_K(plain);
  SetBlockHalf(&q6k, 210, 208, {0, 40}, 0x7e00);
  SetBlockHalf(&q6k, 210, 208, {1, last256}, 0x7c00);
  SetBlockHalf(&q6k, 210, 208, {2, 41}, 0);
  SetBlockBytes(&q6k, 210, 0, 192, {4, 100}, 0x00);  // every code -32
  const size_t blocks32 = n / 32, blocks256 = n / 256;
  std::string q41 = RandomBlocks(blocks32, 20, {0, 2}, 0.05f, 31);
  SetBlockHalf(&q41, 20, 0, {0, 24, 1500}, 0x7e00);     // d NaN
  SetBlockHalf(&q41, 20, 2, {1, 31, 1700}, 0x7c00);     // m +Inf
  SetBlockHalf(&q41, 20, 0, {2, 48, last32}, 0x0000);   // d zero: all m
  SetBlockHalf(&q41, 20, 2, {2, 3}, 0x0000);            // and m zero
  SetBlockHalf(&q41, 20, 0, {3}, 0x8000);               // d -0
  SetBlockBytes(&q41, 20, 4, 20, {4, 62, 2000}, 0x00);  // all code 0
  SetBlockBytes(&q41, 20, 4, 20, {5, 2001, last32 - 1}, 0xff);
  SetBlockHalf(&q41, 20, 0, {6, 60}, 0xbc00);      // d -1: levels descending
  SetBlockHalf(&q41, 20, 0, {7, 61}, 0x0001);      // d the least subnormal
  SetBlockHalf(&q41, 20, 0, {8, 63, 64}, 0x3c00);  // d 1, m 0 and -8:
  SetBlockHalf(&q41, 20, 2, {8, 63}, 0x0000);      // integer levels, on
  SetBlockHalf(&q41, 20, 2, {64}, 0xc800);         // integer bins
  std::string nl = RandomBlocks(blocks32, 18, {0}, 0.02f, 37);
  SetBlockHalf(&nl, 18, 0, {0, 24, 1500}, 0x7e00);
  SetBlockHalf(&nl, 18, 0, {1, 31, 1700}, 0xfc00);  // -Inf
  SetBlockHalf(&nl, 18, 0, {2, 48, last32}, 0x0000);
  SetBlockHalf(&nl, 18, 0, {3}, 0x8000);
  SetBlockBytes(&nl, 18, 2, 18, {4, 62, 2000}, 0x88);  // all level 1
  SetBlockBytes(&nl, 18, 2, 18, {5, 2001, last32 - 1}, 0xff);
  SetBlockHalf(&nl, 18, 0, {6, 60}, 0xbc00);
  SetBlockHalf(&nl, 18, 0, {7, 61}, 0x0001);
  SetBlockHalf(&nl, 18, 0, {8, 63}, 0x3c00);  // d 1: levels -127..113
  std::string xs = RandomBlocks(blocks256, 136, {0}, 0.01f, 41);
  SetBlockHalf(&xs, 136, 0, {0, 40}, 0x7e00);
  SetBlockHalf(&xs, 136, 0, {1, 41}, 0x7c00);
  SetBlockHalf(&xs, 136, 0, {2, last256}, 0x0000);
  SetBlockHalf(&xs, 136, 0, {3}, 0x8000);
  SetBlockBytes(&xs, 136, 8, 136, {4, 100}, 0x00);
  SetBlockBytes(&xs, 136, 8, 72, {5, last256 - 1}, 0xff);
  SetBlockHalf(&xs, 136, 0, {6, 60}, 0xbc00);
  SetBlockHalf(&xs, 136, 0, {7, 61}, 0x0001);
  SetBlockHalf(&xs, 136, 0, {8, 62}, 0x3c00);    // d 1 and every ls 33
  SetBlockHalf(&xs, 136, 2, {8, 62}, 0xaaaa);    // (high bits 2, low 1):
  SetBlockBytes(&xs, 136, 4, 8, {8, 62}, 0x11);  // integer levels
  SetBlockBytes(&xs, 136, 4, 8, {9}, 0x00);      // ls 0 and 32:
  SetBlockHalf(&xs, 136, 2, {9}, 0x8888);        // dl -32 d and 0
  std::string mx = RandomBlocks(blocks32, 17, {}, 0, 43);
  for (size_t b = 0; b < blocks32; ++b)  // scales 2^-8 .. 2^3
    mx[b * 17] = static_cast<char>(120 + static_cast<uint8_t>(mx[b * 17]) % 12);
  SetBlockBytes(&mx, 17, 0, 1, {0, 24, 1500}, 0);      // subnormal 2^-128
  SetBlockBytes(&mx, 17, 0, 1, {1, 31}, 1);            // 2^-127
  SetBlockBytes(&mx, 17, 0, 1, {2, 48, last32}, 255);  // 12 * 2^127: Inf
  SetBlockBytes(&mx, 17, 0, 1, {3}, 254);
  SetBlockBytes(&mx, 17, 1, 17, {4, 62, 2000}, 0x88);  // all code 8: +0
  SetBlockBytes(&mx, 17, 1, 17, {5, 2001, last32 - 1}, 0xff);
  SetBlockBytes(&mx, 17, 0, 1, {8, 63}, 128);  // 1: integer levels
  std::string tq = RandomBlocks(blocks256, 66, {64}, 0.05f, 47);
  SetBlockHalf(&tq, 66, 64, {0, 40}, 0x7e00);
  SetBlockHalf(&tq, 66, 64, {1, 41}, 0xfc00);
  SetBlockHalf(&tq, 66, 64, {2, last256}, 0x0000);
  SetBlockHalf(&tq, 66, 64, {3}, 0x8000);
  SetBlockBytes(&tq, 66, 0, 64, {4, 100}, 0x55);  // all code 1: zero
  SetBlockBytes(&tq, 66, 0, 32, {5, last256 - 1}, 0xff);
  SetBlockHalf(&tq, 66, 64, {6, 60}, 0xbc00);
  SetBlockHalf(&tq, 66, 64, {7, 61}, 0x0001);
  SetBlockHalf(&tq, 66, 64, {8, 62}, 0x3c00);  // d 1: levels -1, 0, 1, 2
  std::string q2k = RandomBlocks(blocks256, 84, {80, 82}, 0.01f, 53);
  SetBlockHalf(&q2k, 84, 80, {0, 40}, 0x7e00);       // d NaN
  SetBlockHalf(&q2k, 84, 82, {1, 41}, 0x7c00);       // dmin +Inf
  SetBlockHalf(&q2k, 84, 80, {2, last256}, 0x0000);  // d zero: levels -ml
  SetBlockHalf(&q2k, 84, 82, {2, 3}, 0x0000);        // and dmin zero
  SetBlockHalf(&q2k, 84, 80, {3}, 0x8000);
  SetBlockBytes(&q2k, 84, 16, 80, {4, 100}, 0x00);
  SetBlockBytes(&q2k, 84, 16, 48, {5, last256 - 1}, 0xff);
  SetBlockHalf(&q2k, 84, 80, {6, 60}, 0xbc00);
  SetBlockHalf(&q2k, 84, 80, {7, 61}, 0x0001);
  SetBlockHalf(&q2k, 84, 80, {8, 62}, 0x3c00);    // d 1, dmin 1, sc 1:
  SetBlockHalf(&q2k, 84, 82, {8, 62}, 0x3c00);    // levels 0..3, and with
  SetBlockBytes(&q2k, 84, 0, 8, {8, 62}, 0x01);   // m 8 -8..-5, on
  SetBlockBytes(&q2k, 84, 8, 16, {8, 62}, 0x81);  // integer bins
  std::string q3k = RandomBlocks(blocks256, 110, {108}, 0.002f, 59);
  SetBlockHalf(&q3k, 110, 108, {0, 40}, 0x7e00);
  SetBlockHalf(&q3k, 110, 108, {1, 41}, 0x7c00);
  SetBlockHalf(&q3k, 110, 108, {2, last256}, 0x0000);
  SetBlockHalf(&q3k, 110, 108, {3}, 0x8000);
  SetBlockBytes(&q3k, 110, 0, 96, {4, 100}, 0x00);  // every code 0: -4 dl
  SetBlockBytes(&q3k, 110, 0, 96, {5, last256 - 1}, 0xff);
  SetBlockHalf(&q3k, 110, 108, {6, 60}, 0xbc00);
  SetBlockHalf(&q3k, 110, 108, {7, 61}, 0x0001);
  SetBlockHalf(&q3k, 110, 108, {8, 62}, 0x3c00);  // d 1
  GgufSpec s;
  s.kv.push_back({"general.architecture", GgufString("llama")});
  s.tensors.push_back({"q3_k", {kCols, kRows}, 11, q3k});
  s.tensors.push_back({"q2_k", {kCols, kRows}, 10, q2k});
  s.tensors.push_back({"tq2_0", {kCols, kRows}, 35, tq});
  s.tensors.push_back({"q4_1", {kCols, kRows}, 3, q41});
  s.tensors.push_back({"iq4_nl", {kCols, kRows}, 20, nl});
  s.tensors.push_back({"iq4_xs", {kCols, kRows}, 23, xs});
  s.tensors.push_back({"mxfp4", {kCols, kRows}, 39, mx});
  s.tensors.push_back({"q8_0", {kCols, kRows}, 8, q8});
  s.tensors.push_back({"q4_0", {kCols, kRows}, 2, q4});
  s.tensors.push_back({"q4_k", {kCols, kRows}, 12, q4k});
  s.tensors.push_back({"q6_k", {kCols, kRows}, 14, q6k});
  constexpr int64_t kTail = (int64_t{1} << 17) + 7;
  std::vector<float> g = testing::Gaussian(kTail, 23, 0.5f);
  std::string f16(kTail * 2, '\0'), bf16(kTail * 2, '\0');
  for (int64_t i = 0; i < kTail; ++i) {
    // Every 16-bit pattern once, at the even indices, between gaussians.
    const bool pattern = i % 2 == 0 && i < (int64_t{1} << 17);
    const auto code = static_cast<uint16_t>(i / 2);
    const uint16_t f = pattern ? code : testing::F32ToF16Bits(g[i]);
    const uint16_t b = pattern ? code : testing::F32ToBF16Bits(g[i]);
    std::memcpy(f16.data() + 2 * i, &f, 2);
    std::memcpy(bf16.data() + 2 * i, &b, 2);
  }
  s.tensors.push_back({"f16", {kTail}, 1, f16});
  s.tensors.push_back({"bf16", {kTail}, 30, bf16});
  const std::string path = MakeTempDir() + "/adversarial.gguf";
  WriteFile(path, BuildGguf(s));
  return path;
}

TEST(StatsReferenceTest, AdversarialGroupsMatchTheElementwisePass) {
  auto ckpt = Checkpoint::Open(WriteAdversarialGguf());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const absl::flat_hash_set<std::string> by_blocks = {
      "q4_0",  "q4_1",  "q4_k", "iq4_nl", "iq4_xs",
      "mxfp4", "tq2_0", "q2_k", "q3_k"};
  for (const char* name :
       {"q8_0", "q4_0", "q4_1", "q4_k", "q6_k", "iq4_nl", "iq4_xs", "mxfp4",
        "tq2_0", "q2_k", "q3_k", "f16", "bf16"}) {
    const LogicalTensor* t = (*ckpt)->FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(
        StatsPathForTesting(*t, StatsOptions()) == StatsPath::kStoredBlocks,
        by_blocks.contains(name))
        << name;
    // The edits took: NaN and infinite values (a NaN or infinite scale,
    // or, for F16 and BF16, their codes; MXFP4's scales have no NaN).
    auto whole = ComputeStats(*t, nullptr, StatsOptions());
    ASSERT_TRUE(whole.ok()) << whole.status();
    if (std::string(name) != "mxfp4") {
      EXPECT_GT(whole->nan_count, 0) << name;
    }
    EXPECT_GT(whole->inf_count, 0) << name;
    const int64_t groups = GroupCount(*t);
    std::vector<StatsOptions> sets = OptionSets(*t, groups);
    // The groups with a NaN, infinite and zero scale themselves.
    for (int64_t g : {int64_t{1}, int64_t{2}, int64_t{4}}) {
      if (g >= groups) continue;
      StatsOptions o;
      o.group = g;
      sets.push_back(o);
    }
    // Integer bins, on which integer levels land exactly (Q4_K's blocks of
    // d 1 and dmin 0), through the middle of the values.
    StatsOptions edges;
    edges.range_min = -8;
    edges.range_max = 8;
    edges.bins = 16;
    sets.push_back(edges);
    // The same for IQ4_NL's integer levels -127..113 at d 1.
    edges.range_min = -128;
    edges.range_max = 128;
    edges.bins = 256;
    sets.push_back(edges);
    for (const StatsOptions& o : sets) {
      SCOPED_TRACE(absl::StrCat(name, " chunk ", o.chunk_elements, " bins ",
                                o.bins, " group ", o.group.value_or(-1)));
      ExpectSameAsReference(*t, nullptr, o);
    }
  }
}

// Sets entry `i` of an F16 tensor's data to `half`.
void SetHalf(testing::StTensor* t, size_t i, uint16_t half) {
  std::memcpy(t->data.data() + 2 * i, &half, 2);
}

// Sets entry `i` of an I32 tensor's data to `word`.
void SetWord(testing::StTensor* t, size_t i, uint32_t word) {
  std::memcpy(t->data.data() + 4 * i, &word, 4);
}

// The GPTQ and AWQ fixtures with adversarial groups: scales NaN, +Inf,
// -Inf, zero and -0, and groups whose codes are all 0, all 8 or all 15
// (GPTQ: qweight [in / 8, out], eight rows of words a group of 32 inputs;
// AWQ: qweight [in, out / 8], a word eight outputs of one input).
std::string WriteAdversarialConvention(const std::string& fixture) {
  const std::string dir = MakeTempDir();
  testing::CopyFixtureInto(fixture, dir);
  const bool gptq = fixture.starts_with("gptq");
  testing::EditSafetensors(
      dir + "/model.safetensors", [&](std::vector<testing::StTensor>& ts) {
        for (testing::StTensor& t : ts) {
          if (t.name.ends_with("q_proj.scales")) {  // F16 [4, 64]
            SetHalf(&t, 0, 0x7e00);
            SetHalf(&t, 1, 0x7c00);
            SetHalf(&t, 2, 0x0000);
            SetHalf(&t, 64 + 5, 0xfc00);
            SetHalf(&t, 3 * 64 + 63, 0x8000);
          } else if (t.name.ends_with("q_proj.qweight")) {
            if (gptq) {  // I32 [16, 64]
              for (size_t row = 0; row < 4; ++row) {
                SetWord(&t, row * 64 + 3, 0x88888888u);
                SetWord(&t, row * 64 + 4, 0x00000000u);
                SetWord(&t, (12 + row) * 64 + 63, 0xffffffffu);
              }
            } else {  // I32 [128, 8]
              for (size_t row = 0; row < 32; ++row) {
                SetWord(&t, row * 8, 0x00000000u);
                SetWord(&t, (96 + row) * 8 + 7, 0xffffffffu);
              }
            }
          }
        }
      });
  return dir;
}

TEST(StatsReferenceTest, AdversarialConventionGroupsMatchTheElementwisePass) {
  for (const char* fixture : {"gptq_4bit_g32", "awq_4bit_g32"}) {
    auto ckpt = Checkpoint::Open(WriteAdversarialConvention(fixture));
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    const LogicalTensor* t =
        (*ckpt)->FindTensor("model.layers.0.self_attn.q_proj.weight");
    ASSERT_NE(t, nullptr) << fixture;
    const int64_t groups = GroupCount(*t);
    ASSERT_GT(groups, 4) << fixture;
    // The edits took: NaN and infinite values, zeros, one level in a group.
    auto whole = ComputeStats(*t, nullptr, StatsOptions());
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_GT(whole->nan_count, 0) << fixture;
    EXPECT_GT(whole->inf_count, 0) << fixture;
    EXPECT_GT(whole->zeros, 0) << fixture;
    std::vector<StatsOptions> sets = OptionSets(*t, groups);
    for (int64_t g : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}}) {
      StatsOptions o;
      o.group = g;
      sets.push_back(o);
    }
    for (const StatsOptions& o : sets) {
      SCOPED_TRACE(absl::StrCat(fixture, " chunk ", o.chunk_elements, " bins ",
                                o.bins, " group ", o.group.value_or(-1)));
      ExpectSameAsReference(*t, nullptr, o);
    }
  }
}

// Conventions' 4-bit groups of 128 along a row, the layout whose statistics
// are taken from codes per run (ComputeStats' CodesPass: each level a
// group uses binned once with its count): GPTQ, AWQ and compressed-tensors,
// [out, 512] with random codes and zero-points, and adversarial groups, each
// a (group row, output) pair: scales NaN, +Inf, -Inf, +0, -0, negative
// (levels descending), subnormal, and 1 (integer levels, which land on the
// edges of a range of integer bins); groups whose codes are all 0, all 8 or
// all 15 (every element on one end level, or one level used). `out` 160
// puts the tensor past the size where bins come from a table of 16-bit
// buckets (2^16 elements); 112 leaves it short of it.
std::string WriteLongGroupConvention(const std::string& kind, int64_t out) {
  using testing::StTensor;
  constexpr int64_t kIn = 512, kGroup = 128, kGroups = kIn / kGroup;
  const std::string m = "model.layers.0.mlp.down_proj";
  std::mt19937 rng(29);
  auto random_bytes = [&](int64_t n) {
    std::string b(static_cast<size_t>(n), '\0');
    for (char& c : b) c = static_cast<char>(rng());
    return b;
  };
  const bool bf16 = kind == "ct";
  // Scales [kGroups, out] (GPTQ, AWQ) or [out, kGroups] (ct).
  std::vector<uint16_t> scales(static_cast<size_t>(kGroups * out));
  for (uint16_t& x : scales) {
    const float v = 0.001f + static_cast<float>(rng() % 10000) * 1e-6f;
    x = bf16 ? testing::F32ToBF16Bits(v) : testing::F32ToF16Bits(v);
  }
  auto scale_at = [&](int64_t g, int64_t o) -> uint16_t& {
    return scales[static_cast<size_t>(bf16 ? o * kGroups + g : g * out + o)];
  };
  // F16 and BF16 bit patterns: NaN, +Inf, -Inf, +0, -0, -1, the least
  // subnormal, 1.
  const uint16_t f16[] = {0x7e00, 0x7c00, 0xfc00, 0x0000,
                          0x8000, 0xbc00, 0x0001, 0x3c00};
  const uint16_t b16[] = {0x7fc0, 0x7f80, 0xff80, 0x0000,
                          0x8000, 0xbf80, 0x0001, 0x3f80};
  for (int k = 0; k < 8; ++k) {
    scale_at(k % kGroups, 3 + 5 * k) = bf16 ? b16[k] : f16[k];
    scale_at(kGroups - 1, out - 1 - k) = bf16 ? b16[k] : f16[k];
  }
  std::string codes = random_bytes(kIn * out / 2);
  // Sets every code of group (g, o) to `code` (a nibble).
  auto set_group = [&](int64_t g, int64_t o, uint32_t code) {
    for (int64_t i = g * kGroup; i < (g + 1) * kGroup; ++i) {
      // The nibble of input i, output o: GPTQ words [in / 8, out] (eight
      // inputs a word), AWQ [in, out / 8] (eight outputs a word, an
      // interleaved order: all eight set alike), ct [out, in / 8].
      const int64_t word = kind == "gptq"  ? (i / 8) * out + o
                           : kind == "awq" ? i * (out / 8) + o / 8
                                           : o * (kIn / 8) + i / 8;
      const int shift = kind == "awq" ? 0 : static_cast<int>(4 * (i % 8));
      uint32_t w;
      std::memcpy(&w, codes.data() + 4 * word, 4);
      w = kind == "awq" ? code * 0x11111111u
                        : (w & ~(0xfu << shift)) | (code << shift);
      std::memcpy(codes.data() + 4 * word, &w, 4);
    }
  };
  set_group(0, 40, 0);
  set_group(1, 48, 8);
  set_group(2, 56, 15);
  set_group(kGroups - 1, out - 8, 15);
  set_group(0, 3, 0);  // a NaN scale's group, one code
  std::vector<StTensor> t;
  std::string config;
  if (kind == "gptq") {
    t = {{m + ".qweight", "I32", {kIn / 8, out}, codes},
         {m + ".qzeros",
          "I32",
          {kGroups, out / 8},
          random_bytes(kGroups * out / 2)},
         {m + ".scales", "F16", {kGroups, out}, testing::Bytes(scales)}};
    config = R"({"quantization_config": {"bits": 4, "group_size": 128,
      "desc_act": false, "sym": false, "quant_method": "gptq",
      "checkpoint_format": "gptq"}})";
  } else if (kind == "awq") {
    t = {{m + ".qweight", "I32", {kIn, out / 8}, codes},
         {m + ".qzeros",
          "I32",
          {kGroups, out / 8},
          random_bytes(kGroups * out / 2)},
         {m + ".scales", "F16", {kGroups, out}, testing::Bytes(scales)}};
    config = R"({"quantization_config": {"quant_method": "awq", "bits": 4,
      "group_size": 128, "zero_point": true, "version": "gemm"}})";
  } else {
    t = {{m + ".weight_packed", "I32", {out, kIn / 8}, codes},
         {m + ".weight_scale", "BF16", {out, kGroups}, testing::Bytes(scales)},
         {m + ".weight_shape",
          "I32",
          {2},
          testing::Bytes(std::vector<int32_t>{static_cast<int32_t>(out),
                                              static_cast<int32_t>(kIn)})}};
    config = R"({"quantization_config": {"quant_method": "compressed-tensors",
      "format": "pack-quantized", "quantization_status": "compressed",
      "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
      "num_bits": 4, "type": "int", "symmetric": true, "strategy": "group",
      "group_size": 128}}}}})";
  }
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/model.safetensors", testing::BuildSafetensors(t));
  WriteFile(dir + "/config.json", config);
  return dir;
}

TEST(StatsReferenceTest, LongGroupConventionsMatchTheElementwisePass) {
  for (const char* kind : {"gptq", "awq", "ct"}) {
    for (int64_t out : {int64_t{112}, int64_t{160}}) {
      auto ckpt = Checkpoint::Open(WriteLongGroupConvention(kind, out));
      ASSERT_TRUE(ckpt.ok()) << ckpt.status();
      const LogicalTensor* t =
          (*ckpt)->FindTensor("model.layers.0.mlp.down_proj.weight");
      ASSERT_NE(t, nullptr) << kind;
      // The edits took: NaN and infinite values, zeros.
      auto whole = ComputeStats(*t, nullptr, StatsOptions());
      ASSERT_TRUE(whole.ok()) << whole.status();
      EXPECT_GT(whole->nan_count, 0) << kind;
      EXPECT_GT(whole->inf_count, 0) << kind;
      EXPECT_GT(whole->zeros, 0) << kind;
      EXPECT_GT(whole->at_lowest_level + whole->at_highest_level, 0) << kind;
      std::vector<StatsOptions> sets = OptionSets(*t, GroupCount(*t));
      // Integer bins, on which a scale-1 group's levels land exactly; a
      // range that cuts through the groups' levels (both ends clamp); one
      // beyond every level.
      for (auto [lo, hi, bins] :
           {std::tuple{-8.0, 8.0, 16}, std::tuple{-0.02, 0.01, 9},
            std::tuple{100.0, 200.0, 5}}) {
        StatsOptions o;
        o.range_min = lo;
        o.range_max = hi;
        o.bins = bins;
        sets.push_back(o);
      }
      for (const StatsOptions& o : sets) {
        for (const LogicalTensor* r :
             {static_cast<const LogicalTensor*>(nullptr), t}) {
          SCOPED_TRACE(absl::StrCat(kind, " out ", out, " chunk ",
                                    o.chunk_elements, " bins ", o.bins,
                                    " group ", o.group.value_or(-1),
                                    r != nullptr ? " with ref" : ""));
          ExpectSameAsReference(*t, r, o);
        }
      }
    }
  }
}

// Plain F16 and BF16 take their moments from their codes' counts
// (stats.h's code order) at every size and wherever they lie: here stored
// at odd offsets (every tensor after a one-byte "pad", so none is read in
// place: each is decoded and keyed back; the codes read in place are
// AdversarialGroups' GGUF F16 and BF16), small tensors (under the 2^16
// elements where other dtypes start counting buckets), and tensors whose
// minimum is a zero of both signs (the sign of the first in index order:
// -0 first in "neg_first", +0 first in "pos_first").
TEST(StatsReferenceTest, FloatCodesMatchTheElementwisePassWhereverStored) {
  constexpr int64_t kLong = (int64_t{1} << 16) + 3, kShort = 999;
  std::vector<float> g = testing::Gaussian(kLong, 31, 0.5f);
  auto f16_of = [&](int64_t n, bool non_negative, uint16_t zero0,
                    uint16_t zero1) {
    std::string bytes(2 * n, '\0');
    for (int64_t i = 0; i < n; ++i) {
      const float f = non_negative ? std::fabs(g[i]) : g[i];
      uint16_t h = testing::F32ToF16Bits(f);
      if (i == 5) h = zero0;
      if (i % 97 == 11) h = zero1;
      if (i == 17) h = 0x7e01;  // a NaN
      if (i == 18) h = 0xfc00;  // -inf, counted apart from the bounds
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
    return bytes;
  };
  auto bf16_of = [&](int64_t n) {
    std::string bytes(2 * n, '\0');
    for (int64_t i = 0; i < n; ++i) {
      uint16_t b = testing::F32ToBF16Bits(std::fabs(g[i]));
      if (i == 3) b = 0x8000;
      if (i % 89 == 7) b = 0x0000;
      std::memcpy(bytes.data() + 2 * i, &b, 2);
    }
    return bytes;
  };
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/model.safetensors",
            testing::BuildSafetensors({
                {"pad", "U8", {1}, std::string(1, '\x01')},
                {"odd", "F16", {kLong}, f16_of(kLong, false, 0, 0x8000)},
                {"neg_first", "F16", {kLong}, f16_of(kLong, true, 0x8000, 0)},
                {"pos_first", "F16", {kLong}, f16_of(kLong, true, 0, 0x8000)},
                {"short", "F16", {kShort}, f16_of(kShort, false, 0x8000, 0)},
                {"bf16", "BF16", {kLong}, bf16_of(kLong)},
            }));
  auto ckpt = Checkpoint::Open(dir + "/model.safetensors");
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  for (const char* name : {"odd", "neg_first", "pos_first", "short", "bf16"}) {
    const LogicalTensor* t = (*ckpt)->FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    for (const LogicalTensor* r :
         {static_cast<const LogicalTensor*>(nullptr), t}) {
      for (int64_t chunk : {int64_t{1} << 18, int64_t{1000}}) {
        StatsOptions o;
        o.chunk_elements = chunk;
        SCOPED_TRACE(absl::StrCat(name, " chunk ", chunk,
                                  r != nullptr ? " with ref" : ""));
        ExpectSameAsReference(*t, r, o);
      }
    }
  }
  // The zero bounds took the first zero's sign.
  auto neg = ComputeStats(*(*ckpt)->FindTensor("neg_first"), nullptr, {});
  auto pos = ComputeStats(*(*ckpt)->FindTensor("pos_first"), nullptr, {});
  ASSERT_TRUE(neg.ok() && pos.ok());
  EXPECT_TRUE(std::signbit(neg->min));
  EXPECT_FALSE(std::signbit(pos->min));
}

// Sets entry `i` of a tensor's data, an element of sizeof(T) bytes.
template <typename T>
void SetAt(testing::StTensor* t, size_t i, T value) {
  std::memcpy(t->data.data() + sizeof(T) * i, &value, sizeof(T));
}

// Sets bytes [from, to) of a tensor's data to `byte`: codes all equal.
void SetBytes(testing::StTensor* t, size_t from, size_t to, uint8_t byte) {
  std::memset(t->data.data() + from, byte, to - from);
}

// A copy of checkpoint directory `dir` with `edit` applied to its
// model.safetensors.
std::string EditedCopy(const std::string& dir,
                       const std::function<void(const std::string& name,
                                                testing::StTensor&)>& edit) {
  const std::string copy = testing::CopyDir(dir);
  testing::EditSafetensors(copy + "/model.safetensors",
                           [&](std::vector<testing::StTensor>& ts) {
                             for (testing::StTensor& t : ts) edit(t.name, t);
                           });
  return copy;
}

// The formats whose levels are not scale * (code - bias), taken by codes
// from each run's level table (Encoding::CodeLevelRuns), with groups that
// table could get wrong: scales NaN, +Inf, -Inf, +0, -0, negative (levels
// descending), the least subnormal, and 1 (levels on the integer edges of
// a range of integer bins: NF4's -1, 0 and 1, E2M1's halves, MLX's and
// HQQ's integers); groups whose codes are all equal; levels that round
// together in bfloat16 (MLX int4: scale 2^-10 on bias 1) or float16 (HQQ:
// zero 60000, where every code - zero rounds to -60000); E8M0 255 (NaN)
// and 254 (2^127, whose largest levels overflow to infinity); NaN and
// infinite biases and zeros.
TEST(StatsReferenceTest, AdversarialLevelTablesMatchTheElementwisePass) {
  const std::string l0 = "model.layers.0.", l1 = "model.layers.1.";
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Edited {
    std::string dir;
    std::vector<std::string> tensors;
  };
  std::vector<Edited> cases;
  // bitsandbytes NF4: absmax F32 [128], codes U8 [4096] (32 bytes a block).
  cases.push_back(
      {EditedCopy(Fixture("safetensors/bnb_nf4"),
                  [&](const std::string& name, testing::StTensor& t) {
                    if (name.ends_with("q_proj.weight.absmax")) {
                      const float v[] = {nan,   inf,  -inf,  0.0f,
                                         -0.0f, 1.0f, -1.0f, 1e-45f};
                      for (size_t k = 0; k < 8; ++k) SetAt(&t, k, v[k]);
                      SetAt(&t, 127, nan);
                    } else if (name.ends_with("q_proj.weight")) {
                      SetBytes(&t, 8 * 32, 9 * 32, 0x00);
                      SetBytes(&t, 9 * 32, 10 * 32, 0xff);
                      SetBytes(&t, 10 * 32, 11 * 32, 0x77);  // NF4's 0
                      SetBytes(&t, 5 * 32, 6 * 32, 0xf0);    // scale 1: +-1
                    }
                  }),
       {l0 + "self_attn.q_proj.weight"}});
  // gpt-oss MXFP4: scales U8 [256] (E8M0), blocks 16 bytes a group of 32.
  cases.push_back(
      {EditedCopy(Fixture("safetensors/mxfp4_gptoss"),
                  [&](const std::string& name, testing::StTensor& t) {
                    if (name.ends_with("down_proj_scales")) {
                      const uint8_t e[] = {255, 0, 127, 254, 1};
                      for (size_t k = 0; k < 5; ++k) SetAt(&t, k, e[k]);
                      SetAt(&t, 255, uint8_t{255});
                    } else if (name.ends_with("down_proj_blocks")) {
                      SetBytes(&t, 3 * 16, 4 * 16, 0x77);  // 6 * 2^127: inf
                      SetBytes(&t, 5 * 16, 6 * 16, 0x88);  // -0
                      SetBytes(&t, 6 * 16, 7 * 16, 0xff);  // -6
                      SetBytes(&t, 7 * 16, 8 * 16, 0x00);
                    }
                  }),
       {l0 + "mlp.experts.down_proj"}});
  // MLX: int4 g64 BF16 q_proj [8, 128] (scales and biases [8, 2], 16 words
  // a row), int2 g32 BF16 k_proj [4, 64] ([4, 2]), mxfp4 g32 layer 1
  // q_proj [4, 64] (scales U8 [4, 2], 8 words a row).
  const uint16_t b16_nan = 0x7fc0, b16_inf = 0x7f80, b16_one = 0x3f80;
  cases.push_back(
      {EditedCopy(testing::WriterOutput("mlx_writer.py") + "/model",
                  [&](const std::string& name, testing::StTensor& t) {
                    if (name == l0 + "self_attn.q_proj.scales" ||
                        name == l0 + "self_attn.k_proj.scales") {
                      const uint16_t v[] = {b16_nan, b16_inf, 0xff80, 0x0000,
                                            0x8000,  b16_one, 0x3a80, 0xbf80};
                      for (size_t k = 0; k < 8; ++k) SetAt(&t, k, v[k]);
                    } else if (name == l0 + "self_attn.q_proj.biases" ||
                               name == l0 + "self_attn.k_proj.biases") {
                      SetAt(&t, 3,
                            uint16_t{0x3f00});  // -0 scale: every code 0.5
                      SetAt(&t, 5, uint16_t{0x0000});  // integer levels
                      SetAt(&t, 6, b16_one);           // 1 + q / 1024, in bf16
                      if (name.ends_with("q_proj.biases")) {
                        SetAt(&t, 9, b16_nan);
                        SetAt(&t, 15, b16_inf);
                      }
                    } else if (name == l0 + "self_attn.q_proj.weight") {
                      SetBytes(&t, 4 * 64, 4 * 64 + 32, 0xff);  // all 15
                      SetBytes(&t, 4 * 64 + 32, 5 * 64, 0x00);  // all 0
                      SetBytes(&t, 5 * 64, 5 * 64 + 32, 0x88);  // all 8
                    } else if (name == l1 + "self_attn.q_proj.scales") {
                      const uint8_t e[] = {255, 254, 127, 0};
                      for (size_t k = 0; k < 4; ++k) SetAt(&t, k, e[k]);
                    } else if (name == l1 + "self_attn.q_proj.weight") {
                      SetBytes(&t, 16, 32, 0x77);  // group 1, scale 2^127: inf
                    }
                  }),
       {l0 + "self_attn.q_proj.weight", l0 + "self_attn.k_proj.weight",
        l1 + "self_attn.q_proj.weight"}});
  // HQQ 4-bit g64 axis 1, F16: q_proj [32, 128], scale and zero [64, 1],
  // W_q U8 [32, 64] (packed row r: group r's codes in the high nibbles,
  // group r + 32's in the low).
  cases.push_back(
      {EditedCopy(testing::WriterOutput("hqq.py") + "/hqq_4bit_g64",
                  [&](const std::string& name, testing::StTensor& t) {
                    if (name == l0 + "self_attn.q_proj.scale") {
                      const uint16_t v[] = {0x7e00, 0x7c00, 0xfc00,
                                            0x0000, 0x8000, 0x3c00,
                                            0x3c00, 0xbc00, 0x0001};
                      for (size_t k = 0; k < 9; ++k) SetAt(&t, k, v[k]);
                      SetAt(&t, 63, uint16_t{0x7e00});
                    } else if (name == l0 + "self_attn.q_proj.zero") {
                      SetAt(&t, 5, uint16_t{0x0000});   // integer levels
                      SetAt(&t, 6, uint16_t{0x7b53});   // 60000
                      SetAt(&t, 10, uint16_t{0x7e00});  // NaN
                      SetAt(&t, 11, uint16_t{0xfc00});  // -Inf
                    } else if (name == l0 + "self_attn.q_proj.W_q") {
                      SetBytes(&t, 12 * 64, 13 * 64, 0x00);
                      SetBytes(&t, 13 * 64, 14 * 64, 0xff);
                      SetBytes(&t, 14 * 64, 15 * 64, 0x5a);
                    }
                  }),
       {l0 + "self_attn.q_proj.weight"}});
  for (const Edited& c : cases) {
    auto ckpt = Checkpoint::Open(c.dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    for (const std::string& name : c.tensors) {
      const LogicalTensor* t = (*ckpt)->FindTensor(name);
      ASSERT_NE(t, nullptr) << name;
      ASSERT_EQ(StatsPathForTesting(*t, StatsOptions()), StatsPath::kCodeRuns)
          << name;
      // The edits took: NaN and infinite values.
      auto whole = ComputeStats(*t, nullptr, StatsOptions());
      ASSERT_TRUE(whole.ok()) << whole.status();
      EXPECT_GT(whole->nan_count, 0) << name;
      EXPECT_GT(whole->inf_count, 0) << name;
      const int64_t groups = GroupCount(*t);
      std::vector<StatsOptions> sets = OptionSets(*t, groups);
      for (int64_t g = 0; g < std::min<int64_t>(groups, 16); ++g) {
        StatsOptions o;
        o.group = g;
        sets.push_back(o);
      }
      for (auto [lo, hi, bins] :
           {std::tuple{-8.0, 8.0, 16}, std::tuple{-1.0, 1.0, 8},
            std::tuple{0.5, 1.5, 4}, std::tuple{-6.0, 6.0, 24}}) {
        StatsOptions o;
        o.range_min = lo;
        o.range_max = hi;
        o.bins = bins;
        sets.push_back(o);
      }
      for (const StatsOptions& o : sets) {
        for (const LogicalTensor* r :
             {static_cast<const LogicalTensor*>(nullptr), t}) {
          SCOPED_TRACE(absl::StrCat(name, " chunk ", o.chunk_elements, " bins ",
                                    o.bins, " group ", o.group.value_or(-1),
                                    r != nullptr ? " with ref" : ""));
          ExpectSameAsReference(*t, r, o);
        }
      }
    }
  }
}

// Refusals come out the same: a group past the last, a negative one, a
// group on a tensor without groups.
TEST(StatsReferenceTest, RefusalsMatchTheElementwisePass) {
  auto ckpt = Checkpoint::Open(WriteRandomGguf(2));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  for (const char* name : {"f32", "q4_k"}) {
    const LogicalTensor* t = (*ckpt)->FindTensor(name);
    for (int64_t g : {int64_t{-1}, int64_t{1} << 40}) {
      StatsOptions o;
      o.group = g;
      SCOPED_TRACE(absl::StrCat(name, " group ", g));
      ExpectSameAsReference(*t, nullptr, o);
    }
  }
}

}  // namespace
}  // namespace tensormorph::stats_reference_test
