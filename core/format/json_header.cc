#include "core/format/json_header.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/util/utf8.h"

namespace tensormorph {
namespace {

using nlohmann::json;

// Builds the document through nlohmann's own DOM builder, checking depth and
// duplicate keys on the way. (nlohmann's callback parser could check them
// too, but it rescans the parent object at each object's end: quadratic in
// the number of tensors of a header.)
class StrictDomBuilder : public JsonSaxTypes {
 public:
  explicit StrictDomBuilder(json* out)
      : dom_(*out, /*allow_exceptions=*/false) {}
  std::string error;  // empty when the text passed
  JsonRefusal refusal = JsonRefusal::kSyntax;
  std::vector<std::string> duplicate_path;  // with kDuplicateKey

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) {
    return dom_.number_float(v, s);
  }
  bool string(string_t& v) { return dom_.string(v); }
  bool binary(binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    if (!Deeper()) return false;
    // One set per depth, cleared for reuse: most objects are a tensor's three
    // keys, and a set allocated per object was a tenth of an open.
    if (static_cast<size_t>(depth_) > keys_.size()) {
      keys_.resize(depth_);
      last_key_.resize(depth_);
    }
    keys_[depth_ - 1].clear();
    last_key_[depth_ - 1].clear();
    return dom_.start_object(n);
  }
  bool key(string_t& k) {
    if (!keys_[depth_ - 1].insert(k).second) {
      error = absl::StrCat("duplicate key '", k, "'");
      refusal = JsonRefusal::kDuplicateKey;
      // The enclosing objects' current keys (an array between two objects
      // leaves its level's entry empty), then the duplicate.
      for (int d = 0; d + 1 < depth_; ++d) {
        if (!last_key_[d].empty()) duplicate_path.push_back(last_key_[d]);
      }
      duplicate_path.push_back(k);
      return false;
    }
    last_key_[depth_ - 1] = k;
    return dom_.key(k);
  }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    if (!Deeper()) return false;
    // No key at this level: a stale one would join a duplicate's path.
    if (static_cast<size_t>(depth_) <= last_key_.size()) {
      last_key_[depth_ - 1].clear();
    }
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  template <typename Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& e) {
    // nlohmann quotes the bytes it last read, which may be the very bytes
    // that are not UTF-8: the message is bound for protobuf.
    // nlohmann quotes the text it last read, which can be most of a file.
    // Its "[json.exception.parse_error.101] " tag says nothing to a user.
    absl::string_view what = e.what();
    if (absl::StartsWith(what, "[json.exception.")) {
      const size_t end = what.find("] ");
      if (end != absl::string_view::npos) what.remove_prefix(end + 2);
    }
    constexpr size_t kMaxQuote = 400;
    error =
        absl::StrCat("invalid JSON: ", EscapeUtf8(what.substr(0, kMaxQuote)),
                     what.size() > kMaxQuote ? "... (cut)" : "");
    return false;
  }

 private:
  bool Deeper() {
    if (++depth_ > kMaxJsonDepth) {
      error = absl::StrCat("nesting deeper than ", kMaxJsonDepth, " levels");
      refusal = JsonRefusal::kTooDeep;
      return false;
    }
    return true;
  }
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  int depth_ = 0;
  std::vector<absl::flat_hash_set<std::string>> keys_;
  std::vector<std::string> last_key_;  // per depth: the key being read
};

}  // namespace

absl::StatusOr<nlohmann::json> ParseStrictJson(
    absl::string_view text, absl::string_view what, JsonRefusal* refusal,
    std::vector<std::string>* duplicate_path) {
  json doc;
  StrictDomBuilder builder(&doc);
  if (!json::sax_parse(text.begin(), text.end(), &builder) ||
      !builder.error.empty()) {
    if (refusal != nullptr) *refusal = builder.refusal;
    if (duplicate_path != nullptr) {
      *duplicate_path = std::move(builder.duplicate_path);
    }
    return absl::DataLossError(absl::StrCat(
        what, ": ", builder.error.empty() ? "invalid JSON" : builder.error));
  }
  return doc;
}

}  // namespace tensormorph
