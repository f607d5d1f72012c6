// Companion tensors through the checked views: small integer companions
// (weight_shape, g_idx) read correctly at every integer width, or are
// refused naming the tensor; never read past their bytes.
#include "core/quant/conventions/context.h"

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/format/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/fixture_copy.h"
#include "tests/support/same_bits.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph::context_test {
namespace {

using ::tensormorph::conventions::Context;
using ::tensormorph::conventions::ReadIntVector;
using ::tensormorph::conventions::ShapeRule;
using ::tensormorph::testing::CopyFixtureInto;
using ::tensormorph::testing::EditSafetensors;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::IntBytes;
using ::tensormorph::testing::IntValues;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::StTensor;
using ::testing::AllOf;
using ::testing::ElementsAre;

// A stored tensor over `bytes` (which must outlive it).
StoredTensor Stored(const std::string& name, DType dtype,
                    std::vector<int64_t> shape, const std::string& bytes) {
  StoredTensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.num_elements = 1;
  for (int64_t d : t.shape) t.num_elements *= d;
  t.nbytes = bytes.size();
  t.data = {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
  return t;
}

TEST(ReadIntVectorTest, ReadsEveryIntegerWidthWithItsSign) {
  struct Case {
    DType dtype;
    const char* name;
    std::vector<int64_t> values;
  } cases[] = {
      {DType::kI8, "I8", {-128, -1, 0, 127}},
      {DType::kU8, "U8", {0, 1, 200, 255}},
      {DType::kI16, "I16", {-32768, -1, 7, 32767}},
      {DType::kU16, "U16", {0, 65535, 300, 1}},
      {DType::kI32, "I32", {std::numeric_limits<int32_t>::min(), -1, 5, 9}},
      {DType::kU32, "U32", {0, 4294967295, 1, 2}},
      {DType::kI64,
       "I64",
       {std::numeric_limits<int64_t>::min(), -1, 0,
        std::numeric_limits<int64_t>::max()}},
      {DType::kU64, "U64", {0, 1, 2, std::numeric_limits<int64_t>::max()}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string bytes = IntBytes(c.values, c.name);
    const StoredTensor t = Stored("t", c.dtype, {4}, bytes);
    auto v = ReadIntVector("test", &t);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(*v, c.values);
  }
}

TEST(ReadIntVectorTest, RefusesU64BeyondInt64) {
  const std::string bytes = IntBytes({1, -1}, "U64");  // 2^64 - 1
  const StoredTensor t = Stored("l.g_idx", DType::kU64, {2}, bytes);
  auto v = ReadIntVector("test", &t);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v, AllOf(HasReason(ErrorReason::kConventionMismatch),
                       HasMetadata("convention", "test"),
                       MessageNames("'l.g_idx'[1] = 18446744073709551615")));
}

TEST(ReadIntVectorTest, RefusesFloatsAndBytesThatDoNotHoldTheElements) {
  const std::string four(4, '\0');
  const StoredTensor f = Stored("w_shape", DType::kF32, {1}, four);
  auto v = ReadIntVector("test", &f);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v, AllOf(HasReason(ErrorReason::kConventionMismatch),
                       HasMetadata("convention", "test"),
                       MessageNames("'w_shape' is F32[1]")));
  // Two I16 elements claimed over 3 bytes: refused, not read past the end.
  const std::string three(3, '\0');
  StoredTensor s = Stored("w_shape", DType::kI16, {2}, three);
  v = ReadIntVector("test", &s);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v, AllOf(HasReason(ErrorReason::kConventionMismatch),
                       MessageNames("'w_shape'"), MessageNames("3 bytes")));
}

