// The rules `tensormorph check` applies, one documented entry each: the
// README's rule table and the CLI's help are written from this list, and a
// test holds every rule to a checkpoint that breaks it.
#ifndef TENSORMORPH_CORE_CHECK_RULES_H_
#define TENSORMORPH_CORE_CHECK_RULES_H_

#include <vector>

#include "absl/strings/string_view.h"
#include "core/check/finding.h"

namespace tensormorph {

struct CheckRule {
  absl::string_view id;  // stable kebab-case
  Severity severity;
  absl::string_view brief;    // a few words for --help's rule list
  absl::string_view catches;  // the failure it catches, for people
  // Where its threshold comes from; empty when the rule has none.
  absl::string_view threshold;
};

// Every rule, in the order the README lists them.
const std::vector<CheckRule>& CheckRules();
// nullptr for an unknown id.
const CheckRule* FindCheckRule(absl::string_view id);

// Thresholds, named once (the rule entries quote them).
// saturated-group: the fraction of a group's elements on its two end levels
// above which the group is reported.
inline constexpr double kSaturatedGroupFraction = 0.25;
// saturated-group: only groups of at least this many elements, on grids of
// at least this many levels (so that a group's own min and max, 2 of G
// elements, stay below the fraction, and a ternary or 2-bit grid whose end
// levels are most of its levels is not judged).
inline constexpr int64_t kSaturatedGroupMinElements = 32;
inline constexpr int kSaturatedGroupMinBits = 4;
// dead-levels: a tensor is judged when it has at least this many elements
// per level of its grid, and reported when at least half its levels never
// occur.
inline constexpr int64_t kDeadLevelsElementsPerLevel = 16;
// fp16-saturated-scale: the largest finite float16.
inline constexpr double kF16Max = 65504.0;

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_CHECK_RULES_H_
