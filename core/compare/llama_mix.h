// A mix of quantizations as llama.cpp makes it: the `--tensor-type
// PATTERN=TYPE` override that gives one tensor one type, and the size of the
// GGUF file llama_model_quantize writes for a mix.
//
// llama.cpp matches each override's pattern with std::regex_search (ECMAScript)
// against every tensor name, first match wins, so a bare name would also
// match "blk.1.attn_q.weight" inside "blk.11.attn_q.weight": the pattern is
// the name escaped and anchored.
//
// Its output file is the header (metadata and tensor infos, padded to the
// alignment) and then each tensor's data, each padded to the alignment. The
// header of a mix is as long as that of the base ftype's file from the same
// source: the tensor infos are fixed-width and the metadata the same.
//
// Thread safety: pure functions.
#ifndef TENSORMORPH_CORE_COMPARE_LLAMA_MIX_H_
#define TENSORMORPH_CORE_COMPARE_LLAMA_MIX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensormorph {

// `name` with every ECMAScript regex metacharacter escaped, between ^ and $.
std::string LlamaTensorPattern(absl::string_view name);

// "PATTERN=TYPE", as `llama-quantize --tensor-type` takes it.
std::string LlamaTensorTypeOverride(absl::string_view name,
                                    absl::string_view type);

// The file size: `data_offset` (the header, padded) plus each tensor's
// bytes padded to `alignment`.
// Errors: INVALID_ARGUMENT when alignment is not a power of two or a size
// is negative; OUT_OF_RANGE when the sum overflows int64.
absl::StatusOr<int64_t> PredictGgufFileSize(
    int64_t data_offset, int64_t alignment,
    const std::vector<int64_t>& tensor_bytes);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_COMPARE_LLAMA_MIX_H_
