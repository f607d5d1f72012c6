// MLX checkpoints written by tests/python/writers/mlx_writer.py (numpy only,
// from the format's definition): a mixed model whose per-module entries
// cover every mode, bits and group size. Every element of every quantized
// weight must equal, bit for bit, the writer's own float64 reference cast as
// mx.dequantize rounds; Inspect, partial decodes and raw codes must agree
// with the full decode.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/diff/tensor_diff.h"
#include "core/format/checkpoint.h"
#include "core/quant/decode_simd.h"
#include "core/quant/mlx_encoding.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/npy_reader.h"
#include "tests/support/python_writer.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::ReadNpy;
using ::tensormorph::testing::WriterOutput;

const std::string& Fixture() { return WriterOutput("mlx_writer.py"); }

struct Expected {
  std::string name, scheme;
};
std::vector<Expected> Index() {
  std::ifstream in(Fixture() + "/expected/index.txt");
  std::vector<Expected> out;
  for (std::string line; std::getline(in, line);) {
    const size_t sp = line.find(' ');
    if (sp != std::string::npos) {
      out.push_back({line.substr(0, sp), line.substr(sp + 1)});
    }
  }
  return out;
}

std::shared_ptr<const Checkpoint> OpenModel() {
  auto c = Checkpoint::Open(Fixture() + "/model");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : nullptr;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(MlxConventionTest, EveryWeightDecodesBitForBitToTheReference) {
  auto ckpt = OpenModel();
  ASSERT_NE(ckpt, nullptr);
  const std::vector<Expected> index = Index();
  ASSERT_EQ(index.size(), 11u);
  for (const Expected& e : index) {
    SCOPED_TRACE(e.name);
    const LogicalTensor* t = ckpt->FindTensor(e.name);
    ASSERT_NE(t, nullptr);
    const auto want = ReadNpy(Fixture() + "/expected/" + e.name + ".npy");
    ASSERT_EQ(want.descr, "<f4");
    EXPECT_EQ(t->shape, want.shape);
    EXPECT_EQ(t->encoding->info().convention, "mlx");
    EXPECT_TRUE(absl::StartsWith(t->encoding->info().scheme, e.scheme))
        << t->encoding->info().scheme;
    const std::vector<float> ref = want.floats();
    ASSERT_EQ(static_cast<int64_t>(ref.size()), t->num_elements);
    std::vector<float> got(ref.size());
    ASSERT_TRUE(t->encoding->Decode(0, t->num_elements, got.data()).ok());
    int64_t wrong = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (Bits(got[i]) != Bits(ref[i]) && wrong++ < 3) {
        ADD_FAILURE() << "element " << i << ": " << got[i] << " != " << ref[i];
      }
    }
    EXPECT_EQ(wrong, 0);
    // The scalar references alone give the same bits.
    CapDecodeSimdForTesting(DecodeSimd::kScalar);
    std::vector<float> scalar(ref.size());
    const absl::Status s =
        t->encoding->Decode(0, t->num_elements, scalar.data());
    CapDecodeSimdForTesting(DecodeSimd::kAvx512);
    ASSERT_TRUE(s.ok());
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_EQ(Bits(scalar[i]), Bits(ref[i])) << "scalar, element " << i;
    }
  }
}

TEST(MlxConventionTest, InspectPartialDecodesAndRawCodesAgreeWithDecode) {
  auto ckpt = OpenModel();
  ASSERT_NE(ckpt, nullptr);
  for (const Expected& e : Index()) {
    SCOPED_TRACE(e.name);
    const LogicalTensor* t = ckpt->FindTensor(e.name);
    ASSERT_NE(t, nullptr);
    const int64_t n = t->num_elements, cols = t->shape.back();
    std::vector<float> all(n);
    ASSERT_TRUE(t->encoding->Decode(0, n, all.data()).ok());
    std::vector<uint8_t> codes(n);
    ASSERT_TRUE(t->encoding->RawCodes(0, n, codes.data()).ok());
    for (int64_t i = 0; i < n; ++i) {
      ScalarInfo s;
      ASSERT_TRUE(t->encoding->Inspect(i, &s).ok());
      ASSERT_EQ(Bits(s.value), Bits(all[i])) << "inspect " << i;
      ASSERT_EQ(s.code_bits_value, codes[i]) << "code " << i;
      ASSERT_EQ(s.group, (i / cols) * (cols / t->encoding->info().group_size) +
                             (i % cols) / t->encoding->info().group_size);
    }
    for (int64_t first :
         {int64_t{1}, int64_t{3}, int64_t{7}, cols - 1, cols + 5}) {
      for (int64_t count : {int64_t{1}, int64_t{5}, int64_t{33}, n - first}) {
        if (first + count > n) continue;
        std::vector<float> part(count);
        ASSERT_TRUE(t->encoding->Decode(first, count, part.data()).ok());
        for (int64_t i = 0; i < count; ++i) {
          ASSERT_EQ(Bits(part[i]), Bits(all[first + i]))
              << "decode from " << first << ", element " << i;
        }
      }
    }
  }
}

