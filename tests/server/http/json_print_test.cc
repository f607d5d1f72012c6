// PrintMessageJson prints what protobuf's MessageToJsonString prints with
// always_print_primitive_fields, byte for byte (map entries aside, which
// protobuf prints in hash order and we sort): for random messages of every
// type in tensormorph.proto and of a type holding every proto3 field kind,
// and rule by rule by hand.
#include "proto/json_print.h"

#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/timestamp.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

std::string ProtobufJson(const Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string out;
  EXPECT_TRUE(
      google::protobuf::util::MessageToJsonString(message, &out, options).ok());
  return out;
}

std::string Deterministic(const Message& message) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  message.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | cp >> 6);
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xe0 | cp >> 12);
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xf0 | cp >> 18);
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

// Fills messages with values chosen to hit every printing rule: extremes
// of each width, NaN, infinities, -0.0, subnormals, numbers on both sides
// of %.15g's round trip, escapes, invisible code points, unknown enums.
class RandomFiller {
 public:
  explicit RandomFiller(uint32_t seed) : rng_(seed) {}

  // At most `max_map_entries` per map: protobuf's order for more is its
  // hash order.
  void Fill(Message* message, int depth, int max_map_entries) {
    const Descriptor* type = message->GetDescriptor();
    const Reflection* r = message->GetReflection();
    for (int i = 0; i < type->field_count(); ++i) {
      const FieldDescriptor* field = type->field(i);
      if (field->is_map()) {
        const int n = Pick(max_map_entries + 1);
        for (int k = 0; k < n; ++k) {
          Message* entry = r->AddMessage(message, field);
          const FieldDescriptor* key = entry->GetDescriptor()->map_key();
          SetScalar(entry, key);
          if (IsRepeatedKey(*message, field, key)) {
            r->RemoveLast(message, field);
            continue;
          }
          SetValue(entry, entry->GetDescriptor()->map_value(), depth,
                   max_map_entries);
        }
      } else if (field->is_repeated()) {
        const int n = Pick(5);
        for (int k = 0; k < n; ++k)
          AddValue(message, field, depth, max_map_entries);
      } else if (field->containing_oneof() != nullptr || Pick(4) != 0) {
        // Oneof members (and proto3 `optional`) set now and then, to their
        // default value too; other fields mostly.
        if (field->containing_oneof() == nullptr || Pick(2) == 0) {
          SetValue(message, field, depth, max_map_entries);
        }
      }
    }
  }

 private:
  // Whether the last entry of map `field` has the key of an earlier one.
  static bool IsRepeatedKey(const Message& message,
                            const FieldDescriptor* field,
                            const FieldDescriptor* key) {
    const Reflection* r = message.GetReflection();
    const int last = r->FieldSize(message, field) - 1;
    std::string last_key, other_key;
    google::protobuf::TextFormat::PrintFieldValueToString(
        r->GetRepeatedMessage(message, field, last), key, -1, &last_key);
    for (int i = 0; i < last; ++i) {
      google::protobuf::TextFormat::PrintFieldValueToString(
          r->GetRepeatedMessage(message, field, i), key, -1, &other_key);
      if (other_key == last_key) return true;
    }
    return false;
  }

  int Pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  uint64_t Bits() { return rng_(); }

  template <class T>
  T Integer() {
    using L = std::numeric_limits<T>;
    switch (Pick(6)) {
      case 0:
        return 0;
      case 1:
        return L::min();
      case 2:
        return L::max();
      case 3:
        return static_cast<T>(Pick(200) - 100);
      default:
        return static_cast<T>(Bits());
    }
  }

  double Double() {
    static const double kSpecial[] = {
        std::numeric_limits<double>::quiet_NaN(),
        INFINITY,
        -INFINITY,
        -0.0,
        0.0,
        std::numeric_limits<double>::denorm_min(),
        -std::numeric_limits<double>::denorm_min(),
        DBL_MIN,
        DBL_MAX,
        -DBL_MAX,
        0.1,
        0.30000000000000004,
        1e-5,
        1e-4,
        1e15,
        1e16,
        1e21,
        123456789012345.0,
        1234567890123456.0,
        9007199254740993.0,
    };
    switch (Pick(5)) {
      case 0:
        return kSpecial[Pick(std::size(kSpecial))];
      case 1: {  // a short decimal, as statistics often are
        return (Pick(2000001) - 1000000) * std::pow(10.0, Pick(41) - 20);
      }
      case 2:  // a subnormal
        return std::bit_cast<double>(Bits() & 0x800fffffffffffffull);
      case 3:
        return std::uniform_real_distribution<double>(-1, 1)(rng_);
      default: {
        const double d = std::bit_cast<double>(Bits());
        return std::isnan(d) ? 0.5 : d;  // NaN payloads do not round-trip
      }
    }
  }