TEST(ContextTest, ExpectChecksPresenceDTypeAndShape) {
  const std::string bytes = IntBytes({4, 8}, "I32");
  std::vector<StoredTensor> stored = {
      Stored("l.weight_shape", DType::kI32, {2}, bytes)};
  Context ctx(stored);
  EXPECT_TRUE(ctx.Expect("ct", "l.weight", "l.weight_shape", {DType::kI32},
                         ShapeRule::Exact({2}, "[out, in]"))
                  .ok());
  auto missing =
      ctx.Expect("ct", "l.weight", "l.weight_packed", {}, ShapeRule::Any());
  EXPECT_THAT(missing,
              AllOf(HasReason(ErrorReason::kConventionMismatch),
                    HasMetadata("convention", "ct"), MessageNames("'l.weight'"),
                    MessageNames("'l.weight_packed'")));
  auto dtype = ctx.Expect("ct", "l.weight", "l.weight_shape", {DType::kI64},
                          ShapeRule::Any());
  EXPECT_THAT(dtype, AllOf(HasReason(ErrorReason::kConventionMismatch),
                           MessageNames("'l.weight_shape' is I32"),
                           MessageNames("I64")));
  auto shape = ctx.Expect("ct", "l.weight", "l.weight_shape", {},
                          ShapeRule::Exact({3}, "a 3-D weight"));
  EXPECT_THAT(shape, AllOf(HasReason(ErrorReason::kConventionMismatch),
                           MessageNames("'l.weight_shape' is I32[2]"),
                           MessageNames("a 3-D weight needs [3]")));
  auto rank =
      ctx.Expect("ct", "l.weight", "l.weight_shape", {}, ShapeRule::Rank(2));
  EXPECT_THAT(rank, AllOf(HasReason(ErrorReason::kConventionMismatch),
                          MessageNames("'l.weight'"), MessageNames("2-D")));
  auto absent = ctx.ExpectIfPresent("ct", "l.weight", "l.weight_g_idx", {},
                                    ShapeRule::Any());
  ASSERT_TRUE(absent.ok());
  EXPECT_EQ(*absent, nullptr);
}

