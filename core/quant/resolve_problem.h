// What a lenient resolution (Checkpoint::Open for `tensormorph check`)
// found it could not build, instead of failing at the first such thing.
#ifndef TENSORMORPH_CORE_QUANT_RESOLVE_PROBLEM_H_
#define TENSORMORPH_CORE_QUANT_RESOLVE_PROBLEM_H_

#include <string>

namespace tensormorph {

struct ResolveProblem {
  // The `tensormorph check` rule it breaks: "missing-companion",
  // "orphan-companion", "companion-shape", "fp8-scale-layout",
  // "config-key", "shard-missing", "shard-corrupt", "index-corrupt",
  // "duplicate-name", "index-tensor-missing", "shard-tensor-unindexed",
  // "undecodable-tensor" (a recognised variant
  // not decoded) or "unresolved-tensor" (any other).
  std::string rule;
  // The logical tensor that could not be built ("" for a config key).
  std::string tensor;
  // The resolver's message: what it needed, expected vs actual. For
  // "config-key" the key path, expected and actual are in key / expected /
  // actual below as well.
  std::string message;
  std::string file;  // config-key: the config file
  std::string key;   // config-key: the key path
  std::string expected, actual;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_RESOLVE_PROBLEM_H_
