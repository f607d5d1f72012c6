// ggml itself as the test oracle: the prebuilt libggml-base that npm's
// @node-llama-cpp/linux-x64 ships (tests/oracle/fetch_llama_cpp.sh pins and
// fetches it), loaded with dlopen, so that what Tensormorph decodes is held
// to what llama.cpp itself writes and decodes, not only to our own writers.
// Nothing of ggml is built, vendored or declared from its headers here but
// the few C entry points used below, whose layout the pinned version fixes.
#ifndef TENSORMORPH_TESTS_ORACLE_GGML_ORACLE_H_
#define TENSORMORPH_TESTS_ORACLE_GGML_ORACLE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace tensormorph::testing {

// Thread safety: const methods are thread-safe (ggml's to_float and
// quantize functions are pure; ggml_quantize_init is called under a lock).
class GgmlOracle {
 public:
  // Types of the pinned ggml: ids 0 .. kTypeCount - 1 (GGML_TYPE_COUNT).
  static constexpr int kTypeCount = 43;

  // The directory fetch_llama_cpp.sh unpacked into the build directory
  // (or $TENSORMORPH_LLAMA_CPP_DIR, which overrides it).
  static std::string DefaultDir();

  // Loads libggml-base.so from `dir`.
  // Errors: FAILED_PRECONDITION naming the file and how to fetch it when it
  // is missing or will not load.
  static absl::StatusOr<std::unique_ptr<GgmlOracle>> Load(
      const std::string& dir = DefaultDir());
  // The oracle of DefaultDir(), loaded once per process. A test binary
  // cannot go on without it: a failed load prints why (and how to fetch
  // the library) and aborts.
  static const GgmlOracle& Shared();
  ~GgmlOracle();
  GgmlOracle(const GgmlOracle&) = delete;
  GgmlOracle& operator=(const GgmlOracle&) = delete;

  struct TypeInfo {
    std::string name;  // ggml_type_name: "q4_0", "iq2_xxs", ...
    int64_t block_elems = 0;
    int64_t block_bytes = 0;
    bool quantized = false;
    bool has_to_float = false;  // F32 and the integer types have none
  };
  // Nullopt for ids out of range and the removed ones (block size 0).
  std::optional<TypeInfo> Type(int type) const;

  // ggml's to_float of whole blocks: data.size() must be a multiple of the
  // type's block bytes. Errors: INVALID_ARGUMENT otherwise, or for a type
  // without to_float.
  absl::StatusOr<std::vector<float>> ToFloat(
      int type, absl::Span<const uint8_t> data) const;

  // ggml_quantize_chunk of x.size() / n_per_row rows, with an importance
  // matrix of n_per_row weights when `imatrix` is not empty (the IQ1/IQ2
  // types need one). Errors: INVALID_ARGUMENT for sizes that do not fit.
  absl::StatusOr<std::vector<uint8_t>> Quantize(
      int type, absl::Span<const float> x, int64_t n_per_row,
      absl::Span<const float> imatrix = {}) const;

  // Where the library was loaded from.
  const std::string& dir() const { return dir_; }

 private:
  struct Api;
  GgmlOracle(std::string dir, void* handle, std::unique_ptr<Api> api);

  std::string dir_;
  void* handle_;
  std::unique_ptr<Api> api_;
};

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_ORACLE_GGML_ORACLE_H_
