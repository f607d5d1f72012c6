// llama.cpp's ftype names: what `llama-quantize SOURCE OUT TYPE` takes as
// TYPE for a general.file_type value (llama_ftype in llama.h), so that the
// command a mix prints is one a user can paste.
//
// Thread safety: a pure function.
#ifndef TENSORMORPH_CORE_COMPARE_LLAMA_FTYPE_H_
#define TENSORMORPH_CORE_COMPARE_LLAMA_FTYPE_H_

#include <cstdint>
#include <string>

namespace tensormorph {

// "Q4_K_M" for 15, "F32" for 0, ...: the name llama-quantize's argument
// parser accepts for `ftype`. Empty for a value llama.cpp does not (or no
// longer does) quantize to, and for -1 (no general.file_type).
std::string LlamaFtypeName(int32_t ftype);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_COMPARE_LLAMA_FTYPE_H_
