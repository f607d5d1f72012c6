#include "proto/json_print.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

namespace tensormorph {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// protobuf's printer; what the contract defers to.
void AppendByProtobuf(const Message& message, std::string* out) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string json;
  // Fails only for an Any of a type the pool does not know; then, as in
  // MessageToJson before this printer, whatever protobuf printed stands.
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  out->append(json);
}

bool CoveredHere(const Descriptor* type) {
  return type->file()->syntax() == FileDescriptor::SYNTAX_PROTO3 &&
         type->file()->package() != "google.protobuf";
}

template <class T>
void AppendInteger(T value, std::string* out) {
  char buf[24];
  const auto end = std::to_chars(buf, buf + sizeof buf, value).ptr;
  out->append(buf, end);
}

template <class T>
void AppendQuotedInteger(T value, std::string* out) {
  out->push_back('"');
  AppendInteger(value, out);
  out->push_back('"');
}

// printf's %.<precision>g of a number given by its significant digits
// (without trailing zeros, as %g drops them) and decimal exponent.
void AppendG(bool negative, std::string_view digits, int exponent,
             int precision, std::string* out) {
  if (negative) out->push_back('-');
  const int n = static_cast<int>(digits.size());
  if (exponent < -4 || exponent >= precision) {  // d.ddde±XX
    out->push_back(digits[0]);
    if (n > 1) {
      out->push_back('.');
      out->append(digits.substr(1));
    }
    out->push_back('e');
    out->push_back(exponent < 0 ? '-' : '+');
    const int e = exponent < 0 ? -exponent : exponent;
    if (e < 10) out->push_back('0');
    char buf[4];
    out->append(buf, std::to_chars(buf, buf + sizeof buf, e).ptr);
  } else if (exponent < 0) {  // 0.000ddd
    out->append("0.");
    out->append(-exponent - 1, '0');
    out->append(digits);
  } else {  // ddd000 or ddd.ddd
    const int whole = exponent + 1;
    if (n <= whole) {
      out->append(digits);
      out->append(whole - n, '0');
    } else {
      out->append(digits.substr(0, whole));
      out->push_back('.');
      out->append(digits.substr(whole));
    }
  }
}

// protobuf's SimpleDtoa / SimpleFtoa: printf's %.15g if it reads back to
// the double, else %.17g (%.6g and %.9g for a float, and %.9g for every
// subnormal float: protobuf reads back with strtof, which reports ERANGE).
// printf is slow, so this starts from the shortest digits D that read back
// (std::to_chars, exact): with at most 15 of them, %.15g prints D (%.15g's
// rounding lands within half an ulp of the value, where D is the only
// number of 15 digits); with exactly 17, %.17g prints D (the closest number
// of 17 digits reads back, and none shorter does). With 16, %.15g cannot
// read back and %.17g is computed as such. Subnormals take protobuf's way.
template <class T>
void AppendFloating(T value, std::string* out) {
  if (std::isnan(value)) {
    out->append("\"NaN\"");
    return;
  }
  if (std::isinf(value)) {
    out->append(value > 0 ? "\"Infinity\"" : "\"-Infinity\"");
    return;
  }
  constexpr bool kDouble = sizeof(T) == sizeof(double);
  constexpr int kShort = kDouble ? 15 : 6;  // DBL_DIG, FLT_DIG
  constexpr int kLong = kDouble ? 17 : 9;   // digits that always read back
  char buf[48];
  // (Normal numbers only: a subnormal's ulp is too wide for the argument.)
  const bool subnormal = std::fpclassify(value) == FP_SUBNORMAL;
  if (!subnormal) {
    // "-d.ddde-XX", the shortest digits that read back.
    const char* end = std::to_chars(buf, buf + sizeof buf, value,
                                    std::chars_format::scientific)
                          .ptr;
    const bool negative = buf[0] == '-';
    const char* p = buf + negative;
    const char* e = std::find(p, end, 'e');
    char digits[24];
    int n = 0;
    for (const char* q = p; q < e; ++q) {
      if (*q != '.') digits[n++] = *q;
    }
    int exponent = 0;
    std::from_chars(e + 1 + (e[1] == '+'), end, exponent);
    if (n <= kShort || n == kLong) {
      AppendG(negative, std::string_view(digits, n), exponent,
              n <= kShort ? kShort : kLong, out);
      return;
    }
  }
  if (kDouble && subnormal) {  // as protobuf does it
    const char* end = std::to_chars(buf, buf + sizeof buf, value,
                                    std::chars_format::general, kShort)
                          .ptr;
    T parsed;
    if (std::from_chars(buf, end, parsed).ec == std::errc() &&
        parsed == value) {
      out->append(buf, end - buf);
      return;
    }
  }
  out->append(buf, std::to_chars(buf, buf + sizeof buf, value,
                                 std::chars_format::general, kLong)
                       .ptr);
}