  float Float() {
    switch (Pick(4)) {
      case 0:
        return static_cast<float>(Double());
      case 1:  // a subnormal
        return std::bit_cast<float>(static_cast<uint32_t>(Bits()) &
                                    0x807fffffu);
      case 2:
        return static_cast<float>(Pick(2001) - 1000) / 1000.0f;
      default: {
        const float f = std::bit_cast<float>(static_cast<uint32_t>(Bits()));
        return std::isnan(f) ? 0.25f : f;
      }
    }
  }

  std::string String() {
    static const uint32_t kCodePoints[] = {
        '"',    '\\',   '/',     '<',     '>',     '&',     '=',
        '\'',   '\b',   '\f',    '\n',    '\r',    '\t',    0,
        1,      0x1f,   0x7f,    0x80,    0x9f,    0xa0,    0xad,
        0xe9,   0x600,  0x6dd,   0x70f,   0x17b4,  0x200b,  0x200f,
        0x2028, 0x2029, 0x202e,  0x2060,  0x206f,  0x4e2d,  0xfeff,
        0xfffb, 0xfffd, 0x1d173, 0x1f600, 0xe0001, 0xe007f, 0x10ffff};
    std::string s;
    const int n = Pick(12);
    for (int i = 0; i < n; ++i) {
      if (Pick(2) == 0) {
        s += static_cast<char>(' ' + Pick(95));
      } else {
        s += Utf8(kCodePoints[Pick(std::size(kCodePoints))]);
      }
    }
    return s;
  }

  std::string Bytes() {
    std::string s(Pick(10), '\0');
    for (char& c : s) c = static_cast<char>(Bits());
    return s;
  }

  int Enum(const FieldDescriptor* field) {
    const auto* type = field->enum_type();
    if (Pick(4) == 0) return Pick(2) == 0 ? 77 : -3;  // without a name
    return type->value(Pick(type->value_count()))->number();
  }

  void SetScalar(Message* m, const FieldDescriptor* f) {
    const Reflection* r = m->GetReflection();
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        return r->SetInt32(m, f, Integer<int32_t>());
      case FieldDescriptor::CPPTYPE_INT64:
        return r->SetInt64(m, f, Integer<int64_t>());
      case FieldDescriptor::CPPTYPE_UINT32:
        return r->SetUInt32(m, f, Integer<uint32_t>());
      case FieldDescriptor::CPPTYPE_UINT64:
        return r->SetUInt64(m, f, Integer<uint64_t>());
      case FieldDescriptor::CPPTYPE_DOUBLE:
        return r->SetDouble(m, f, Double());
      case FieldDescriptor::CPPTYPE_FLOAT:
        return r->SetFloat(m, f, Float());
      case FieldDescriptor::CPPTYPE_BOOL:
        return r->SetBool(m, f, Pick(2) == 0);
      case FieldDescriptor::CPPTYPE_ENUM:
        return r->SetEnumValue(m, f, Enum(f));
      case FieldDescriptor::CPPTYPE_STRING:
        return r->SetString(
            m, f,
            f->type() == FieldDescriptor::TYPE_BYTES ? Bytes() : String());
      case FieldDescriptor::CPPTYPE_MESSAGE:
        return;
    }
  }

  void SetValue(Message* m, const FieldDescriptor* f, int depth,
                int max_map_entries) {
    if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      return SetScalar(m, f);
    }
    if (depth > 0) {
      Fill(m->GetReflection()->MutableMessage(m, f), depth - 1,
           max_map_entries);
    }
  }

  void AddValue(Message* m, const FieldDescriptor* f, int depth,
                int max_map_entries) {
    const Reflection* r = m->GetReflection();
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (depth > 0) Fill(r->AddMessage(m, f), depth - 1, max_map_entries);
      return;
    }
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        return r->AddInt32(m, f, Integer<int32_t>());
      case FieldDescriptor::CPPTYPE_INT64:
        return r->AddInt64(m, f, Integer<int64_t>());
      case FieldDescriptor::CPPTYPE_UINT32:
        return r->AddUInt32(m, f, Integer<uint32_t>());
      case FieldDescriptor::CPPTYPE_UINT64:
        return r->AddUInt64(m, f, Integer<uint64_t>());
      case FieldDescriptor::CPPTYPE_DOUBLE:
        return r->AddDouble(m, f, Double());
      case FieldDescriptor::CPPTYPE_FLOAT:
        return r->AddFloat(m, f, Float());
      case FieldDescriptor::CPPTYPE_BOOL:
        return r->AddBool(m, f, Pick(2) == 0);
      case FieldDescriptor::CPPTYPE_ENUM:
        return r->AddEnumValue(m, f, Enum(f));
      case FieldDescriptor::CPPTYPE_STRING:
        return r->AddString(
            m, f,
            f->type() == FieldDescriptor::TYPE_BYTES ? Bytes() : String());
      case FieldDescriptor::CPPTYPE_MESSAGE:
        return;
    }
  }

  std::mt19937_64 rng_;
};

