// llama.cpp's own quantizer as the test oracle: libllama of the pinned npm
// package (tests/oracle/fetch_llama_cpp.sh), loaded with dlopen beside the
// libggml*.so it needs, and driven through llama_model_quantize exactly as
// the llama-quantize tool drives it. Only four entry points and one struct
// are declared here, with the layout of the pinned version (checked at load
// against the documented defaults).
#ifndef TENSORMORPH_TESTS_ORACLE_LLAMA_QUANTIZER_H_
#define TENSORMORPH_TESTS_ORACLE_LLAMA_QUANTIZER_H_

#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tensormorph::testing {

// A file type llama.cpp quantizes a model into (enum llama_ftype).
struct LlamaFtype {
  int id = 0;        // LLAMA_FTYPE_MOSTLY_<name>
  std::string name;  // "Q4_K_M", "IQ2_XXS", ...
  // llama.cpp refuses these without an importance matrix (very low-bit
  // types, and Q2_K_S's Q2_K tensors).
  bool needs_imatrix = false;
  friend void PrintTo(const LlamaFtype& f, std::ostream* os) { *os << f.name; }
};

// Every ftype the pinned llama.cpp writes (F32 itself excluded).
const std::vector<LlamaFtype>& LlamaFtypes();

// An importance matrix: per tensor name (GGUF), one weight per input
// channel (the tensor's ne[0]).
using Imatrix = std::map<std::string, std::vector<float>>;

// One `llama-quantize --tensor-type PATTERN=TYPE` override: every tensor
// whose name `pattern` matches (std::regex_search, ECMAScript) is quantized
// into ggml type `type`, the first matching override winning.
struct LlamaTensorType {
  std::string pattern;
  int type = 0;  // enum ggml_type
};

// Thread safety: Quantize may be called from one thread at a time.
class LlamaQuantizer {
 public:
  // Loads libllama from `dir` (GgmlOracle::DefaultDir() by default) and
  // checks the declared struct layout against the library's defaults.
  // Errors: FAILED_PRECONDITION when the library is missing, will not load,
  // lacks an entry point or disagrees with the declared layout.
  static absl::StatusOr<std::unique_ptr<LlamaQuantizer>> Load(
      const std::string& dir);
  static absl::StatusOr<std::unique_ptr<LlamaQuantizer>> Load();
  ~LlamaQuantizer();
  LlamaQuantizer(const LlamaQuantizer&) = delete;
  LlamaQuantizer& operator=(const LlamaQuantizer&) = delete;

  // llama_model_quantize(in -> out) into `ftype`, on `threads` threads, with
  // `imatrix` when not null. Errors: INTERNAL when llama.cpp reports a
  // failure (its reason is on stderr, where llama.cpp logs).
  // With `tensor_types`, those overrides, passed as llama-quantize passes
  // its --tensor-type arguments (llama_model_quantize_params.tt_overrides).
  absl::Status Quantize(
      const std::string& in, const std::string& out, int ftype,
      const Imatrix* imatrix, int threads = 1,
      const std::vector<LlamaTensorType>& tensor_types = {}) const;

  // The npm package's version (package.json next to bins/), "unknown" when
  // it cannot be read: part of the cache key of QuantizeCached.
  const std::string& package_version() const { return package_version_; }

 private:
  struct Api;
  LlamaQuantizer(std::unique_ptr<Api> api, std::string version);

  std::unique_ptr<Api> api_;
  std::string package_version_;
};

// The test model (llama_test_model.h) quantized by llama.cpp into `ftype`,
// cached under `cache_root` (the build directory's llama-oracle-cache by
// default) by the model's hash and the package version, so that a second
// run in the same build quantizes nothing. Concurrent test processes share
// the cache: each file is made under a lock and renamed into place.
struct LlamaQuantized {
  std::string hf_dir;  // the Hugging Face source
  std::string f32_gguf;
  std::string gguf;  // llama.cpp's output in `ftype`
  bool from_cache = false;
};
absl::StatusOr<LlamaQuantized> QuantizeTestModelCached(
    const LlamaQuantizer& quantizer, const LlamaFtype& ftype,
    const std::string& cache_root = "");

// The importance matrix used for the imatrix-only ftypes: deterministic,
// with the test model's outlier input channels weighted most.
Imatrix TestModelImatrix();

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_ORACLE_LLAMA_QUANTIZER_H_