// Decoded values of every logical tensor of `dir`, in name order.
std::vector<std::vector<float>> DecodeAll(const std::string& dir) {
  auto ckpt = Checkpoint::Open(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  std::vector<std::vector<float>> out;
  if (!ckpt.ok()) return out;
  for (const LogicalTensor& t : (*ckpt)->tensors()) {
    std::vector<float> v(t.num_elements);
    EXPECT_TRUE(t.encoding->Decode(0, t.num_elements, v.data()).ok());
    out.push_back(std::move(v));
  }
  return out;
}

// Tensor by tensor, by the support helper's rule.
::testing::AssertionResult SameBits(const std::vector<std::vector<float>>& a,
                                    const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure()
           << a.size() << " tensors vs " << b.size();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    ::testing::AssertionResult r = ::tensormorph::testing::SameBits(a[i], b[i]);
    if (!r)
      return ::testing::AssertionFailure()
             << "tensor " << i << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

// A copy of `fixture` whose integer tensors ending in `suffix` are rewritten
// as `dtype`.
std::string WithIntsAs(const std::string& fixture, const std::string& suffix,
                       const std::string& dtype) {
  const std::string dir = MakeTempDir();
  CopyFixtureInto(fixture, dir);
  int rewritten = 0;
  EditSafetensors(dir + "/model.safetensors", [&](std::vector<StTensor>& ts) {
    for (StTensor& t : ts) {
      if (!t.name.ends_with(suffix)) continue;
      t.data = IntBytes(IntValues(t), dtype);
      t.dtype = dtype;
      ++rewritten;
    }
  });
  EXPECT_GT(rewritten, 0) << fixture << " has no '" << suffix << "'";
  return dir;
}

TEST(CompanionWidthTest, WeightShapeAtAnyIntegerWidthReadsTheSame) {
  const auto want = DecodeAll(Fixture("safetensors/ct_w4a16_group"));
  ASSERT_FALSE(want.empty());
  for (const char* dtype : {"U8", "I16", "U16", "I32", "U32", "I64", "U64"}) {
    SCOPED_TRACE(dtype);
    EXPECT_TRUE(SameBits(
        DecodeAll(WithIntsAs("ct_w4a16_group", "weight_shape", dtype)), want));
  }
  // In I8 the width 128 wraps to -128: read as such, and refused.
  auto i8 =
      Checkpoint::Open(WithIntsAs("ct_w4a16_group", "weight_shape", "I8"));
  ASSERT_FALSE(i8.ok());
  EXPECT_THAT(
      i8, AllOf(HasReason(ErrorReason::kConventionMismatch),
                MessageNames("'model.layers.0.self_attn.q_proj.weight_shape'"),
                MessageNames("[64,-128]")));
}

TEST(CompanionWidthTest, GIdxAtAnyIntegerWidthReadsTheSame) {
  const auto want = DecodeAll(Fixture("safetensors/gptq_4bit_g32_actorder"));
  ASSERT_FALSE(want.empty());
  for (const char* dtype : {"U8", "I8", "I16", "U16", "I64", "U64"}) {
    SCOPED_TRACE(dtype);
    EXPECT_TRUE(SameBits(
        DecodeAll(WithIntsAs("gptq_4bit_g32_actorder", "g_idx", dtype)), want));
  }
}

TEST(CompanionWidthTest, NarrowWeightShapeDisagreeingWithItsWordsIsRefused) {
  // A U8 weight_shape read as what it says (ReadInts read 8 bytes of each of
  // its 1-byte elements): [64, 200] needs 25 words per row, not 16.
  const std::string dir = MakeTempDir();
  CopyFixtureInto("ct_w4a16_group", dir);
  EditSafetensors(dir + "/model.safetensors", [&](std::vector<StTensor>& ts) {
    for (StTensor& t : ts) {
      if (t.name != "model.layers.0.self_attn.q_proj.weight_shape") continue;
      t.data = IntBytes({64, 200}, "U8");
      t.dtype = "U8";
    }
  });
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_THAT(
      ckpt,
      AllOf(
          HasReason(ErrorReason::kConventionMismatch),
          MessageNames(
              "'model.layers.0.self_attn.q_proj.weight_packed' is I32[64,16]"),
          MessageNames("[64,200]"), MessageNames("[64,25]")));
}

TEST(CompanionWidthTest, WeightShapeOfFloatsOrWrongLengthIsRefused) {
  const std::string dir = MakeTempDir();
  CopyFixtureInto("ct_w4a16_group", dir);
  std::string name;
  EditSafetensors(dir + "/model.safetensors", [&](std::vector<StTensor>& ts) {
    for (StTensor& t : ts) {
      if (!t.name.ends_with("weight_shape") || !name.empty()) continue;
      t.data = IntBytes({1, 2, 3}, "I16");
      t.dtype = "I16";
      t.shape = {3};
      name = t.name;
    }
  });
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_THAT(ckpt, AllOf(HasReason(ErrorReason::kConventionMismatch),
                          MessageNames("'" + name + "' is I16[3]"),
                          MessageNames("[out, in] needs [2]")));

  const std::string dir2 = MakeTempDir();
  CopyFixtureInto("ct_w4a16_group", dir2);
  EditSafetensors(dir2 + "/model.safetensors", [&](std::vector<StTensor>& ts) {
    for (StTensor& t : ts) {
      if (t.name != name) continue;
      t.dtype = "F32";
      t.data = std::string(8, '\0');
      t.shape = {2};
    }
  });
  ckpt = Checkpoint::Open(dir2);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_THAT(ckpt, AllOf(HasReason(ErrorReason::kConventionMismatch),
                          MessageNames("'" + name + "' is F32"),
                          MessageNames("I8 or U8")));
}

TEST(CompanionWidthTest, GIdxOutOfRangeAtAWideWidthIsRefused) {
  const std::string dir = MakeTempDir();
  CopyFixtureInto("gptq_4bit_g32_actorder", dir);
  std::string name;
  EditSafetensors(dir + "/model.safetensors", [&](std::vector<StTensor>& ts) {
    for (StTensor& t : ts) {
      if (!t.name.ends_with("g_idx") || !name.empty()) continue;
      std::vector<int64_t> v = IntValues(t);
      v[3] = int64_t{1} << 40;  // wider than any I32 could say
      t.data = IntBytes(v, "I64");
      t.dtype = "I64";
      name = t.name;
    }
  });
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_THAT(ckpt, AllOf(HasReason(ErrorReason::kConventionMismatch),
                          MessageNames("'" + name + "'[3] = 1099511627776")));
}

}  // namespace
}  // namespace tensormorph::context_test
