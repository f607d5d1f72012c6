// The CLI's hand-written scalar printer held to the reflective one
// (proto/json_print, itself held to protobuf's mapping): the same bytes for
// every message, and every field of the messages it writes known to it.
#include "client/cli/scalar_json.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/json_print.h"

namespace tensormorph {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;

// Doubles as replies carry them (floats widened, integers, the specials)
// and as no reply does (any bit pattern).
double RandomDouble(std::mt19937_64& rng) {
  switch (rng() % 8) {
    case 0:
      return std::bit_cast<double>(rng());  // NaN payloads too
    case 1:
      return static_cast<double>(std::bit_cast<float>(uint32_t(rng())));
    case 2:
      return static_cast<double>(static_cast<int>(rng() % 33) - 16);
    case 3: {
      const double special[] = {0.0,    -0.0,  INFINITY, -INFINITY,  NAN,
                                5e-324, 1e308, 0.1,      1e15 + 0.25};
      return special[rng() % std::size(special)];
    }
    default:  // a float's value near a scale's magnitude
      return static_cast<double>(std::ldexp(
          static_cast<float>(rng() % (1u << 24)), -30 + int(rng() % 24)));
  }
}

// Names to escape, and plain ones around the length the printer writes
// in place (a long one flushes its buffer, and what it remembered).
std::string RandomName(std::mt19937_64& rng) {
  const std::vector<std::string> names = {"d",
                                          std::string(32, 'x'),
                                          std::string(33, 'y'),
                                          std::string(1500, 'z'),
                                          "dmin",
                                          "scale",
                                          "",
                                          "q\"uote",
                                          "back\\slash",
                                          "<tag>",
                                          "\x01",
                                          "é",
                                          "\xff"
                                          "bad",
                                          "\u2028",
                                          "g_idx"};
  return names[rng() % names.size()];
}

v1::ScalarInspection RandomScalar(std::mt19937_64& rng) {
  v1::ScalarInspection s;
  for (int i = rng() % 4; i > 0; --i) s.add_index(int64_t(rng()));
  s.set_flat_index(int64_t(rng()));
  s.set_raw_code(int64_t(rng()) >> (rng() % 64));
  s.set_raw_bits(rng() >> (rng() % 64));
  s.set_code_bits(int32_t(rng()));
  s.set_code_is_float(rng() % 2);
  s.set_block(int64_t(rng() % 3) - 1);
  s.set_sub_block(int32_t(rng() % 17) - 1);
  s.set_scale(RandomDouble(rng));
  s.set_zero_point(rng() % 2 ? s.scale() : RandomDouble(rng));
  s.set_offset(RandomDouble(rng));
  s.set_level(RandomDouble(rng));
  s.set_step(rng() % 2 ? s.scale() : RandomDouble(rng));
  s.set_step_below(rng() % 2 ? s.step() : RandomDouble(rng));
  s.set_step_above(rng() % 2 ? -s.step() : RandomDouble(rng));
  s.set_range_min(rng() % 2 ? s.offset() : RandomDouble(rng));
  s.set_range_max(RandomDouble(rng));
  s.set_value(static_cast<float>(RandomDouble(rng)));
  for (int i = rng() % 5; i > 0; --i) {
    v1::Param* p = s.add_params();
    p->set_name(RandomName(rng));
    p->set_value(rng() % 2 ? s.scale() : RandomDouble(rng));
  }
  s.set_group(int64_t(rng() % 1000) - 1);
  if (rng() % 3 == 0) {
    v1::GridCodeword* c = s.mutable_codeword();  // set even when all 0
    if (rng() % 2) {
      c->set_grid_index(int32_t(rng()));
      c->set_grid_size(int32_t(rng() % 2049));
      c->set_position(int32_t(rng() % 8));
      for (int i = rng() % 9; i > 0; --i) c->add_entry(int32_t(rng()));
      c->set_sign_bits(uint32_t(rng()));
      c->set_negated(rng() % 2);
      c->set_delta(RandomDouble(rng));
      c->set_sub_block_scale(RandomDouble(rng));
    }
  }
  if (rng() % 3 == 0) {
    v1::SourceScalar* src = s.mutable_source();
    if (rng() % 2) {
      for (int i = rng() % 4; i > 0; --i) src->add_index(int64_t(rng()));
      src->set_flat_index(int64_t(rng()));
      src->set_value(RandomDouble(rng));
      src->set_error(RandomDouble(rng));
      src->set_error_steps(RandomDouble(rng));
      src->set_verdict(static_cast<v1::ElementVerdict>(rng() % 6));
      src->set_bound_steps(RandomDouble(rng));
      src->set_excess_steps(RandomDouble(rng));
      src->set_chosen_codes(rng() % 2 == 0);
    }
  }
  return s;
}

TEST(ScalarJsonTest, PrintsWhatTheReflectivePrinterPrints) {
  std::mt19937_64 rng(35);
  for (int i = 0; i < 20000; ++i) {
    const v1::ScalarInspection s = RandomScalar(rng);
    std::string fast = "prefix,";  // appended, not assigned
    AppendScalarJson(s, &fast);
    std::string reflective = "prefix,";
    AppendMessageJson(s, &reflective);
    ASSERT_EQ(fast, reflective) << s.ShortDebugString();
  }
}

TEST(ScalarJsonTest, AnEmptyScalarPrintsEveryFieldAtItsDefault) {
  std::string out;
  AppendScalarJson(v1::ScalarInspection(), &out);
  EXPECT_EQ(out, PrintMessageJson(v1::ScalarInspection()));
  EXPECT_THAT(out, ::testing::HasSubstr(R"("params":[],"group":"0"})"));
}

// What scalar_json.cc writes, by message: (number, JSON name, type). A
// field added to one of these messages must be written there too.
TEST(ScalarJsonTest, KnowsEveryFieldOfTheMessagesItWrites) {
  using F = FieldDescriptor;
  using Fields = std::vector<std::tuple<int, std::string, F::Type, bool>>;
  const std::vector<std::pair<const Descriptor*, Fields>> known = {
      {v1::ScalarInspection::descriptor(),
       {{1, "index", F::TYPE_INT64, true},
        {2, "flatIndex", F::TYPE_INT64, false},
        {3, "rawCode", F::TYPE_INT64, false},
        {4, "rawBits", F::TYPE_UINT64, false},
        {5, "codeBits", F::TYPE_INT32, false},
        {6, "codeIsFloat", F::TYPE_BOOL, false},
        {7, "block", F::TYPE_INT64, false},
        {8, "subBlock", F::TYPE_INT32, false},
        {9, "scale", F::TYPE_DOUBLE, false},
        {10, "zeroPoint", F::TYPE_DOUBLE, false},
        {11, "offset", F::TYPE_DOUBLE, false},
        {12, "level", F::TYPE_DOUBLE, false},
        {13, "step", F::TYPE_DOUBLE, false},
        {14, "stepBelow", F::TYPE_DOUBLE, false},
        {15, "stepAbove", F::TYPE_DOUBLE, false},
        {16, "rangeMin", F::TYPE_DOUBLE, false},
        {17, "rangeMax", F::TYPE_DOUBLE, false},
        {18, "value", F::TYPE_FLOAT, false},
        {19, "params", F::TYPE_MESSAGE, true},
        {20, "group", F::TYPE_INT64, false},
        {21, "codeword", F::TYPE_MESSAGE, false},
        {22, "source", F::TYPE_MESSAGE, false}}},
      {v1::GridCodeword::descriptor(),
       {{1, "gridIndex", F::TYPE_INT32, false},
        {2, "gridSize", F::TYPE_INT32, false},
        {3, "position", F::TYPE_INT32, false},
        {4, "entry", F::TYPE_INT32, true},
        {5, "signBits", F::TYPE_UINT32, false},
        {6, "negated", F::TYPE_BOOL, false},
        {7, "delta", F::TYPE_DOUBLE, false},
        {8, "subBlockScale", F::TYPE_DOUBLE, false}}},
      {v1::Param::descriptor(),
       {{1, "name", F::TYPE_STRING, false},
        {2, "value", F::TYPE_DOUBLE, false}}},
      {v1::SourceScalar::descriptor(),
       {{1, "index", F::TYPE_INT64, true},
        {2, "flatIndex", F::TYPE_INT64, false},
        {3, "value", F::TYPE_DOUBLE, false},
        {4, "error", F::TYPE_DOUBLE, false},
        {5, "errorSteps", F::TYPE_DOUBLE, false},
        {6, "verdict", F::TYPE_ENUM, false},
        {7, "boundSteps", F::TYPE_DOUBLE, false},
        {8, "excessSteps", F::TYPE_DOUBLE, false},
        {9, "chosenCodes", F::TYPE_BOOL, false}}},
  };
  for (const auto& [type, fields] : known) {
    SCOPED_TRACE(type->full_name());
    Fields actual;
    for (int i = 0; i < type->field_count(); ++i) {
      const FieldDescriptor* f = type->field(i);
      EXPECT_EQ(f->containing_oneof(), nullptr) << f->name();
      actual.emplace_back(f->number(), f->json_name(), f->type(),
                          f->is_repeated());
    }
    EXPECT_EQ(actual, fields);
  }
}

}  // namespace
}  // namespace tensormorph