// Every proto3 field kind, declared out of number order, with a oneof and
// proto3 `optional` fields declared in the reverse of their numbers' order
// (protobuf prints message members of oneofs in place, scalar ones last).
constexpr char kAllKindsProto[] = R"desc(
  name: "all_kinds.proto"
  package: "jsonprinttest"
  syntax: "proto3"
  message_type {
    name: "AllKinds"
    field { name: "f_double" number: 30 label: LABEL_OPTIONAL type: TYPE_DOUBLE json_name: "fDouble" }
    field { name: "f_float" number: 2 label: LABEL_OPTIONAL type: TYPE_FLOAT json_name: "fFloat" }
    field { name: "f_int32" number: 3 label: LABEL_OPTIONAL type: TYPE_INT32 json_name: "fInt32" }
    field { name: "f_int64" number: 4 label: LABEL_OPTIONAL type: TYPE_INT64 json_name: "fInt64" }
    field { name: "f_uint32" number: 5 label: LABEL_OPTIONAL type: TYPE_UINT32 json_name: "fUint32" }
    field { name: "f_uint64" number: 6 label: LABEL_OPTIONAL type: TYPE_UINT64 json_name: "fUint64" }
    field { name: "f_sint32" number: 7 label: LABEL_OPTIONAL type: TYPE_SINT32 json_name: "fSint32" }
    field { name: "f_sint64" number: 8 label: LABEL_OPTIONAL type: TYPE_SINT64 json_name: "fSint64" }
    field { name: "f_fixed32" number: 9 label: LABEL_OPTIONAL type: TYPE_FIXED32 json_name: "fFixed32" }
    field { name: "f_fixed64" number: 10 label: LABEL_OPTIONAL type: TYPE_FIXED64 json_name: "fFixed64" }
    field { name: "f_sfixed32" number: 11 label: LABEL_OPTIONAL type: TYPE_SFIXED32 json_name: "fSfixed32" }
    field { name: "f_sfixed64" number: 12 label: LABEL_OPTIONAL type: TYPE_SFIXED64 json_name: "fSfixed64" }
    field { name: "f_bool" number: 13 label: LABEL_OPTIONAL type: TYPE_BOOL json_name: "fBool" }
    field { name: "f_string" number: 14 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "fString" }
    field { name: "f_bytes" number: 15 label: LABEL_OPTIONAL type: TYPE_BYTES json_name: "fBytes" }
    field { name: "f_enum" number: 16 label: LABEL_OPTIONAL type: TYPE_ENUM type_name: ".jsonprinttest.Kind" json_name: "fEnum" }
    field { name: "f_message" number: 17 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".jsonprinttest.AllKinds" json_name: "fMessage" }
    field { name: "o_first" number: 42 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".jsonprinttest.AllKinds" oneof_index: 0 json_name: "oFirst" }
    field { name: "o_second" number: 41 label: LABEL_OPTIONAL type: TYPE_STRING oneof_index: 0 json_name: "oSecond" }
    field { name: "p_int32" number: 40 label: LABEL_OPTIONAL type: TYPE_INT32 oneof_index: 1 proto3_optional: true json_name: "pInt32" }
    field { name: "p_float" number: 39 label: LABEL_OPTIONAL type: TYPE_FLOAT oneof_index: 2 proto3_optional: true json_name: "pFloat" }
    field { name: "r_double" number: 18 label: LABEL_REPEATED type: TYPE_DOUBLE json_name: "rDouble" }
    field { name: "r_float" number: 19 label: LABEL_REPEATED type: TYPE_FLOAT json_name: "rFloat" }
    field { name: "r_int32" number: 20 label: LABEL_REPEATED type: TYPE_SINT32 json_name: "rInt32" }
    field { name: "r_uint32" number: 21 label: LABEL_REPEATED type: TYPE_FIXED32 json_name: "rUint32" }
    field { name: "r_int64" number: 22 label: LABEL_REPEATED type: TYPE_SFIXED64 json_name: "rInt64" }
    field { name: "r_uint64" number: 23 label: LABEL_REPEATED type: TYPE_UINT64 json_name: "rUint64" }
    field { name: "r_bool" number: 24 label: LABEL_REPEATED type: TYPE_BOOL json_name: "rBool" }
    field { name: "r_string" number: 25 label: LABEL_REPEATED type: TYPE_STRING json_name: "rString" }
    field { name: "r_bytes" number: 26 label: LABEL_REPEATED type: TYPE_BYTES json_name: "rBytes" }
    field { name: "r_enum" number: 27 label: LABEL_REPEATED type: TYPE_ENUM type_name: ".jsonprinttest.Kind" json_name: "rEnum" }
    field { name: "r_message" number: 28 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".jsonprinttest.AllKinds" json_name: "rMessage" }
    field { name: "m_int32" number: 31 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".jsonprinttest.AllKinds.MInt32Entry" json_name: "mInt32" }
    field { name: "m_bool" number: 32 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".jsonprinttest.AllKinds.MBoolEntry" json_name: "mBool" }
    field { name: "m_uint64" number: 33 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".jsonprinttest.AllKinds.MUint64Entry" json_name: "mUint64" }
    field { name: "m_string" number: 34 label: LABEL_REPEATED type: TYPE_MESSAGE type_name: ".jsonprinttest.AllKinds.MStringEntry" json_name: "mString" }
    nested_type {
      name: "MInt32Entry"
      field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_SINT32 json_name: "key" }
      field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_DOUBLE json_name: "value" }
      options { map_entry: true }
    }
    nested_type {
      name: "MBoolEntry"
      field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_BOOL json_name: "key" }
      field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_ENUM type_name: ".jsonprinttest.Kind" json_name: "value" }
      options { map_entry: true }
    }
    nested_type {
      name: "MUint64Entry"
      field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_FIXED64 json_name: "key" }
      field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_BYTES json_name: "value" }
      options { map_entry: true }
    }
    nested_type {
      name: "MStringEntry"
      field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING json_name: "key" }
      field { name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_MESSAGE type_name: ".jsonprinttest.AllKinds" json_name: "value" }
      options { map_entry: true }
    }
    oneof_decl { name: "choice" }
    oneof_decl { name: "_p_int32" }
    oneof_decl { name: "_p_float" }
  }
  enum_type {
    name: "Kind"
    value { name: "KIND_UNSPECIFIED" number: 0 }
    value { name: "KIND_ONE" number: 1 }
    value { name: "KIND_NEGATIVE" number: -2 }
  }
)desc";

