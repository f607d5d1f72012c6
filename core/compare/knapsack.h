// The exact multiple-choice knapsack behind `tensormorph compare --budget-*`:
// one option per item (a tensor; its options the quantizations that hold
// it, each with its stored bytes and its error), total error least within a
// byte budget. Exact, not a heuristic: a dynamic programme over Pareto
// frontiers, so that a budget's mix is the best one there is and a
// prediction made from it holds.
//
// Thread safety: a pure function.
#ifndef TENSORMORPH_CORE_COMPARE_KNAPSACK_H_
#define TENSORMORPH_CORE_COMPARE_KNAPSACK_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace tensormorph {

struct KnapsackOption {
  int64_t bytes = 0;  // >= 0
  double error = 0;   // finite, >= 0
};

struct KnapsackChoice {
  std::vector<int> option;  // per item, the index of the option chosen
  int64_t bytes = 0;        // their bytes' sum
  double error = 0;         // their errors' sum, added in item order
};

struct KnapsackLimits {
  // Frontier states kept at once (each a few words): past it the call fails
  // rather than use unbounded memory. A frontier never holds more states
  // than distinct byte totals within the budget.
  int64_t max_states = int64_t{1} << 24;
};

// The choice of one option per item whose bytes sum to at most `budget`
// with the least error sum; among equally small errors the fewest bytes,
// and then the lexicographically least `option` vector (so that the same
// input always gives the same mix). Errors are added in item order, as the
// caller adds the chosen tensors' errors.
//
// The programme walks the items in order, keeping after each the Pareto
// frontier of (bytes, error) over the prefix: a partial choice that another
// matches or beats in both (and beats in one, or equals in both with a
// lexicographically lesser prefix) can be dropped, because any completion
// of it is matched by the same completion of the other.
//
// Errors: INVALID_ARGUMENT REQUEST_INVALID {field: "budget"} when no choice
// fits the budget (the message gives the least total there is); INVALID_
// ARGUMENT when an item has no option, or an option negative bytes or an
// error not finite and >= 0; RESOURCE_EXHAUSTED LIMIT_EXCEEDED when the
// frontier would pass limits.max_states.
absl::StatusOr<KnapsackChoice> SolveMultipleChoiceKnapsack(
    const std::vector<std::vector<KnapsackOption>>& items, int64_t budget,
    const KnapsackLimits& limits = {});

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_COMPARE_KNAPSACK_H_
