#include "tests/oracle/llama_quantizer.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/oracle/ggml_oracle.h"
#include "tests/oracle/llama_test_model.h"
#include "tests/support/quantize.h"

namespace tensormorph::testing {
namespace {

// llama.h's struct llama_model_imatrix_data: the imatrix is an array of
// these, ended by a null name.
struct LlamaImatrixData {
  const char* name;
  const float* data;
  size_t size;
};

// llama.h's struct llama_model_tensor_override: tt_overrides points to an
// array of these, ended by a null pattern. The pinned version's
// llama-quant.cpp compiles each pattern with std::regex and matches it with
// std::regex_search (an older llama.cpp took a std::vector of {std::string,
// ggml_type} here instead; the compare oracle test checks that every
// override took effect, so a layout that is not this one fails there).
struct LlamaTensorOverride {
  const char* pattern;
  int32_t type;  // enum ggml_type
};
static_assert(sizeof(LlamaTensorOverride) == 16);

// llama.h's struct llama_model_quantize_params, as the pinned version lays
// it out (Load checks it against llama_model_quantize_default_params).
struct LlamaQuantizeParams {
  int32_t nthread;
  int32_t ftype;                 // enum llama_ftype
  int32_t output_tensor_type;    // enum ggml_type
  int32_t token_embedding_type;  // enum ggml_type
  bool allow_requantize;
  bool quantize_output_tensor;
  bool only_copy;
  bool pure;
  bool keep_split;
  bool dry_run;
  const LlamaImatrixData* imatrix;
  const void* kv_overrides;
  const void* tt_overrides;
  const int32_t* prune_layers;
};
static_assert(sizeof(LlamaQuantizeParams) == 56);

constexpr int kLlamaFtypeQ8_0 = 7;
constexpr int kGgmlTypeCount = GgmlOracle::kTypeCount;

// The first "libllama.*.so" in `dir` (the npm package versions the name).
std::string FindLibllama(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("libllama.", 0) == 0 && name.size() > 3 &&
        name.compare(name.size() - 3, 3, ".so") == 0) {
      return e.path().string();
    }
  }
  return dir + "/libllama.so";
}