class AllKinds {
 public:
  AllKinds() {
    google::protobuf::FileDescriptorProto file;
    EXPECT_TRUE(
        google::protobuf::TextFormat::ParseFromString(kAllKindsProto, &file));
    const google::protobuf::FileDescriptor* built = pool_.BuildFile(file);
    EXPECT_NE(built, nullptr);
    type_ = built->FindMessageTypeByName("AllKinds");
  }
  std::unique_ptr<Message> New() {
    return std::unique_ptr<Message>(factory_.GetPrototype(type_)->New());
  }

 private:
  google::protobuf::DescriptorPool pool_;
  google::protobuf::DynamicMessageFactory factory_;
  const Descriptor* type_ = nullptr;
};

std::vector<const Descriptor*> TensormorphTypes() {
  const auto* file = v1::GetHeatmapResponse::descriptor()->file();
  std::vector<const Descriptor*> types;
  for (int i = 0; i < file->message_type_count(); ++i) {
    types.push_back(file->message_type(i));
  }
  return types;
}

std::unique_ptr<Message> NewOf(const Descriptor* type) {
  return std::unique_ptr<Message>(
      google::protobuf::MessageFactory::generated_factory()
          ->GetPrototype(type)
          ->New());
}

// `message` with every -0.0 made +0.0: protobuf prints -0.0 as "-0", which
// its parser reads as the integer 0.
void ClearZeroSigns(Message* message) {
  const Reflection* r = message->GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(*message, &fields);
  for (const FieldDescriptor* f : fields) {
    const int n = f->is_repeated() ? r->FieldSize(*message, f) : 1;
    for (int i = 0; i < n; ++i) {
      const bool rep = f->is_repeated();
      switch (f->cpp_type()) {
        case FieldDescriptor::CPPTYPE_DOUBLE: {
          const double d = rep ? r->GetRepeatedDouble(*message, f, i)
                               : r->GetDouble(*message, f);
          if (d == 0 && std::signbit(d)) {
            rep ? r->SetRepeatedDouble(message, f, i, 0.0)
                : r->SetDouble(message, f, 0.0);
          }
          break;
        }
        case FieldDescriptor::CPPTYPE_FLOAT: {
          const float x = rep ? r->GetRepeatedFloat(*message, f, i)
                              : r->GetFloat(*message, f);
          if (x == 0 && std::signbit(x)) {
            rep ? r->SetRepeatedFloat(message, f, i, 0.0f)
                : r->SetFloat(message, f, 0.0f);
          }
          break;
        }
        case FieldDescriptor::CPPTYPE_MESSAGE:
          ClearZeroSigns(rep ? r->MutableRepeatedMessage(message, f, i)
                             : r->MutableMessage(message, f));
          break;
        default:
          break;
      }
    }
  }
}