TEST(MlxConventionTest, MixedModelKeepsItsUnquantizedModuleAndNamesMlx) {
  auto ckpt = OpenModel();
  ASSERT_NE(ckpt, nullptr);
  EXPECT_THAT(ckpt->conventions(), ::testing::ElementsAre("mlx"));
  const LogicalTensor* head = ckpt->FindTensor("lm_head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_NE(head->encoding->info().convention, "mlx");
  // Companions are parts of their weight, not tensors of their own.
  EXPECT_EQ(ckpt->FindTensor("model.layers.0.mlp.up_proj.scales"), nullptr);
  EXPECT_EQ(ckpt->FindTensor("model.layers.0.mlp.up_proj.biases"), nullptr);
  EXPECT_EQ(ckpt->tensors().size(), 12u);
}

// A weight whose last row ends where readable memory ends (the end of a
// mapped file): decoding any segment reads no byte past it. The codes sit
// just before a page that faults on access.
TEST(MlxConventionTest, DecodeReadsNoBytePastTheLastRow) {
  const long page = sysconf(_SC_PAGESIZE);
  void* mem = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  ASSERT_EQ(mprotect(static_cast<uint8_t*>(mem) + page, page, PROT_NONE), 0);
  const int64_t rows = 3, cols = 64;
  std::vector<uint16_t> ones(rows * 2, 0x3F80);  // bf16 1.0, groups of 32
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    SCOPED_TRACE(bits);
    const int64_t bytes = rows * cols * bits / 8;
    uint8_t* codes = static_cast<uint8_t*>(mem) + page - bytes;
    for (int64_t i = 0; i < bytes; ++i) codes[i] = static_cast<uint8_t>(i * 37);
    StoredTensor w{.name = "w.weight",
                   .dtype = DType::kU32,
                   .shape = {rows, cols * bits / 32},
                   .num_elements = bytes / 4,
                   .data = {codes, static_cast<size_t>(bytes)}};
    const auto* sb = reinterpret_cast<const uint8_t*>(ones.data());
    StoredTensor s{.name = "w.scales",
                   .dtype = DType::kBF16,
                   .shape = {rows, 2},
                   .num_elements = rows * 2,
                   .data = {sb, ones.size() * 2}};
    StoredTensor b = s;
    b.name = "w.biases";
    MlxParams p;
    p.bits = bits;
    p.group_size = 32;
    p.shape = {rows, cols};
    p.rows = rows;
    p.cols = cols;
    p.weight = &w;
    p.scales = &s;
    p.biases = &b;
    p.parts = {&w, &s, &b};
    auto enc = MakeMlxEncoding(p);
    ASSERT_TRUE(enc.ok()) << enc.status();
    for (int64_t first = 0; first < rows * cols; ++first) {
      std::vector<float> out(rows * cols - first);
      ASSERT_TRUE((*enc)->Decode(first, out.size(), out.data()).ok());
      ScalarInfo last;
      ASSERT_TRUE((*enc)->Inspect(rows * cols - 1, &last).ok());
      ASSERT_EQ(Bits(out.back()), Bits(last.value));
    }
  }
  munmap(mem, 2 * page);
}

// DecodeRuns (what the diff reads) agrees with Inspect element by element:
// values, groups, steps and ranges.
TEST(MlxConventionTest, DecodeRunsAgreeWithInspect) {
  auto ckpt = OpenModel();
  ASSERT_NE(ckpt, nullptr);
  for (const Expected& e : Index()) {
    SCOPED_TRACE(e.name);
    const LogicalTensor* t = ckpt->FindTensor(e.name);
    ASSERT_NE(t, nullptr);
    std::vector<ElementQuant> q(t->num_elements);
    ASSERT_TRUE(t->encoding->DecodeDetailed(0, t->num_elements, q.data()).ok());
    for (int64_t i = 0; i < t->num_elements; ++i) {
      ScalarInfo s;
      ASSERT_TRUE(t->encoding->Inspect(i, &s).ok());
      ASSERT_EQ(Bits(q[i].value), Bits(s.value)) << i;
      ASSERT_EQ(q[i].group, s.group) << i;
      if (std::isnan(s.value)) continue;
      ASSERT_DOUBLE_EQ(q[i].step_below, s.step_below) << i;
      ASSERT_DOUBLE_EQ(q[i].step_above, s.step_above) << i;
      ASSERT_DOUBLE_EQ(q[i].range_min, s.range_min) << i;
      ASSERT_DOUBLE_EQ(q[i].range_max, s.range_max) << i;
    }
  }
}