void AppendBase64(std::string_view bytes, std::string* out) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  out->push_back('"');
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t n = static_cast<uint8_t>(bytes[i]) << 16 |
                       static_cast<uint8_t>(bytes[i + 1]) << 8 |
                       static_cast<uint8_t>(bytes[i + 2]);
    const char quad[4] = {kAlphabet[n >> 18], kAlphabet[(n >> 12) & 63],
                          kAlphabet[(n >> 6) & 63], kAlphabet[n & 63]};
    out->append(quad, 4);
  }
  if (i < bytes.size()) {
    const bool two = i + 1 < bytes.size();
    const uint32_t n = static_cast<uint8_t>(bytes[i]) << 16 |
                       (two ? static_cast<uint8_t>(bytes[i + 1]) << 8 : 0);
    const char quad[4] = {kAlphabet[n >> 18], kAlphabet[(n >> 12) & 63],
                          two ? kAlphabet[(n >> 6) & 63] : '=', '='};
    out->append(quad, 4);
  }
  out->push_back('"');
}

void AppendHex4(uint32_t unit, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  const char text[6] = {'\\',
                        'u',
                        kHex[(unit >> 12) & 15],
                        kHex[(unit >> 8) & 15],
                        kHex[(unit >> 4) & 15],
                        kHex[unit & 15]};
  out->append(text, 6);
}

// Whether protobuf's JsonEscaping writes `cp` (>= 0x80) as \u escapes: C1
// controls and code points invisible or reordering in a browser.
bool EscapesNonAscii(uint32_t cp) {
  return cp < 0xa0 || cp == 0xad || (cp >= 0x600 && cp <= 0x603) ||
         cp == 0x6dd || cp == 0x70f || cp == 0x17b4 || cp == 0x17b5 ||
         (cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e) ||
         (cp >= 0x2060 && cp <= 0x2064) || (cp >= 0x206a && cp <= 0x206f) ||
         cp == 0xfeff || (cp >= 0xfff9 && cp <= 0xfffb) || cp == 0xe0001 ||
         (cp >= 0x1d173 && cp <= 0x1d17a) || (cp >= 0xe0020 && cp <= 0xe007f);
}

void AppendEscapedAscii(unsigned char c, std::string* out) {
  switch (c) {
    case '"':
      out->append("\\\"");
      return;
    case '\\':
      out->append("\\\\");
      return;
    case '\b':
      out->append("\\b");
      return;
    case '\t':
      out->append("\\t");
      return;
    case '\n':
      out->append("\\n");
      return;
    case '\f':
      out->append("\\f");
      return;
    case '\r':
      out->append("\\r");
      return;
    default:
      AppendHex4(c, out);  // other controls, DEL, < and >
  }
}

bool EscapesAscii(unsigned char c) {
  return c < 0x20 || c == 0x7f || c == '"' || c == '\\' || c == '<' || c == '>';
}

void AppendString(std::string_view s, std::string* out) {
  out->push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    // The common case: a run of ASCII that needs no escape, copied at once.
    size_t run = i;
    while (run < s.size() && static_cast<unsigned char>(s[run]) < 0x80 &&
           !EscapesAscii(static_cast<unsigned char>(s[run]))) {
      ++run;
    }
    out->append(s.data() + i, run - i);
    i = run;
    if (i == s.size()) break;
    const unsigned char lead = static_cast<unsigned char>(s[i]);
    if (lead < 0x80) {
      AppendEscapedAscii(lead, out);
      ++i;
      continue;
    }
    // Decodes as protobuf's ReadCodePoint does: the length comes from the
    // lead byte alone (overlong forms pass), and a sequence found bad is
    // dropped together with the byte that made it bad.
    int more;
    uint32_t cp;
    if (lead >= 0xc0 && lead <= 0xdf) {
      more = 1, cp = lead & 0x1f;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      more = 2, cp = lead & 0x0f;
    } else if (lead >= 0xf0 && lead <= 0xf7) {
      more = 3, cp = lead & 0x07;
    } else {
      ++i;  // a continuation byte or 0xf8..0xff where a lead should be
      continue;
    }
    const size_t start = i++;
    bool ok = true;
    for (; more > 0 && i < s.size(); --more) {
      const unsigned char c = static_cast<unsigned char>(s[i++]);
      cp = cp << 6 | (c & 0x3f);
      if (c < 0x80 || c > 0xbf) {
        ok = false;
        break;
      }
    }
    if (!ok || more > 0) continue;  // bad, or cut short by the end
    if ((cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff) continue;
    // An overlong form of ASCII is escaped as that character would be.
    const bool escape = cp < 0x80 ? EscapesAscii(static_cast<unsigned char>(cp))
                                  : EscapesNonAscii(cp);
    if (!escape) {
      out->append(s.data() + start, i - start);
    } else if (cp < 0x80) {
      AppendEscapedAscii(static_cast<unsigned char>(cp), out);
    } else if (cp <= 0xffff) {
      AppendHex4(cp, out);
    } else {
      AppendHex4(0xd800 + ((cp - 0x10000) >> 10), out);
      AppendHex4(0xdc00 + ((cp - 0x10000) & 0x3ff), out);
    }
  }
  out->push_back('"');
}