// Our output is protobuf's, and protobuf reads it back to the message
// (doubles bit for bit: subnormals, extremes; -0.0 aside, see above).
void ExpectAsProtobuf(const Message& message, const std::string& what) {
  const std::string ours = PrintMessageJson(message);
  const std::string theirs = ProtobufJson(message);
  if (ours != theirs) {
    const size_t at =
        std::mismatch(ours.begin(), ours.end(), theirs.begin(), theirs.end())
            .first -
        ours.begin();
    FAIL() << what << ": differs at byte " << at << ": ours ..."
           << ours.substr(at < 80 ? 0 : at - 80, 160) << "\nprotobuf's ..."
           << theirs.substr(at < 80 ? 0 : at - 80, 160);
  }
  std::unique_ptr<Message> back(message.New());
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(ours, back.get()).ok())
      << what << ": " << ours;
  std::unique_ptr<Message> expected(message.New());
  expected->CopyFrom(message);
  ClearZeroSigns(expected.get());
  EXPECT_EQ(Deterministic(*back), Deterministic(*expected)) << what;
}

TEST(JsonPrintTest, RandomMessagesOfEveryTypePrintAsProtobufPrintsThem) {
  const std::vector<const Descriptor*> types = TensormorphTypes();
  ASSERT_GT(types.size(), 30u);
  RandomFiller filler(20261201);
  for (const Descriptor* type : types) {
    for (int round = 0; round < 300; ++round) {
      std::unique_ptr<Message> m = NewOf(type);
      if (round > 0) filler.Fill(m.get(), /*depth=*/3, /*max_map_entries=*/1);
      ExpectAsProtobuf(*m, type->name() + " round " + std::to_string(round));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(JsonPrintTest, RandomMessagesWithEveryFieldKindPrintAsProtobufPrintsThem) {
  AllKinds all;
  RandomFiller filler(7);
  for (int round = 0; round < 1000; ++round) {
    std::unique_ptr<Message> m = all.New();
    if (round > 0) filler.Fill(m.get(), /*depth=*/2, /*max_map_entries=*/1);
    ExpectAsProtobuf(*m, "AllKinds round " + std::to_string(round));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Protobuf prints map entries in hash order; we sort them. Both read back
// to the same message.
TEST(JsonPrintTest, MapsPrintTheSameEntriesSortedByKey) {
  AllKinds all;
  RandomFiller filler(11);
  for (int round = 0; round < 500; ++round) {
    std::unique_ptr<Message> m = all.New();
    filler.Fill(m.get(), /*depth=*/1, /*max_map_entries=*/6);
    std::unique_ptr<Message> ours(m->New()), theirs(m->New());
    const auto status = google::protobuf::util::JsonStringToMessage(
        PrintMessageJson(*m), ours.get());
    ASSERT_TRUE(status.ok()) << status << PrintMessageJson(*m);
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(ProtobufJson(*m),
                                                            theirs.get())
                    .ok());
    ClearZeroSigns(m.get());
    ASSERT_EQ(Deterministic(*ours), Deterministic(*m)) << round;
    ASSERT_EQ(Deterministic(*ours), Deterministic(*theirs)) << round;
  }
  v1::ArchNode node;
  (*node.mutable_scheme_params())["b"] = 2;
  (*node.mutable_scheme_params())["<"] = 3;
  (*node.mutable_scheme_params())["a"] = 1;
  EXPECT_THAT(
      PrintMessageJson(node),
      ::testing::HasSubstr(R"("schemeParams":{"\u003c":"3","a":"1","b":"2"})"));
}

TEST(JsonPrintTest, FieldsAtDefaultsPrintUnderTheirJsonNames) {
  EXPECT_EQ(PrintMessageJson(v1::GetCheckpointResponse()),
            R"({"checkpoint":"","format":"CHECKPOINT_FORMAT_UNSPECIFIED",)"
            R"("files":[],"tensorCount":"0","storedTensorCount":"0",)"
            R"("totalBytes":"0","metadata":[],"conventions":[],"notes":[],)"
            R"("absentFiles":[],"quantConfig":[],"configFiles":[]})");
  EXPECT_EQ(PrintMessageJson(v1::Param()), R"({"name":"","value":0})");
}

TEST(JsonPrintTest, MessageFieldsPrintOnlyWhenSetInTheirPlace) {
  v1::GetServerInfoResponse info;
  EXPECT_EQ(PrintMessageJson(info), R"({"version":"","roots":[]})");
  info.mutable_counters()->set_calls(5);
  info.set_version("v");
  EXPECT_EQ(
      PrintMessageJson(info),
      R"({"version":"v","roots":[],"counters":{"calls":"5",)"
      R"("streamsStarted":"0","streamsCancelled":"0","activeStreams":"0",)"
      R"("chunksSent":"0","bytesSent":"0","openCheckpoints":"0",)"
      R"("checkpointOpens":"0"}})");
}

TEST(JsonPrintTest, OptionalAndOneofFieldsPrintWhenSetLastByNumber) {
  v1::ComputeStatsRequest stats;
  EXPECT_EQ(PrintMessageJson(stats),
            R"({"checkpoint":"","tensor":"","bins":0,"reference":"",)"
            R"("referenceTensor":""})");
  stats.set_group(0);  // set, to its default
  stats.set_range_min(2);
  EXPECT_EQ(PrintMessageJson(stats),
            R"({"checkpoint":"","tensor":"","bins":0,"reference":"",)"
            R"("referenceTensor":"","rangeMin":2,"group":"0"})");
  v1::QuantDiffEvent event;
  EXPECT_EQ(PrintMessageJson(event), "{}");
  event.mutable_summary()->set_wall_seconds(1.5);
  EXPECT_THAT(PrintMessageJson(event),
              ::testing::StartsWith(R"({"summary":{"pairing":)"));
}

TEST(JsonPrintTest, IntegersOf64BitsAreQuotedOf32BitsAreNot) {
  v1::ScalarInspection s;
  s.set_raw_code(std::numeric_limits<int64_t>::min());
  s.set_raw_bits(std::numeric_limits<uint64_t>::max());
  s.set_code_bits(std::numeric_limits<int32_t>::min());
  s.set_sub_block(std::numeric_limits<int32_t>::max());
  const std::string json = PrintMessageJson(s);
  EXPECT_THAT(json,
              ::testing::HasSubstr(R"("rawCode":"-9223372036854775808")"));
  EXPECT_THAT(json,
              ::testing::HasSubstr(R"("rawBits":"18446744073709551615")"));
  EXPECT_THAT(json, ::testing::HasSubstr(R"("codeBits":-2147483648)"));
  EXPECT_THAT(json, ::testing::HasSubstr(R"("subBlock":2147483647)"));
}

TEST(JsonPrintTest, DoublesAsPrintfG15WhenItReadsBackElseG17) {
  const std::vector<std::pair<double, std::string>> cases = {
      {0.0, "0"},
      {-0.0, "-0"},
      {0.1, "0.1"},
      {-1.5, "-1.5"},
      {1e-4, "0.0001"},
      {1e-5, "1e-05"},
      {123456789012345.0, "123456789012345"},
      {1e15, "1e+15"},
      {1e21, "1e+21"},
      {0.30000000000000004, "0.30000000000000004"},
      {123456789012345678.0, "1.2345678901234568e+17"},
      {5e-324, "4.94065645841247e-324"},  // %.15g reads back, subnormal too
      {DBL_MAX, "1.7976931348623157e+308"},
      {std::numeric_limits<double>::quiet_NaN(), R"("NaN")"},
      {INFINITY, R"("Infinity")"},
      {-INFINITY, R"("-Infinity")"},
  };
  for (const auto& [value, text] : cases) {
    v1::Param p;
    p.set_value(value);
    EXPECT_EQ(PrintMessageJson(p), R"({"name":"","value":)" + text + "}")
        << text;
    EXPECT_EQ(PrintMessageJson(p), ProtobufJson(p)) << text;
  }
}

// The printer starts from the shortest digits and falls back on printf's
// rules only for some values: at every exponent, both sides of the switch
// between %g's notations, ties at the 17th digit, random bit patterns.
TEST(JsonPrintTest, DoublesAcrossTheRangePrintAsProtobuf) {
  v1::ComputeStatsResponse r;
  const auto add = [&r](double d) {
    r.add_levels(d);
    r.add_levels(std::nextafter(d, INFINITY));
    r.add_levels(std::nextafter(d, -INFINITY));
  };
  for (int e = -324; e <= 308; ++e) {
    add(std::pow(10.0, e));
    add(-3.0 * std::pow(10.0, e));
    add(1.2345678901234567 * std::pow(10.0, e));
  }
  std::mt19937_64 rng(3);
  for (int i = 0; i < 20000; ++i) {
    // An integer of 51 bits (16 digits) and quarters: x.25 and x.75 have 18
    // digits ending in 5, a tie for the 17th.
    const double whole =
        static_cast<double>((rng() >> 14) | (uint64_t{1} << 50));
    r.add_levels(whole + 0.25 * static_cast<double>(rng() % 4));
    const double d = std::bit_cast<double>(rng());
    r.add_levels(std::isnan(d) ? 1.0 : d);
  }
  EXPECT_EQ(PrintMessageJson(r), ProtobufJson(r));
}

// protobuf's SimpleDtoa and SimpleFtoa as protobuf 3.21 writes them: printf
// and strtod, the specification the printer's integer arithmetic follows.
std::string PrintfDouble(double d) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.15g", d);
  if (std::strtod(buf, nullptr) != d)
    std::snprintf(buf, sizeof buf, "%.17g", d);
  return buf;
}
std::string PrintfFloat(float f) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", f);
  errno = 0;
  const float back = std::strtof(buf, nullptr);
  if (errno != 0 || back != f) std::snprintf(buf, sizeof buf, "%.9g", f);
  return buf;
}

// Where the digits are computed in 128-bit integers (whole numbers below
// 10^15, other normal numbers from about 2e-6 to 2^52): floats widened as
// replies carry them, any bits, powers of two (whose neighbour below is
// half as far) and their neighbours, powers of ten, and ties at the 15th
// and 17th digit.
TEST(JsonPrintTest, DoublesInTheIntegerPathPrintAsPrintfPrintsThem) {
  std::mt19937_64 rng(17);
  std::vector<double> values;
  for (int e = -60; e <= 60; ++e) {
    for (double d : {std::ldexp(1.0, e), std::pow(10.0, e / 4)}) {
      values.push_back(d);
      values.push_back(std::nextafter(d, INFINITY));
      values.push_back(std::nextafter(d, 0.0));
    }
  }
  for (int i = 0; i < 300000; ++i) {
    const int exponent = static_cast<int>(rng() % 90) - 30;  // 2^-30..2^59
    const uint64_t fraction = rng() & ((uint64_t{1} << 52) - 1);
    values.push_back(
        std::bit_cast<double>((uint64_t(exponent + 1023) << 52) | fraction));
    values.push_back(
        static_cast<double>(std::ldexp(static_cast<float>(rng() % (1u << 24)),
                                       static_cast<int>(rng() % 60) - 50)));
    // 16 digits and a quarter: a tie for the 17th; 14 and a half: the 15th.
    values.push_back(static_cast<double>((rng() >> 14) | (uint64_t{1} << 49)) +
                     0.25 * static_cast<double>(rng() % 4));
    values.push_back(static_cast<double>(rng() % 100000000000000) + 0.5);
    // Whole numbers on both sides of 10^15, where %g turns to exponents.
    values.push_back(static_cast<double>(rng() % 2000000000000000));
    values.push_back(static_cast<double>(rng() % 100000));
  }
  for (double d : values) {
    for (double v : {d, -d}) {
      char out[kMaxJsonNumberChars];
      char* end = WriteJsonDouble(v, out);
      ASSERT_EQ(std::string(out, end), PrintfDouble(v)) << std::hexfloat << v;
    }
  }
}

TEST(JsonPrintTest, FloatsInTheIntegerPathPrintAsPrintfPrintsThem) {
  for (uint64_t bits = 0x00800000; bits < 0x7f800000; bits += 1021) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    char out[kMaxJsonNumberChars];
    char* end = WriteJsonFloat(f, out);
    ASSERT_EQ(std::string(out, end), PrintfFloat(f)) << std::hexfloat << f;
  }
  // Whole numbers on both sides of 10^6, where %g turns to exponents.
  for (int i = 1; i < 1'100'000; i += 7) {
    for (float f : {static_cast<float>(i), -static_cast<float>(i)}) {
      char out[kMaxJsonNumberChars];
      char* end = WriteJsonFloat(f, out);
      ASSERT_EQ(std::string(out, end), PrintfFloat(f)) << f;
    }
  }
}

TEST(JsonPrintTest, FloatsAtEveryExponentPrintAsProtobuf) {
  v1::InspectScalarsResponse r;
  for (int e = -45; e <= 38; ++e) {
    for (float m : {1.0f, 3.0f, 1.2345678f, 9.999999f}) {
      const float f = m * std::pow(10.0f, static_cast<float>(e));
      for (float g :
           {f, std::nextafter(f, INFINITY), std::nextafter(f, -INFINITY)}) {
        r.add_scalars()->set_value(g);
      }
    }
  }
  EXPECT_EQ(PrintMessageJson(r), ProtobufJson(r));
}

TEST(JsonPrintTest, FloatsAsPrintfG6WhenItReadsBackElseG9) {
  const std::vector<std::pair<float, std::string>> cases = {
      {0.1f, "0.1"},
      {0.3f, "0.3"},
      {16777216.0f, "16777216"},  // %.6g is 1.67772e+07: too short
      {1e-45f, "1.40129846e-45"},
      {1e-40f, "9.9999461e-41"},  // subnormal: always %.9g
      {FLT_MIN, "1.17549435e-38"},
      {FLT_MAX, "3.40282347e+38"},
      {std::numeric_limits<float>::quiet_NaN(), R"("NaN")"},
      {-INFINITY, R"("-Infinity")"},
  };
  for (const auto& [value, text] : cases) {
    v1::WorstElement w;
    w.set_decoded(value);
    EXPECT_THAT(PrintMessageJson(w),
                ::testing::HasSubstr(R"("decoded":)" + text + ","))
        << text;
    EXPECT_EQ(PrintMessageJson(w), ProtobufJson(w)) << text;
  }
}

TEST(JsonPrintTest, FloatsAcrossTheRangeAndSubnormalsPrintAsProtobuf) {
  v1::InspectScalarsResponse r;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 65521) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    r.add_scalars()->set_value(std::isnan(f) ? 0.0f : f);
  }
  for (uint32_t bits = 1; bits < 0x00800000u; bits += 997) {
    r.add_scalars()->set_value(std::bit_cast<float>(bits));
  }
  EXPECT_EQ(PrintMessageJson(r), ProtobufJson(r));
}

