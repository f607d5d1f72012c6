#include "proto/json_print.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <type_traits>
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

// Writes printf's %.<precision>g of a number given by its significant
// digits (without trailing zeros, as %g drops them) and decimal exponent at
// `p`; returns the end. At most 24 characters ("-d.dddddddddddddddde-308").
char* WriteG(bool negative, std::string_view digits, int exponent,
             int precision, char* p) {
  const auto put = [&p](std::string_view text) {
    std::memcpy(p, text.data(), text.size());
    p += text.size();
  };
  if (negative) *p++ = '-';
  const int n = static_cast<int>(digits.size());
  if (exponent < -4 || exponent >= precision) {  // d.ddde±XX
    *p++ = digits[0];
    if (n > 1) {
      *p++ = '.';
      put(digits.substr(1));
    }
    *p++ = 'e';
    *p++ = exponent < 0 ? '-' : '+';
    const int e = exponent < 0 ? -exponent : exponent;
    if (e < 10) *p++ = '0';
    return std::to_chars(p, p + 3, e).ptr;
  }
  if (exponent < 0) {  // 0.000ddd
    put("0.");
    std::memset(p, '0', -exponent - 1);
    p += -exponent - 1;
    put(digits);
    return p;
  }
  const int whole = exponent + 1;  // ddd000 or ddd.ddd
  if (n <= whole) {
    put(digits);
    std::memset(p, '0', whole - n);
    return p + (whole - n);
  }
  put(digits.substr(0, whole));
  *p++ = '.';
  put(digits.substr(whole));
  return p;
}

using Uint128 = unsigned __int128;

// 10^k for k <= 31, the largest power ExactShortOrLong multiplies by.
constexpr auto kPow10 = [] {
  std::array<Uint128, 32> p{};
  p[0] = 1;
  for (size_t i = 1; i < p.size(); ++i) p[i] = p[i - 1] * 10;
  return p;
}();

// A positive finite number as m * 2^-shift, m the full significand (the
// implicit bit set): value * 10^k is then m * 10^k / 2^shift, whose
// quotient and remainder are a shift and a mask of one 128-bit product.
struct Binary {
  uint64_t m;
  int shift;
  int log2;    // floor(log2(value))
  bool min_m;  // m is a power of two: the gap below is half the gap above
};

// value * 10^k = q + r / 2^shift, exactly. REQUIRES: m * 10^k fits in 128
// bits, 0 < shift < 128.
struct Scaled {
  Uint128 q, r;
};
Scaled Scale(const Binary& b, int k) {
  const Uint128 n = static_cast<Uint128>(b.m) * kPow10[k];
  return {n >> b.shift, n & ((static_cast<Uint128>(1) << b.shift) - 1)};
}

// "00" to "99".
constexpr auto kDigitPairs = [] {
  std::array<char, 200> p{};
  for (int i = 0; i < 100; ++i) {
    p[2 * i] = static_cast<char>('0' + i / 10);
    p[2 * i + 1] = static_cast<char>('0' + i % 10);
  }
  return p;
}();

// Two decimal digits at a time, `digits` of x (zero-padded) ending at
// `end`.
template <int kDigits>
void PutDigits(uint32_t x, char* end) {
  for (int left = kDigits; left >= 2; left -= 2) {
    end -= 2;
    std::memcpy(end, &kDigitPairs[2 * (x % 100)], 2);
    x /= 100;
  }
  if constexpr (kDigits % 2 == 1) *--end = static_cast<char>('0' + x);
}