std::string PackageVersion(const std::string& dir) {
  std::ifstream in(dir + "/../../package.json");
  const std::string json((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  const std::string key = "\"version\": \"";
  const size_t at = json.find(key);
  if (at == std::string::npos) return "unknown";
  const size_t end = json.find('"', at + key.size());
  return json.substr(at + key.size(), end - at - key.size());
}

uint64_t Fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

// An exclusive flock on `path` for the life of the object.
class FileLock {
 public:
  explicit FileLock(const std::string& path)
      : fd_(open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644)) {
    if (fd_ >= 0) flock(fd_, LOCK_EX);
  }
  ~FileLock() {
    if (fd_ >= 0) close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

}  // namespace

const std::vector<LlamaFtype>& LlamaFtypes() {
  // enum llama_ftype of the pinned llama.h (NVFP4, 39, it refuses as
  // "invalid output file type"). Q2_K_S, IQ3_XXS and the IQ1/IQ2
  // ftypes need an importance matrix (tensor_requires_imatrix), and so do
  // the IQ3_XS mix's IQ3_XXS tensors.
  static const auto* ftypes = new std::vector<LlamaFtype>{
      {1, "F16"},           {2, "Q4_0"},
      {3, "Q4_1"},          {7, "Q8_0"},
      {8, "Q5_0"},          {9, "Q5_1"},
      {10, "Q2_K"},         {11, "Q3_K_S"},
      {12, "Q3_K_M"},       {13, "Q3_K_L"},
      {14, "Q4_K_S"},       {15, "Q4_K_M"},
      {16, "Q5_K_S"},       {17, "Q5_K_M"},
      {18, "Q6_K"},         {19, "IQ2_XXS", true},
      {20, "IQ2_XS", true}, {21, "Q2_K_S", true},
      {22, "IQ3_XS", true}, {23, "IQ3_XXS", true},
      {24, "IQ1_S", true},  {25, "IQ4_NL"},
      {26, "IQ3_S"},        {27, "IQ3_M"},
      {28, "IQ2_S", true},  {29, "IQ2_M", true},
      {30, "IQ4_XS"},       {31, "IQ1_M", true},
      {32, "BF16"},         {36, "TQ1_0"},
      {37, "TQ2_0"},        {38, "MXFP4_MOE"},
      {40, "Q1_0"},         {41, "Q2_0"},
  };
  return *ftypes;
}

struct LlamaQuantizer::Api {
  void* handle = nullptr;
  void (*backend_init)() = nullptr;
  LlamaQuantizeParams (*default_params)() = nullptr;
  uint32_t (*quantize)(const char* in, const char* out,
                       const LlamaQuantizeParams* params) = nullptr;
};

absl::StatusOr<std::unique_ptr<LlamaQuantizer>> LlamaQuantizer::Load() {
  return Load(GgmlOracle::DefaultDir());
}

absl::StatusOr<std::unique_ptr<LlamaQuantizer>> LlamaQuantizer::Load(
    const std::string& dir) {
  // libllama finds libggml.so and libggml-base.so beside it by its RUNPATH
  // ($ORIGIN); loading ggml-base first and globally keeps one copy of it
  // when GgmlOracle has loaded it too.
  dlopen((dir + "/libggml-base.so").c_str(), RTLD_NOW | RTLD_GLOBAL);
  const std::string path = FindLibllama(dir);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load llama.cpp's libllama, the test oracle (", dlerror(),
        "): run tests/oracle/fetch_llama_cpp.sh BUILD_DIR, as tests/run.sh "
        "does, or set TENSORMORPH_LLAMA_CPP_DIR"));
  }
  auto api = std::make_unique<Api>();
  api->handle = handle;
  auto sym = [&](const char* name, auto** fn) {
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(
        dlsym(handle, name));
    return *fn != nullptr;
  };
  if (!sym("llama_backend_init", &api->backend_init) ||
      !sym("llama_model_quantize_default_params", &api->default_params) ||
      !sym("llama_model_quantize", &api->quantize)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " lacks a llama entry point this oracle uses"));
  }
  // The documented defaults read back where the declared layout puts them:
  // a llama.h that moved a field fails here, not as a wrong quantization.
  const LlamaQuantizeParams d = api->default_params();
  if (d.nthread != 0 || d.ftype != kLlamaFtypeQ8_0 ||
      d.output_tensor_type != kGgmlTypeCount ||
      d.token_embedding_type != kGgmlTypeCount || d.allow_requantize ||
      !d.quantize_output_tensor || d.only_copy || d.pure || d.keep_split ||
      d.dry_run || d.imatrix != nullptr || d.kv_overrides != nullptr ||
      d.tt_overrides != nullptr || d.prune_layers != nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: llama_model_quantize_params does not have the declared layout "
        "(defaults read nthread %d, ftype %d, output type %d)",
        path, d.nthread, d.ftype, d.output_tensor_type));
  }
  static std::once_flag init;
  std::call_once(init, api->backend_init);
  return std::unique_ptr<LlamaQuantizer>(
      new LlamaQuantizer(std::move(api), PackageVersion(dir)));
}

LlamaQuantizer::LlamaQuantizer(std::unique_ptr<Api> api, std::string version)
    : api_(std::move(api)), package_version_(std::move(version)) {}

// The library stays loaded, as ggml's does (GgmlOracle).
LlamaQuantizer::~LlamaQuantizer() = default;

