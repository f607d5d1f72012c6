// What `tensormorph check` reports: one finding per rule broken, with where,
// expected vs actual, and what to do about it.
#ifndef TENSORMORPH_CORE_CHECK_FINDING_H_
#define TENSORMORPH_CORE_CHECK_FINDING_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace tensormorph {

// Ordered: a finding is "at or above" a fail level when its severity is at
// least that level.
enum class Severity : int { kInfo = 0, kWarning = 1, kError = 2 };

// "error", "warning", "info".
absl::string_view SeverityName(Severity s);
// The inverse of SeverityName; nullopt for anything else.
std::optional<Severity> ParseSeverity(absl::string_view name);

struct Finding {
  std::string rule;  // a stable kebab-case id from CheckRules()
  Severity severity = Severity::kError;
  std::string tensor;  // the logical or stored tensor; empty: the checkpoint
  std::string file;    // the file holding what broke the rule, if one
  std::string expected;
  std::string actual;
  std::string hint;  // one line: what to do
  // How many elements, groups, scales, tensors or entries broke the rule
  // (what they are is the rule's; the actual text says).
  int64_t count = 1;
  // The group with the most offenders (ScalarInfo::group ids), or for a
  // stored scale tensor the scale element; -1 when none applies.
  int64_t worst_group = -1;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_CHECK_FINDING_H_