TEST(JsonPrintTest, BoolsEnumsAndBytes) {
  v1::Encoding e;
  e.set_quantized(true);
  EXPECT_THAT(PrintMessageJson(e),
              ::testing::HasSubstr(R"("quantized":true,"granularity")"));
  EXPECT_THAT(PrintMessageJson(e),
              ::testing::HasSubstr(R"("symmetric":false)"));

  v1::BackendSupport b;
  b.set_status(v1::SUPPORT_STATUS_NOT_KNOWN);
  EXPECT_THAT(PrintMessageJson(b),
              ::testing::HasSubstr(R"("status":"SUPPORT_STATUS_NOT_KNOWN")"));
  b.set_status(static_cast<v1::SupportStatus>(77));  // a number without a name
  EXPECT_THAT(PrintMessageJson(b), ::testing::HasSubstr(R"("status":77,)"));

  for (const auto& [bytes, text] :
       std::vector<std::pair<std::string, std::string>>{
           {"", ""},
           {"f", "Zg=="},
           {"fo", "Zm8="},
           {"foo", "Zm9v"},
           {std::string("\xff\xfe\x00\x3e", 4), "//4APg=="}}) {
    v1::SliceChunk c;
    c.set_data(bytes);
    EXPECT_THAT(PrintMessageJson(c),
                ::testing::EndsWith(R"("data":")" + text + R"("})"));
    EXPECT_EQ(PrintMessageJson(c), ProtobufJson(c));
  }
}