class Printer {
 public:
  explicit Printer(std::string* out) : out_(out) {}

  void PrintMessage(const Message& message) {
    // Once per message, passed to each value: GetDescriptor() and
    // GetReflection() are virtual calls that check the descriptors are
    // assigned (a once-flag behind a thread-local), which asked per value
    // were a tenth of printing a scalar's reply.
    const Descriptor* type = message.GetDescriptor();
    if (!Covered(type)) {
      AppendByProtobuf(message, out_);
      return;
    }
    const Reflection* reflection = message.GetReflection();
    out_->push_back('{');
    bool first = true;
    // Fields protobuf's printer lays out in advance, in declaration order:
    // all but scalar members of oneofs; singular message fields only when
    // set.
    std::vector<const FieldDescriptor*> late;
    for (int i = 0; i < type->field_count(); ++i) {
      const FieldDescriptor* field = type->field(i);
      const bool is_message =
          field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
      if (field->containing_oneof() != nullptr && !is_message) {
        if (reflection->HasField(message, field)) late.push_back(field);
        continue;
      }
      if (is_message && !field->is_repeated() &&
          !reflection->HasField(message, field)) {
        continue;
      }
      PrintField(message, *reflection, field, &first);
    }
    // Then the scalar members of oneofs (proto3 `optional` fields among
    // them) that are set, in field-number order: protobuf's printer meets
    // them in the wire format and appends them.
    std::sort(late.begin(), late.end(),
              [](const FieldDescriptor* a, const FieldDescriptor* b) {
                return a->number() < b->number();
              });
    for (const FieldDescriptor* field : late) {
      PrintField(message, *reflection, field, &first);
    }
    out_->push_back('}');
  }

 private:
  // CoveredHere of `type`, remembered for the last type asked (a reply's
  // thousands of scalars are of one type).
  bool Covered(const Descriptor* type) {
    if (type != covered_type_) {
      covered_type_ = type;
      covered_ = CoveredHere(type);
    }
    return covered_;
  }

  void PrintField(const Message& message, const Reflection& r,
                  const FieldDescriptor* field, bool* first) {
    if (!*first) out_->push_back(',');
    *first = false;
    out_->push_back('"');
    out_->append(field->json_name());  // lowerCamelCase: nothing to escape
    out_->append("\":");
    if (field->is_map()) {
      PrintMap(message, field);
    } else if (field->is_repeated()) {
      const int size = r.FieldSize(message, field);
      out_->push_back('[');
      for (int i = 0; i < size; ++i) {
        if (i > 0) out_->push_back(',');
        PrintValue(message, r, field, i);
      }
      out_->push_back(']');
    } else {
      PrintValue(message, r, field, -1);
    }
  }

