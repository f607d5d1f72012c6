// What the llama.cpp oracle tests share: the quantizer loaded once per
// process, ggml's own reading of a tensor's bytes, importance matrices
// written as files, and the test model's source values in the row order of
// the GGUF it was converted into.
#ifndef TENSORMORPH_TESTS_ORACLE_LLAMA_ORACLE_SUPPORT_H_
#define TENSORMORPH_TESTS_ORACLE_LLAMA_ORACLE_SUPPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "tests/oracle/llama_quantizer.h"
#include "tests/oracle/llama_test_model.h"

namespace tensormorph::testing {

// libllama of GgmlOracle::DefaultDir(), loaded once (after ggml-base, so
// that it shares GgmlOracle::Shared()'s). A test binary cannot go on
// without it: a failed load is reported and aborts.
const LlamaQuantizer& SharedLlamaQuantizer();

// Bytes of a row of `ne0` elements of ggml type `type`; -1 for a type
// ggml does not know or a row that is not whole blocks (ListGguf's
// row_bytes).
int64_t GgmlRowBytes(uint32_t type, int64_t ne0);

// ggml's own reading of a tensor's bytes: to_float, or the floats
// themselves for F32 (which has no to_float). Empty (with a test failure)
// when ggml refuses.
std::vector<float> GgmlValues(uint32_t type, absl::Span<const uint8_t> data);

// `m` as llama-imatrix writes it, in its GGUF form (in_sum2 and counts of
// 1, one chunk of 512) and its legacy .dat (ncall 1): counts and ncall of 1
// leave each weight as written when llama-quantize divides by them.
std::string GgufImatrixFile(const Imatrix& m);
std::string LegacyImatrixFile(const Imatrix& m);

// The source of a GGUF tensor in GGUF row order, from the model's values:
// Q and K rows permuted as convert_hf_to_gguf.py permutes them (written out
// independently of Tensormorph's RowMap).
std::vector<double> SourceInGgufOrder(const LlamaTestWeight& w);

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_ORACLE_LLAMA_ORACLE_SUPPORT_H_
