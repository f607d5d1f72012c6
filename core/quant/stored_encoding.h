// The encoding of a tensor stored in one piece: a plain dtype or a ggml type.
#ifndef TENSORMORPH_CORE_QUANT_STORED_ENCODING_H_
#define TENSORMORPH_CORE_QUANT_STORED_ENCODING_H_

#include <memory>

#include "absl/strings/string_view.h"
#include "core/format/stored_tensor.h"
#include "core/quant/encoding.h"

namespace tensormorph {

// REQUIRES: `tensor` outlives the encoding (the checkpoint owns both).
std::shared_ptr<const Encoding> MakeStoredEncoding(
    const StoredTensor& tensor, absl::string_view convention);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_QUANT_STORED_ENCODING_H_
