#include "tests/oracle/ggml_oracle.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tensormorph::testing {
namespace {

// ggml.h's struct ggml_type_traits, as the pinned version lays it out.
struct GgmlTypeTraits {
  const char* type_name;
  int64_t blck_size;
  int64_t blck_size_interleave;
  size_t type_size;
  bool is_quantized;
  void (*to_float)(const void* x, float* y, int64_t k);
  void (*from_float_ref)(const float* x, void* y, int64_t k);
};

}  // namespace

struct GgmlOracle::Api {
  const GgmlTypeTraits* (*get_type_traits)(int type) = nullptr;
  void (*quantize_init)(int type) = nullptr;
  size_t (*quantize_chunk)(int type, const float* src, void* dst, int64_t start,
                           int64_t nrows, int64_t n_per_row,
                           const float* imatrix) = nullptr;
  mutable std::mutex init_mu;  // ggml_quantize_init builds shared tables
};

std::string GgmlOracle::DefaultDir() {
  if (const char* env = std::getenv("TENSORMORPH_LLAMA_CPP_DIR");
      env != nullptr && *env != '\0') {
    return env;
  }
  return TENSORMORPH_LLAMA_CPP_DEFAULT_DIR;
}

absl::StatusOr<std::unique_ptr<GgmlOracle>> GgmlOracle::Load(
    const std::string& dir) {
  const std::string path = dir + "/libggml-base.so";
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load llama.cpp's ggml, the test oracle (", dlerror(),
        "): run tests/oracle/fetch_llama_cpp.sh BUILD_DIR, as tests/run.sh "
        "does, or set TENSORMORPH_LLAMA_CPP_DIR"));
  }
  auto api = std::make_unique<Api>();
  auto sym = [&](const char* name, auto** fn) {
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(
        dlsym(handle, name));
    return *fn != nullptr;
  };
  if (!sym("ggml_get_type_traits", &api->get_type_traits) ||
      !sym("ggml_quantize_init", &api->quantize_init) ||
      !sym("ggml_quantize_chunk", &api->quantize_chunk)) {
    dlclose(handle);
    return absl::FailedPreconditionError(
        absl::StrCat(path, " lacks a ggml entry point this oracle uses"));
  }
  return std::unique_ptr<GgmlOracle>(
      new GgmlOracle(dir, handle, std::move(api)));
}

const GgmlOracle& GgmlOracle::Shared() {
  static const GgmlOracle* oracle = [] {
    absl::StatusOr<std::unique_ptr<GgmlOracle>> loaded = Load();
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", loaded.status().ToString().c_str());
      std::abort();
    }
    return loaded->release();
  }();
  return *oracle;
}

GgmlOracle::GgmlOracle(std::string dir, void* handle, std::unique_ptr<Api> api)
    : dir_(std::move(dir)), handle_(handle), api_(std::move(api)) {}

// The library stays loaded: ggml keeps tables and threads of its own that
// expect to outlive their users.
GgmlOracle::~GgmlOracle() = default;

std::optional<GgmlOracle::TypeInfo> GgmlOracle::Type(int type) const {
  if (type < 0 || type >= kTypeCount) return std::nullopt;
  const GgmlTypeTraits* t = api_->get_type_traits(type);
  if (t == nullptr || t->blck_size <= 0 || t->type_size == 0) {
    return std::nullopt;
  }
  return TypeInfo{.name = t->type_name,
                  .block_elems = t->blck_size,
                  .block_bytes = static_cast<int64_t>(t->type_size),
                  .quantized = t->is_quantized,
                  .has_to_float = t->to_float != nullptr};
}

absl::StatusOr<std::vector<float>> GgmlOracle::ToFloat(
    int type, absl::Span<const uint8_t> data) const {
  const std::optional<TypeInfo> info = Type(type);
  if (!info || !info->has_to_float) {
    return absl::InvalidArgumentError(
        absl::StrCat("ggml type ", type, " has no to_float"));
  }
  if (data.size() % info->block_bytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(data.size(), " bytes are not whole ", info->name,
                     " blocks of ", info->block_bytes));
  }
  std::vector<float> out(data.size() / info->block_bytes * info->block_elems);
  api_->get_type_traits(type)->to_float(data.data(), out.data(),
                                        static_cast<int64_t>(out.size()));
  return out;
}

absl::StatusOr<std::vector<uint8_t>> GgmlOracle::Quantize(
    int type, absl::Span<const float> x, int64_t n_per_row,
    absl::Span<const float> imatrix) const {
  const std::optional<TypeInfo> info = Type(type);
  if (!info || !info->quantized) {
    return absl::InvalidArgumentError(
        absl::StrCat("ggml type ", type, " is not a quantized type"));
  }
  if (n_per_row <= 0 || n_per_row % info->block_elems != 0 ||
      x.size() % n_per_row != 0 ||
      (!imatrix.empty() && imatrix.size() != static_cast<size_t>(n_per_row))) {
    return absl::InvalidArgumentError(absl::StrCat(
        x.size(), " floats in rows of ", n_per_row, " do not fit ", info->name,
        " blocks of ", info->block_elems, " (imatrix: ", imatrix.size(), ")"));
  }
  {
    std::lock_guard<std::mutex> lock(api_->init_mu);
    api_->quantize_init(type);
  }
  const int64_t rows = static_cast<int64_t>(x.size()) / n_per_row;
  std::vector<uint8_t> out(rows * (n_per_row / info->block_elems) *
                           info->block_bytes);
  const size_t written =
      api_->quantize_chunk(type, x.data(), out.data(), 0, rows, n_per_row,
                           imatrix.empty() ? nullptr : imatrix.data());
  if (written != out.size()) {
    return absl::InternalError(absl::StrCat("ggml_quantize_chunk wrote ",
                                            written, " bytes of ", out.size()));
  }
  return out;
}

}  // namespace tensormorph::testing
