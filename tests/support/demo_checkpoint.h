// A small llama-shaped demo model, as the quick start and tests use it.
#ifndef TENSORMORPH_TESTS_SUPPORT_DEMO_CHECKPOINT_H_
#define TENSORMORPH_TESTS_SUPPORT_DEMO_CHECKPOINT_H_

#include <string>

namespace tensormorph::testing {

// Writes into `dir`:
//   source/model.safetensors + config.json   the BF16 original
//   int8/model.safetensors + config.json     compressed-tensors int8,
//                                            per-channel symmetric
//   model-q8_0.gguf                          llama.cpp names, Q8_0 weights,
//                                            F32 norms, Q/K rows permuted
//                                            for RoPE as llama.cpp's
//                                            converter does
//   model-f32.gguf                           the same in F32 (equal to the
//                                            source, value for value)
//   model-q4_k_m.gguf                        a Q4_K_M-like mix: Q4_K, with
//                                            Q6_K attn_v/ffn_down/output and
//                                            F32 norms
// Returns false (and prints why) when a file cannot be written.
bool WriteDemoCheckpoints(const std::string& dir);

// Writes an importance matrix of the demo's block weights to `path`, in
// llama-imatrix's legacy .dat form (no checkpoint: the demo directory's
// entries are all checkpoints, which tests walk, so tensormorph-make-demo
// writes it beside them and DemoDir() does not). Aborts when it cannot.
bool WriteDemoImatrix(const std::string& path);

// The demo written once per process into a temporary directory (aborts when
// it cannot be written): tests that only read it share one copy.
const std::string& DemoDir();

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_DEMO_CHECKPOINT_H_
