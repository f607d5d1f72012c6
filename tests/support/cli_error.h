// The status a failed CLI call reported: its stderr error line
// "tensormorph: CODE [REASON]: message" (docs/errors.md) read back into the
// code, the reason and the message, so the status matchers
// (tests/support/status_matchers.h) assert on the CLI as on the client
// library:
//   EXPECT_THAT(CliErrorOf(r.err), HasReason(ErrorReason::kTensorNotFound));
// Usage errors (exit 1) print the same line. The line carries no metadata;
// CliJsonErrorOf reads --json's error object ({"error": {code, reason,
// message, metadata}} on stdout). Output without an error
// reads as UNKNOWN with the reason NO_ERROR_LINE, which no reason matcher
// accepts; its message is the whole output.
#ifndef TENSORMORPH_TESTS_SUPPORT_CLI_ERROR_H_
#define TENSORMORPH_TESTS_SUPPORT_CLI_ERROR_H_

#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "core/util/error_reason.h"
#include "nlohmann/json.hpp"

namespace tensormorph::testing {

// The code named `name` ("NOT_FOUND"), or nullopt.
inline std::optional<absl::StatusCode> CodeNamed(absl::string_view name) {
  for (int c = 1; c <= 16; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    if (absl::StatusCodeToString(code) == name) return code;
  }
  return std::nullopt;
}

inline absl::Status CliErrorOf(absl::string_view err) {
  constexpr absl::string_view kPrefix = "tensormorph: ";
  for (absl::string_view line : absl::StrSplit(err, '\n')) {
    if (!absl::ConsumePrefix(&line, kPrefix)) continue;
    const size_t open = line.find(" [");
    const size_t close = line.find("]: ");
    if (open == absl::string_view::npos || close == absl::string_view::npos ||
        close < open) {
      continue;
    }
    const std::optional<absl::StatusCode> code =
        CodeNamed(line.substr(0, open));
    if (!code) continue;
    return WithReasonName(absl::Status(*code, line.substr(close + 3)),
                          line.substr(open + 2, close - open - 2));
  }
  return WithReasonName(absl::UnknownError(err), "NO_ERROR_LINE");
}

inline absl::Status CliJsonErrorOf(absl::string_view out) {
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("error") || !j["error"].is_object()) {
      continue;
    }
    const nlohmann::json& e = j["error"];
    const std::optional<absl::StatusCode> code = CodeNamed(e.value("code", ""));
    if (!code) continue;
    ErrorMetadata metadata;
    if (e.contains("metadata") && e["metadata"].is_object()) {
      for (const auto& [key, value] : e["metadata"].items()) {
        if (value.is_string()) metadata.emplace_back(key, value);
      }
    }
    return WithReasonName(absl::Status(*code, e.value("message", "")),
                          e.value("reason", ""), std::move(metadata));
  }
  return WithReasonName(absl::UnknownError(out), "NO_ERROR_LINE");
}

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_CLI_ERROR_H_
