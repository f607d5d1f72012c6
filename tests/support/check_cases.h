// Checkpoints that each break one rule of `tensormorph check`, written by
// the test writers, with the finding each must yield: the core, server and
// CLI tests run the same cases, so every rule is shown to fire the same way
// embedded, remote and in-process.
#ifndef TENSORMORPH_TESTS_SUPPORT_CHECK_CASES_H_
#define TENSORMORPH_TESTS_SUPPORT_CHECK_CASES_H_

#include <string>
#include <utility>
#include <vector>

namespace tensormorph::testing {

struct CheckCase {
  std::string rule;      // the rule the checkpoint breaks
  std::string severity;  // "error", "warning", "info"
  std::string dir;       // the checkpoint (a directory)
  std::string tensor;    // the tensor its finding names ("" = checkpoint)
  // Text the finding's actual (or expected, for the ignore rule) holds.
  std::string says;
  // Other rules the same break necessarily fires, and nothing else: a NaN
  // scale makes its row NaN, a zero scale its row all zeros.
  std::vector<std::string> also;
  // The full-precision source to check against (--source), or "".
  std::string source = "";
};

// The weight and scale names of the compressed-tensors cases.
inline constexpr char kCheckWeight[] = "model.layers.0.mlp.down_proj.weight";
inline constexpr char kCheckScale[] =
    "model.layers.0.mlp.down_proj.weight_scale";

// A clean compressed-tensors int8 per-channel checkpoint ([4, 64] codes
// from a fixed gaussian, F32 scales, an unquantized lm_head, its config):
// the base every value case breaks one thing of. No rule fires on it.
std::string WriteCleanCheckCheckpoint();

// A full-precision source of the clean checkpoint: each element within
// `within` steps of its decoded value (0 < within < 0.5), except `off`
// elements of row 1 placed `off_steps` away; and `codes_scale` the spread of
// the codes (the clean checkpoint's 30; 1 uses 7 levels of 256). The
// checkpoint is written beside it, into the returned pair (checkpoint,
// source).
std::pair<std::string, std::string> WriteCheckAndSource(double codes_scale,
                                                        int off,
                                                        double off_steps);

// Every case, each in a fresh temporary directory.
std::vector<CheckCase> CheckCases();

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_CHECK_CASES_H_