TEST(JsonPrintTest, StringsEscapeAsProtobufEscapesThem) {
  v1::Param p;
  p.set_name(std::string("q\" b\\ s/ <a>&=' \b\f\n\r\t \x01\x1f\x7f") +
             Utf8(0x80) + Utf8(0xe9) + Utf8(0xad) + Utf8(0x2028) +
             Utf8(0xfeff) + Utf8(0x4e2d) + Utf8(0x1f600) + Utf8(0xe0001));
  EXPECT_EQ(PrintMessageJson(p),
            R"({"name":"q\" b\\ s/ \u003ca\u003e&=' \b\f\n\r\t )"
            R"(\u0001\u001f\u007f\u0080é\u00ad\u2028\ufeff中😀\udb40\udc01",)"
            R"("value":0})");
  EXPECT_EQ(PrintMessageJson(p), ProtobufJson(p));
}

TEST(JsonPrintTest, EveryCodePointEscapesAsProtobufEscapesIt) {
  for (uint32_t base = 0; base <= 0x10ffff; base += 0x4000) {
    v1::GetServerInfoResponse m;
    for (uint32_t cp = base; cp < base + 0x4000 && cp <= 0x10ffff; ++cp) {
      if (cp >= 0xd800 && cp <= 0xdfff) continue;
      m.add_roots(Utf8(cp));
    }
    ASSERT_EQ(PrintMessageJson(m), ProtobufJson(m)) << std::hex << base;
  }
}

