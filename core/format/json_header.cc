#include "core/format/json_header.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tensormorph {
namespace {

struct JsonRuleError {
  std::string message;
};

}  // namespace

absl::StatusOr<nlohmann::json> ParseStrictJson(absl::string_view text,
                                               absl::string_view what) {
  using nlohmann::json;
  std::vector<absl::flat_hash_set<std::string>> open_objects;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth) {
          throw JsonRuleError{
              absl::StrCat("nesting deeper than ", kMaxJsonDepth, " levels")};
        }
        if (event == json::parse_event_t::object_start) {
          open_objects.emplace_back();
        }
        break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!open_objects.empty() && !open_objects.back().insert(key).second) {
          throw JsonRuleError{absl::StrCat("duplicate key '", key, "'")};
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), callback,
                       /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const JsonRuleError& e) {
    return absl::DataLossError(absl::StrCat(what, ": ", e.message));
  } catch (const json::exception& e) {
    return absl::DataLossError(
        absl::StrCat(what, ": invalid JSON: ", e.what()));
  }
}

}  // namespace tensormorph
