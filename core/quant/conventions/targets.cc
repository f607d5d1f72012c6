#include "core/quant/conventions/targets.h"

#include <cctype>

#include "absl/strings/match.h"

namespace tensormorph::conventions {

TargetPattern::TargetPattern(const std::string& pattern) : name_(pattern) {
  if (absl::StartsWith(pattern, "re:")) {
    is_regex_ = true;
    try {
      regex_ = std::regex(pattern.substr(3));
      compiled_ = true;
    } catch (const std::regex_error&) {
      // A pattern std::regex cannot compile matches nothing.
    }
  } else {
    is_class_ = !pattern.empty() &&
                std::isupper(static_cast<unsigned char>(pattern[0]));
  }
}

bool TargetPattern::Match(const std::string& module) const {
  if (!is_regex_) {
    return is_class_ || name_ == module || absl::EndsWith(module, "." + name_);
  }
  if (!compiled_) return false;
  try {
    return std::regex_match(module, regex_);
  } catch (const std::regex_error&) {
    return false;  // too complex for std::regex (error_complexity, _stack)
  }
}

Targets::Targets(const std::vector<std::string>& patterns) {
  patterns_.reserve(patterns.size());
  for (const std::string& p : patterns) patterns_.emplace_back(p);
}

bool Targets::Match(const std::string& module) const {
  for (const TargetPattern& p : patterns_) {
    if (p.Match(module)) return true;
  }
  return false;
}

}  // namespace tensormorph::conventions
