// compressed-tensors' module patterns (a config group's `targets`, the
// config's `ignore`): "re:<regex>" patterns matched against the whole module
// name, class names ("Linear": an initial capital, matching every module,
// since a checkpoint does not record module classes) and module names
// (equal, or a dotted suffix). Shared by the resolver, which picks a
// module's scheme, and `tensormorph check`, which reports entries that
// match nothing.
#ifndef TENSORMORPH_CORE_QUANT_CONVENTIONS_TARGETS_H_
#define TENSORMORPH_CORE_QUANT_CONVENTIONS_TARGETS_H_

#include <regex>
#include <string>
#include <vector>

namespace tensormorph::conventions {

// One pattern compiled once. Thread safety: immutable after construction.
class TargetPattern {
 public:
  explicit TargetPattern(const std::string& pattern);
  // A regex std::regex cannot compile (or too complex to run) matches
  // nothing.
  bool Match(const std::string& module) const;
  // A class name: matches every module, so it can never be unused.
  bool is_class() const { return is_class_; }

 private:
  std::string name_;
  bool is_regex_ = false, is_class_ = false, compiled_ = false;
  std::regex regex_;
};

// Several patterns, matching a module when any does.
class Targets {
 public:
  explicit Targets(const std::vector<std::string>& patterns);
  bool Match(const std::string& module) const;

 private:
  std::vector<TargetPattern> patterns_;
};

}  // namespace tensormorph::conventions

#endif  // TENSORMORPH_CORE_QUANT_CONVENTIONS_TARGETS_H_