// Not UTF-8 (proto3 refuses such strings on the wire, but a message built
// in memory may hold them): dropped as protobuf drops them.
TEST(JsonPrintTest, BytesThatAreNotUtf8AreDroppedAsProtobufDropsThem) {
  // protobuf's printer serializes first, and logs each string not UTF-8.
  google::protobuf::LogSilencer quiet;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a\x80z", "az"},  // a stray continuation byte
      {"a\xc3"
       "Az",
       "az"},                        // a bad continuation eats that byte
      {"a\xed\xa0\x80z", "az"},      // a surrogate
      {"a\xf4\x90\x80\x80z", "az"},  // past U+10FFFF
      {"a\xf8"
       "z",
       "az"},
      {"a\xe2\x82", "a"},                           // cut short by the end
      {std::string("a\xc0\x80z", 4), "a\\u0000z"},  // overlong: decoded
      {"a\xc0\xa2z", "a\\\"z"},
      {"a\xc1\x81z", "a\xc1\x81z"},  // an overlong 'A', copied as it came
  };
  for (const auto& [bytes, text] : cases) {
    v1::Param p;
    p.set_name(bytes);
    EXPECT_EQ(PrintMessageJson(p), R"({"name":")" + text + R"(","value":0})");
    EXPECT_EQ(PrintMessageJson(p), ProtobufJson(p));
  }
}

TEST(JsonPrintTest, MessagesOutsideTheContractArePrintedByProtobuf) {
  google::protobuf::Timestamp t;
  t.set_seconds(1700000000);
  t.set_nanos(5);
  EXPECT_EQ(PrintMessageJson(t), ProtobufJson(t));
  google::protobuf::Struct s;
  (*s.mutable_fields())["k"].set_number_value(1.5);
  EXPECT_EQ(PrintMessageJson(s), ProtobufJson(s));
  google::protobuf::FileDescriptorProto proto2;  // descriptor.proto is proto2
  proto2.set_name("x.proto");
  EXPECT_EQ(PrintMessageJson(proto2), ProtobufJson(proto2));
}

}  // namespace
}  // namespace tensormorph
