// The UTF-8 validator and the escaping every file-derived string passes
// through on its way to protobuf: each class of ill-formed input is caught,
// escaped byte by byte, and recovered exactly.
#include "core/util/utf8.h"

#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"

namespace tensormorph {
namespace {

struct Case {
  const char* what;
  std::string raw;
  std::string escaped;
};

// One per class of ill-formed input, plus the backslash rules.
std::vector<Case> Cases() {
  return {
      {"lone continuation byte", "a\x80z", "a\\x80z"},
      {"continuation run", "\xBF\xBF", "\\xBF\\xBF"},
      {"overlong 2-byte NUL", "\xC0\x80", "\\xC0\\x80"},
      {"overlong 2-byte lead C1", "\xC1\xBF", "\\xC1\\xBF"},
      {"overlong 3-byte", "\xE0\x80\xAF", "\\xE0\\x80\\xAF"},
      {"overlong 4-byte", "\xF0\x8F\xBF\xBF", "\\xF0\\x8F\\xBF\\xBF"},
      {"high surrogate", "\xED\xA0\x80", "\\xED\\xA0\\x80"},
      {"low surrogate", "\xED\xBF\xBF", "\\xED\\xBF\\xBF"},
      {"truncated 2-byte at end", "blk\xC3", "blk\\xC3"},
      {"truncated 3-byte then ASCII",
       "\xE3\x81"
       "A",
       "\\xE3\\x81A"},
      {"truncated 4-byte", "\xF0\x9F\x98", "\\xF0\\x9F\\x98"},
      {"above U+10FFFF (F4 90)", "\xF4\x90\x80\x80", "\\xF4\\x90\\x80\\x80"},
      {"lead F5", "\xF5\x80\x80\x80", "\\xF5\\x80\\x80\\x80"},
      {"byte FF", "\xFF", "\\xFF"},
      {"latin-1 name", "caf\xE9.weight", "caf\\xE9.weight"},
      {"backslash before x", "a\\xE3", "a\\\\xE3"},
      {"backslash before backslash", "a\\\\b", "a\\\\\\b"},
      {"backslash before an escaped byte", "\\\xE3", "\\\\\\xE3"},
      {"backslash elsewhere is kept", "'\\n' \\", "'\\n' \\"},
  };
}

TEST(Utf8Test, ValidatorAcceptsWellFormedUtf8) {
  for (const std::string& s : std::vector<std::string>{
           "", "blk.0.attn_q.weight", std::string("nul\0ok", 6), "\xC2\x80",
           "\xDF\xBF", "\xE0\xA0\x80", "\xED\x9F\xBF", "\xEE\x80\x80",
           "\xEF\xBF\xBF", "\xF0\x90\x80\x80", "\xF4\x8F\xBF\xBF",
           "\xE6\x97\xA5\xE6\x9C\xAC"}) {
    EXPECT_TRUE(IsValidUtf8(s)) << EscapeUtf8(s);
    EXPECT_EQ(EscapeUtf8(s), s) << "valid text without backslashes changed";
  }
}

TEST(Utf8Test, EachIllFormedClassIsEscapedByteByByte) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(EscapeUtf8(c.raw), c.escaped);
    EXPECT_TRUE(IsValidUtf8(EscapeUtf8(c.raw)));
    EXPECT_EQ(UnescapeUtf8(c.escaped), c.raw);
  }
}

TEST(Utf8Test, ValidatorRejectsEachIllFormedClass) {
  for (const Case& c : Cases()) {
    if (c.raw.find('\\') != std::string::npos) continue;  // valid, escaped
    EXPECT_FALSE(IsValidUtf8(c.raw)) << c.what;
  }
}

// Random bytes biased towards the troublesome ones: every input round-trips,
// every output is valid, and no two inputs share an output.
TEST(Utf8Test, RandomBytesRoundTripAndNeverCollide) {
  std::mt19937 rng(13);
  const std::string alphabet =
      std::string("\\xX0aE9\x80\xBF\xC0\xC2\xE0\xE3\xED\xF0\xF4\xF5\xFF") +
      std::string(1, '\0');
  absl::flat_hash_map<std::string, std::string> seen;  // escaped -> raw
  for (int n = 0; n < 200000; ++n) {
    std::string raw(rng() % 7, '\0');
    for (char& c : raw) c = alphabet[rng() % alphabet.size()];
    const std::string escaped = EscapeUtf8(raw);
    ASSERT_TRUE(IsValidUtf8(escaped)) << escaped;
    ASSERT_EQ(UnescapeUtf8(escaped), raw) << escaped;
    auto [it, inserted] = seen.emplace(escaped, raw);
    ASSERT_TRUE(inserted || it->second == raw)
        << "'" << UnescapeUtf8(escaped) << "' collides";
  }
}

TEST(Utf8Test, EscapingIsIdempotentOnlyWhereNothingNeedsEscaping) {
  // An escaped name given back is a valid name: escaping it again escapes
  // its backslashes, so a client must send the listed spelling as it is.
  EXPECT_EQ(EscapeUtf8("w\\xE3"), "w\\\\xE3");
  EXPECT_EQ(EscapeUtf8("blk.0"), "blk.0");
}

}  // namespace
}  // namespace tensormorph
