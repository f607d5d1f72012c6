#include "core/compare/knapsack.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/util/error_reason.h"

namespace tensormorph {
namespace {

// A partial choice over the items so far: its sums, the state of the
// previous frontier it extends and the option it adds, and its rank among
// the frontier's states by the lexicographic order of their option vectors
// (so that ties between new states compare as (parent's rank, option)).
struct State {
  int64_t bytes = 0;
  double error = 0;
  int32_t parent = -1;
  int32_t option = -1;
  int64_t lex = 0;
};

absl::Status CheckItems(const std::vector<std::vector<KnapsackOption>>& items,
                        int64_t budget, int64_t* least_bytes) {
  *least_bytes = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("knapsack item ", i, " has no option"));
    }
    int64_t least = std::numeric_limits<int64_t>::max();
    for (size_t j = 0; j < items[i].size(); ++j) {
      const KnapsackOption& o = items[i][j];
      if (o.bytes < 0 || !std::isfinite(o.error) || o.error < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "knapsack item ", i, " option ", j, ": bytes ", o.bytes,
            " and error ", o.error, " (bytes >= 0, error finite and >= 0)"));
      }
      least = std::min(least, o.bytes);
    }
    if (*least_bytes > std::numeric_limits<int64_t>::max() - least) {
      return absl::InvalidArgumentError("knapsack bytes overflow int64");
    }
    *least_bytes += least;
  }
  if (*least_bytes > budget) {
    return RequestFieldError(
        "budget", absl::StrCat("no choice fits the budget of ", budget,
                               " bytes: the smallest takes ", *least_bytes));
  }
  return absl::OkStatus();
}

// The next frontier: every state of `prev` extended by every option that
// keeps it within the budget, the dominated dropped (see the header), in
// ascending bytes (and so strictly descending error).
std::vector<State> Extend(const std::vector<State>& prev,
                          const std::vector<KnapsackOption>& options,
                          int64_t budget) {
  std::vector<State> next;
  next.reserve(prev.size() * options.size());
  for (size_t i = 0; i < prev.size(); ++i) {
    for (size_t j = 0; j < options.size(); ++j) {
      const KnapsackOption& o = options[j];
      if (o.bytes > budget - prev[i].bytes) continue;
      // lex holds (parent's rank, option) until ranks are reassigned.
      next.push_back({prev[i].bytes + o.bytes, prev[i].error + o.error,
                      static_cast<int32_t>(i), static_cast<int32_t>(j),
                      prev[i].lex * static_cast<int64_t>(options.size()) +
                          static_cast<int64_t>(j)});
    }
  }
  std::sort(next.begin(), next.end(), [](const State& a, const State& b) {
    if (a.bytes != b.bytes) return a.bytes < b.bytes;
    if (a.error != b.error) return a.error < b.error;
    return a.lex < b.lex;
  });
  size_t kept = 0;
  for (size_t k = 0; k < next.size(); ++k) {
    if (kept > 0 && next[k].error >= next[kept - 1].error) continue;
    next[kept++] = next[k];
  }
  next.resize(kept);
  // Ranks by (parent's rank, option): the lexicographic order of the
  // option vectors of the survivors.
  std::vector<size_t> order(next.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return next[a].lex < next[b].lex; });
  for (size_t r = 0; r < order.size(); ++r) {
    next[order[r]].lex = static_cast<int64_t>(r);
  }
  return next;
}

}  // namespace

absl::StatusOr<KnapsackChoice> SolveMultipleChoiceKnapsack(
    const std::vector<std::vector<KnapsackOption>>& items, int64_t budget,
    const KnapsackLimits& limits) {
  int64_t least_bytes = 0;
  if (absl::Status s = CheckItems(items, budget, &least_bytes); !s.ok()) {
    return s;
  }
  std::vector<std::vector<State>> stages;
  stages.reserve(items.size() + 1);
  stages.push_back({State{}});
  int64_t stored = 1;
  for (const std::vector<KnapsackOption>& options : items) {
    const int64_t candidates = static_cast<int64_t>(stages.back().size()) *
                               static_cast<int64_t>(options.size());
    if (candidates > limits.max_states ||
        stored + candidates > 4 * limits.max_states) {
      return LimitExceededError(
          absl::StrCat("the budget's knapsack needs more than ",
                       limits.max_states, " frontier states"),
          "max_states", limits.max_states, stored + candidates);
    }
    stages.push_back(Extend(stages.back(), options, budget));
    stored += static_cast<int64_t>(stages.back().size());
  }
  // Errors strictly descend along a frontier: its last state is the least
  // error, and the fewest bytes for it.
  KnapsackChoice choice;
  choice.option.resize(items.size());
  int32_t at = static_cast<int32_t>(stages.back().size()) - 1;
  choice.bytes = stages.back()[at].bytes;
  choice.error = stages.back()[at].error;
  for (size_t k = items.size(); k > 0; --k) {
    const State& s = stages[k][at];
    choice.option[k - 1] = s.option;
    at = s.parent;
  }
  return choice;
}

}  // namespace tensormorph