// The first and last levels are the range's ends as decoded (q*s and +b
// each rounded to the scales' dtype): an element on them is at an end level,
// never outside its own range.
TEST(MlxConventionTest, ElementsOnTheEndLevelsAreTheRangesEnds) {
  auto ckpt = OpenModel();
  ASSERT_NE(ckpt, nullptr);
  for (const Expected& e : Index()) {
    SCOPED_TRACE(e.name);
    const LogicalTensor* t = ckpt->FindTensor(e.name);
    ASSERT_NE(t, nullptr);
    int64_t on_ends = 0;
    for (int64_t i = 0; i < t->num_elements; ++i) {
      ScalarInfo s;
      ASSERT_TRUE(t->encoding->Inspect(i, &s).ok());
      if (s.code_is_float || std::isnan(s.value)) continue;
      ASSERT_GE(s.value, s.range_min) << i;
      ASSERT_LE(s.value, s.range_max) << i;
      if (s.code != 0 && s.code != (int64_t{1} << s.code_width) - 1) continue;
      ++on_ends;
      EXPECT_TRUE(s.value == s.range_min || s.value == s.range_max)
          << i << " code " << s.code << " value " << s.value << " range ["
          << s.range_min << ", " << s.range_max << "]";
    }
    if (!t->encoding->info().scheme.empty() &&
        t->encoding->info().scheme.find("affine") != std::string::npos) {
      EXPECT_GT(on_ends, 0);
    }
  }
}

// mlx-lm shards large models by size, so a weight's scales may sit in
// another shard than its codes: the sharded copy decodes as the single file.
TEST(MlxConventionTest, ShardedModelDecodesAsTheSingleFile) {
  auto one = OpenModel();
  auto sharded = Checkpoint::Open(Fixture() + "/sharded");
  ASSERT_NE(one, nullptr);
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  EXPECT_EQ((*sharded)->files().size(), 2u);
  ASSERT_EQ((*sharded)->tensors().size(), one->tensors().size());
  for (const LogicalTensor& t : one->tensors()) {
    SCOPED_TRACE(t.name);
    const LogicalTensor* u = (*sharded)->FindTensor(t.name);
    ASSERT_NE(u, nullptr);
    EXPECT_EQ(u->encoding->info().scheme, t.encoding->info().scheme);
    std::vector<float> a(t.num_elements), b(t.num_elements);
    ASSERT_TRUE(t.encoding->Decode(0, t.num_elements, a.data()).ok());
    ASSERT_TRUE(u->encoding->Decode(0, t.num_elements, b.data()).ok());
    for (int64_t i = 0; i < t.num_elements; ++i) {
      ASSERT_EQ(Bits(a[i]), Bits(b[i])) << "element " << i;
    }
  }
}

// The diff against the float32 source: its figures equal a float64
// reference over the writer's expected values, and a correct MLX affine
// quantizer (the writer's) stays within the convention's rounding bound.
TEST(MlxConventionTest, DiffAgainstTheSourceMatchesAFloat64Reference) {
  auto ckpt = OpenModel();
  ASSERT_NE(ckpt, nullptr);
  auto src = Checkpoint::Open(Fixture() + "/source");
  ASSERT_TRUE(src.ok()) << src.status();
  for (const Expected& e : Index()) {
    SCOPED_TRACE(e.name);
    const LogicalTensor* q = ckpt->FindTensor(e.name);
    const LogicalTensor* x = (*src)->FindTensor(e.name);
    ASSERT_TRUE(q != nullptr && x != nullptr);
    const std::vector<float> ref =
        ReadNpy(Fixture() + "/expected/" + e.name + ".npy").floats();
    std::vector<float> source(x->num_elements);
    ASSERT_TRUE(x->encoding->Decode(0, x->num_elements, source.data()).ok());
    double se = 0, max_abs = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double d = static_cast<double>(ref[i]) - source[i];
      se += d * d;
      max_abs = std::max(max_abs, std::fabs(d));
    }
    auto diff = DiffTensor(*q, *x, DiffOptions{});
    ASSERT_TRUE(diff.ok()) << diff.status();
    EXPECT_EQ(diff->count, static_cast<int64_t>(ref.size()));
    // Equal up to the order of summation.
    EXPECT_NEAR(diff->mse, se / ref.size(), 1e-12 * se / ref.size());
    EXPECT_DOUBLE_EQ(diff->max_abs_err, max_abs);
    if (absl::StartsWith(e.scheme, "int")) {
      // The zero-exact scale may clip the short end by design, within the
      // bound.
      EXPECT_EQ(diff->clipped_beyond_bound, 0);
      EXPECT_EQ(diff->not_nearest, 0);
      EXPECT_EQ(diff->max_excess_steps, 0);
    }
  }
}

}  // namespace
}  // namespace tensormorph