absl::Status LlamaQuantizer::Quantize(
    const std::string& in, const std::string& out, int ftype,
    const Imatrix* imatrix, int threads,
    const std::vector<LlamaTensorType>& tensor_types) const {
  LlamaQuantizeParams params = api_->default_params();
  params.nthread = threads;
  params.ftype = ftype;
  std::vector<LlamaImatrixData> entries;
  if (imatrix != nullptr) {
    for (const auto& [name, weights] : *imatrix) {
      entries.push_back({name.c_str(), weights.data(), weights.size()});
    }
    entries.push_back({nullptr, nullptr, 0});
    params.imatrix = entries.data();
  }
  std::vector<LlamaTensorOverride> overrides;
  if (!tensor_types.empty()) {
    for (const LlamaTensorType& t : tensor_types) {
      overrides.push_back({t.pattern.c_str(), t.type});
    }
    overrides.push_back({nullptr, 0});
    params.tt_overrides = overrides.data();
  }
  if (api_->quantize(in.c_str(), out.c_str(), &params) != 0) {
    return absl::InternalError(
        absl::StrCat("llama_model_quantize into ftype ", ftype,
                     " failed (llama.cpp's log above says why)"));
  }
  return absl::OkStatus();
}

Imatrix TestModelImatrix() {
  Imatrix m;
  for (const LlamaTestWeight& w : LlamaTestWeights()) {
    if (w.shape.size() != 2) continue;
    const int64_t cols = w.shape[1];
    // Mean squared activations: around 1, the outlier channels' far larger.
    std::vector<float> a = Gaussian(cols, 4242 + cols, 0.3f);
    for (float& x : a) x = 1.0f + x * x;
    for (int64_t c : LlamaTestOutlierColumns()) a[c] = 64.0f;
    m[w.gguf_name] = std::move(a);
  }
  return m;
}

absl::StatusOr<LlamaQuantized> QuantizeTestModelCached(
    const LlamaQuantizer& quantizer, const LlamaFtype& ftype,
    const std::string& cache_root) {
  namespace fs = std::filesystem;
  // The model's hash, with its importance matrix's: computed once.
  static const uint64_t h = [] {
    const std::string gguf_bytes = BuildLlamaTestGguf();
    uint64_t h =
        Fnv1a(0xcbf29ce484222325ULL, gguf_bytes.data(), gguf_bytes.size());
    for (const auto& [name, w] : TestModelImatrix()) {
      h = Fnv1a(h, name.data(), name.size());
      h = Fnv1a(h, w.data(), w.size() * sizeof(float));
    }
    return h;
  }();
  const std::string root =
      cache_root.empty() ? TENSORMORPH_LLAMA_ORACLE_CACHE_DIR : cache_root;
  const std::string dir =
      absl::StrFormat("%s/%s-%016x", root, quantizer.package_version(), h);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create ", dir, ": ", ec.message()));
  }
  LlamaQuantized out{.hf_dir = dir + "/hf",
                     .f32_gguf = dir + "/model-f32.gguf",
                     .gguf = absl::StrCat(dir, "/model-", ftype.name, ".gguf")};
  {
    FileLock lock(dir + "/model.lock");
    if (!fs::exists(out.f32_gguf)) {
      const std::string tmp = dir + "/model.tmp";
      auto written = WriteLlamaTestModel(tmp);
      if (!written.ok()) return written.status();
      fs::remove_all(out.hf_dir, ec);
      fs::rename(written->hf_dir, out.hf_dir, ec);
      if (!ec) fs::rename(written->gguf, out.f32_gguf, ec);
      if (ec) {
        return absl::InternalError(
            absl::StrCat("cannot move the test model into ", dir));
      }
    }
  }
  FileLock lock(absl::StrCat(dir, "/", ftype.name, ".lock"));
  if (fs::exists(out.gguf)) {
    out.from_cache = true;
    return out;
  }
  const Imatrix imatrix = TestModelImatrix();
  const std::string tmp = out.gguf + ".tmp";
  absl::Status s = quantizer.Quantize(out.f32_gguf, tmp, ftype.id,
                                      ftype.needs_imatrix ? &imatrix : nullptr);
  if (!s.ok()) return s;
  fs::rename(tmp, out.gguf, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ",
                                            out.gguf, ": ", ec.message()));
  }
  return out;
}

}  // namespace tensormorph::testing