  // Entries sorted by key, so equal messages print equally.
  void PrintMap(const Message& message, const FieldDescriptor* field) {
    const Reflection* reflection = message.GetReflection();
    const FieldDescriptor* key = field->message_type()->map_key();
    const FieldDescriptor* value = field->message_type()->map_value();
    std::vector<const Message*> entries;
    const int size = reflection->FieldSize(message, field);
    entries.reserve(size);
    for (int i = 0; i < size; ++i) {
      entries.push_back(&reflection->GetRepeatedMessage(message, field, i));
    }
    std::sort(entries.begin(), entries.end(),
              [key](const Message* a, const Message* b) {
                return KeyLess(*a, *b, key);
              });
    out_->push_back('{');
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out_->push_back(',');
      PrintKey(*entries[i], key);
      out_->push_back(':');
      PrintValue(*entries[i], *entries[i]->GetReflection(), value, -1);
    }
    out_->push_back('}');
  }

  static bool KeyLess(const Message& a, const Message& b,
                      const FieldDescriptor* key) {
    const Reflection* r = a.GetReflection();
    switch (key->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        return r->GetInt32(a, key) < r->GetInt32(b, key);
      case FieldDescriptor::CPPTYPE_INT64:
        return r->GetInt64(a, key) < r->GetInt64(b, key);
      case FieldDescriptor::CPPTYPE_UINT32:
        return r->GetUInt32(a, key) < r->GetUInt32(b, key);
      case FieldDescriptor::CPPTYPE_UINT64:
        return r->GetUInt64(a, key) < r->GetUInt64(b, key);
      case FieldDescriptor::CPPTYPE_BOOL:
        return r->GetBool(a, key) < r->GetBool(b, key);
      default:  // string: the only other type a key can have
        return r->GetString(a, key) < r->GetString(b, key);
    }
  }

  // JSON object keys are strings: a number or bool key in quotes.
  void PrintKey(const Message& entry, const FieldDescriptor* key) {
    const Reflection* r = entry.GetReflection();
    switch (key->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        return AppendQuotedInteger(r->GetInt32(entry, key), out_);
      case FieldDescriptor::CPPTYPE_INT64:
        return AppendQuotedInteger(r->GetInt64(entry, key), out_);
      case FieldDescriptor::CPPTYPE_UINT32:
        return AppendQuotedInteger(r->GetUInt32(entry, key), out_);
      case FieldDescriptor::CPPTYPE_UINT64:
        return AppendQuotedInteger(r->GetUInt64(entry, key), out_);
      case FieldDescriptor::CPPTYPE_BOOL:
        out_->append(r->GetBool(entry, key) ? "\"true\"" : "\"false\"");
        return;
      default:
        return AppendString(r->GetString(entry, key), out_);
    }
  }

  // Element `index` of a repeated field, or a singular field's value when
  // index < 0.
  void PrintValue(const Message& message, const Reflection& reflection,
                  const FieldDescriptor* field, int index) {
    const Reflection* r = &reflection;
    const bool rep = index >= 0;
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        return AppendInteger(rep ? r->GetRepeatedInt32(message, field, index)
                                 : r->GetInt32(message, field),
                             out_);
      case FieldDescriptor::CPPTYPE_UINT32:
        return AppendInteger(rep ? r->GetRepeatedUInt32(message, field, index)
                                 : r->GetUInt32(message, field),
                             out_);
      // 64-bit integers in quotes: JavaScript's numbers hold 53 bits.
      case FieldDescriptor::CPPTYPE_INT64:
        return AppendQuotedInteger(
            rep ? r->GetRepeatedInt64(message, field, index)
                : r->GetInt64(message, field),
            out_);
      case FieldDescriptor::CPPTYPE_UINT64:
        return AppendQuotedInteger(
            rep ? r->GetRepeatedUInt64(message, field, index)
                : r->GetUInt64(message, field),
            out_);
      case FieldDescriptor::CPPTYPE_DOUBLE:
        return AppendFloating(rep ? r->GetRepeatedDouble(message, field, index)
                                  : r->GetDouble(message, field),
                              out_);
      case FieldDescriptor::CPPTYPE_FLOAT:
        return AppendFloating(rep ? r->GetRepeatedFloat(message, field, index)
                                  : r->GetFloat(message, field),
                              out_);
      case FieldDescriptor::CPPTYPE_BOOL:
        out_->append((rep ? r->GetRepeatedBool(message, field, index)
                          : r->GetBool(message, field))
                         ? "true"
                         : "false");
        return;
      case FieldDescriptor::CPPTYPE_ENUM: {
        const int number = rep ? r->GetRepeatedEnumValue(message, field, index)
                               : r->GetEnumValue(message, field);
        const auto* value = field->enum_type()->FindValueByNumber(number);
        if (value == nullptr) return AppendInteger(number, out_);
        out_->push_back('"');
        out_->append(value->name());  // an identifier: nothing to escape
        out_->push_back('"');
        return;
      }
      case FieldDescriptor::CPPTYPE_STRING: {
        std::string scratch;
        const std::string& s =
            rep ? r->GetRepeatedStringReference(message, field, index, &scratch)
                : r->GetStringReference(message, field, &scratch);
        if (field->type() == FieldDescriptor::TYPE_BYTES) {
          return AppendBase64(s, out_);
        }
        return AppendString(s, out_);
      }
      case FieldDescriptor::CPPTYPE_MESSAGE: {
        const Message& sub = rep ? r->GetRepeatedMessage(message, field, index)
                                 : r->GetMessage(message, field);
        return PrintMessage(sub);
      }
    }
  }

  std::string* out_;
  const Descriptor* covered_type_ = nullptr;
  bool covered_ = false;
};

}  // namespace

void AppendMessageJson(const Message& message, std::string* out) {
  Printer(out).PrintMessage(message);
}

std::string PrintMessageJson(const Message& message) {
  std::string out;
  // JSON of numbers runs to ~3x their wire format; growing a string of tens
  // of MB by doubling would copy it and fault its pages in twice.
  out.reserve(message.ByteSizeLong() * 3);
  AppendMessageJson(message, &out);
  return out;
}

}  // namespace tensormorph