// kN decimal digits of v < 10^kN, kN <= 18, zero-padded, at `out`; returns
// the end. Two halves of 32 bits, each unrolled: shorter chains of
// dependent divisions than to_chars' one, which was a third of the cost of
// writing a number.
template <int kN>
char* WriteDigits(uint64_t v, char* out) {
  constexpr int kLow = kN < 9 ? kN : 9;
  PutDigits<kLow>(static_cast<uint32_t>(v % 1'000'000'000), out + kN);
  PutDigits<kN - kLow>(static_cast<uint32_t>(v / 1'000'000'000),
                       out + kN - kLow);
  return out + kN;
}

// Writes protobuf's choice for `value` (normal, finite, nonzero): printf's
// %.<kShort>g when those digits read back to `value` (strtod or strtof: to
// nearest, ties to even), else %.<kLong>g, at *out, advancing it; true when
// written. Computed exactly from one product: the decimal exponent from the
// binary one, then value * 10^k for kLong digits, quotient and remainder;
// the kShort digits are that quotient over 10^(kLong - kShort), rounded with
// the exact remainder. Both round to nearest, ties to even, as glibc's
// printf does. Writes nothing (false) where the product would not fit in
// 128 bits: magnitudes below about 2e-6 or from 2^52 up for a double, below
// about 1e-23 or from 2^23 up for a float (the caller asks to_chars).
template <class T>
bool ExactShortOrLong(T value, char** out) {
  constexpr bool kDouble = sizeof(T) == sizeof(double);
  using Bits = std::conditional_t<kDouble, uint64_t, uint32_t>;
  constexpr int kFraction = std::numeric_limits<T>::digits - 1;  // 52, 23
  constexpr int kBias = std::numeric_limits<T>::max_exponent - 1;
  constexpr int kShort = kDouble ? 15 : 6;  // DBL_DIG, FLT_DIG
  constexpr int kLong = kDouble ? 17 : 9;   // digits that always read back
  constexpr Uint128 kDrop = kPow10[kLong - kShort];  // 100, 1000
  // m < 2^53 (2^24): 10^k below 2^75 (2^104) keeps m * 10^k in 128 bits.
  constexpr int kMaxK = kDouble ? 22 : 31;
  const Bits bits = std::bit_cast<Bits>(value);
  const int biased = static_cast<int>(bits >> kFraction) & (2 * kBias + 1);
  const Bits fraction = bits & ((Bits{1} << kFraction) - 1);
  const Binary b{fraction | (Bits{1} << kFraction), kBias + kFraction - biased,
                 biased - kBias, fraction == 0};
  // 4 * kDrop * 2^shift, the largest the read-back test forms, below 2^128.
  if (b.shift <= 0 || b.shift > 115) return false;
  // floor(log10(value)) is floor(log2 * log10(2)) or one more.
  int exponent = (b.log2 * 78913) >> 18;  // 78913 / 2^18 ~ log10(2)
  int k = kLong - 1 - (exponent + 1);
  if (k < 0 || k + 1 > kMaxK) return false;
  Scaled s = Scale(b, k);
  if (s.q >= kPow10[kLong - 1]) {
    ++exponent;
  } else {
    s = Scale(b, ++k);
  }
  // (Held, not assumed: the digits before rounding are kLong long.)
  if (s.q < kPow10[kLong - 1] || s.q >= kPow10[kLong]) return false;
  const Uint128 one = static_cast<Uint128>(1) << b.shift;
  // The short digits: value * 10^(k - kLong + kShort) is short_q plus
  // rem / (kDrop * one). Distances are in units of 1 / one at 10^k's scale,
  // in which value's ulp is 10^k.
  const uint64_t long_q = static_cast<uint64_t>(s.q);  // < 10^kLong
  const uint64_t short_q = long_q / static_cast<uint64_t>(kDrop);
  const Uint128 rem =
      static_cast<Uint128>(long_q % static_cast<uint64_t>(kDrop)) << b.shift |
      s.r;
  const Uint128 unit = kDrop << b.shift, half = unit >> 1;
  const bool up = rem > half || (rem == half && (short_q & 1) != 0);
  const Uint128 d = up ? unit - rem : rem;
  const bool even = (b.m & 1) == 0;
  // Below a power of two the neighbour is half as far.
  const bool reads_back =
      b.min_m && !up && d != 0
          ? 4 * d <= kPow10[k]  // a tie goes to value: its m is even
          : 2 * d < kPow10[k] || (2 * d == kPow10[k] && even);
  uint64_t q;
  int precision;
  if (reads_back) {
    q = short_q + (up ? 1 : 0);
    precision = kShort;
  } else {
    const bool long_up =
        s.r > (one >> 1) || (s.r == (one >> 1) && (long_q & 1) != 0);
    q = long_q + (long_up ? 1 : 0);
    precision = kLong;
  }
  char digits[24];
  char* end;
  if (q == kPow10[precision]) {  // 9.99..95 rounded up to 10.0..0
    ++exponent;
    digits[0] = '1';
    end = digits + 1;
  } else {
    end = reads_back ? WriteDigits<kShort>(q, digits)
                     : WriteDigits<kLong>(q, digits);
    while (end[-1] == '0') --end;  // %g drops trailing zeros
  }
  *out = WriteG(std::signbit(value), std::string_view(digits, end - digits),
                exponent, precision, *out);
  return true;
}

// protobuf's SimpleDtoa / SimpleFtoa: printf's %.15g if it reads back to
// the double, else %.17g (%.6g and %.9g for a float, and %.9g for every
// subnormal float: protobuf reads back with strtof, which reports ERANGE).
// printf is slow, so whole numbers print as integers and other normal
// numbers of moderate magnitude (most of what replies carry) take
// ExactShortOrLong's integer arithmetic for both. The rest start
// from the shortest digits D that read back (std::to_chars, exact): with at
// most 15 of them, %.15g prints D (%.15g's rounding lands within half an
// ulp of the value, where D is the only number of 15 digits); with exactly
// 17, %.17g prints D (the closest number of 17 digits reads back, and none
// shorter does). With 16, %.15g cannot read back and %.17g is computed as
// such. Subnormals take protobuf's way. Writes at `out`, returns the end.
template <class T>
char* WriteFloating(T value, char* out) {
  const auto put = [&out](std::string_view text) {
    std::memcpy(out, text.data(), text.size());
    return out + text.size();
  };
  if (std::isnan(value)) return put("\"NaN\"");
  if (std::isinf(value)) {
    return put(value > 0 ? "\"Infinity\"" : "\"-Infinity\"");
  }
  constexpr bool kDouble = sizeof(T) == sizeof(double);
  constexpr int kShort = kDouble ? 15 : 6;  // DBL_DIG, FLT_DIG
  constexpr int kLong = kDouble ? 17 : 9;   // digits that always read back
  if (value == 0) return put(std::signbit(value) ? "-0" : "0");
  // Whole numbers of at most kShort digits print as integers under %g, and
  // read back (scales and levels in replies often are).
  constexpr T kWholeLimit = kDouble ? 1e15 : 1e6;
  if (std::fabs(value) < kWholeLimit && value == std::trunc(value)) {
    return std::to_chars(out, out + kMaxJsonNumberChars,
                         static_cast<int64_t>(value))
        .ptr;
  }
  // Most numbers, exactly in integers; to_chars for the rest.
  if (std::fpclassify(value) == FP_NORMAL && ExactShortOrLong(value, &out)) {
    return out;
  }
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
      return WriteG(negative, std::string_view(digits, n), exponent,
                    n <= kShort ? kShort : kLong, out);
    }
  }
  if (kDouble && subnormal) {  // as protobuf does it
    const char* end = std::to_chars(buf, buf + sizeof buf, value,
                                    std::chars_format::general, kShort)
                          .ptr;
    T parsed;
    if (std::from_chars(buf, end, parsed).ec == std::errc() &&
        parsed == value) {
      return put(std::string_view(buf, end - buf));
    }
  }
  return std::to_chars(out, out + kMaxJsonNumberChars, value,
                       std::chars_format::general, kLong)
      .ptr;
}

template <class T>
void AppendFloating(T value, std::string* out) {
  char buf[kMaxJsonNumberChars];
  out->append(buf, WriteFloating(value, buf));
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

char* WriteJsonDouble(double value, char* out) {
  return WriteFloating(value, out);
}

char* WriteJsonFloat(float value, char* out) {
  return WriteFloating(value, out);
}

void AppendJsonString(std::string_view text, std::string* out) {
  AppendString(text, out);
}

bool JsonStringIsVerbatim(std::string_view text) {
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x80 || EscapesAscii(u)) return false;
  }
  return true;
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
