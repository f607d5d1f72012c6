#include "core/compat.h"

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace tensormorph {
namespace {

constexpr char kLlamaCpp[] =
    "llama.cpp README 'Supported backends' and "
    "ggml/src/ggml-{cpu,cuda,metal,vulkan} "
    "type traits (github.com/ggml-org/llama.cpp)";
constexpr char kVllm[] =
    "vLLM docs, features/quantization/supported_hardware (docs.vllm.ai, "
    "v0.9-v0.14)";
constexpr char kVllmFp8[] =
    "vLLM docs, features/quantization/fp8 (docs.vllm.ai)";
constexpr char kVllmModelOpt[] =
    "vLLM model_executor/layers/quantization/modelopt.py (QUANT_ALGOS, "
    "github.com/vllm-project/vllm)";
constexpr char kSglang[] =
    "SGLang docs, advanced_features/quantization, Platform Compatibility "
    "(docs.sglang.io)";
constexpr char kTrtllm[] =
    "TensorRT-LLM docs, reference/support-matrix, quantization section "
    "(nvidia.github.io/TensorRT-LLM)";
constexpr char kMlx[] =
    "mlx.core.quantize / mlx.nn.QuantizedLinear docs and mlx-lm "
    "(github.com/ml-explore/mlx, ml-explore/mlx-lm)";
constexpr char kVllmHqq[] =
    "vLLM model_executor/layers/quantization/hqq_marlin.py (HQQMarlinConfig, "
    "github.com/vllm-project/vllm)";
constexpr char kBnb[] =
    "bitsandbytes docs, installation and supported backends "
    "(huggingface.co/docs/bitsandbytes)";

struct Row {
  const char* match;  // convention, or "ggml:<scheme>"
  const char* backend;
  const char* status;
  const char* notes;
  const char* source;
};

// Rows are matched by convention (and for ggml by scheme).
constexpr Row kRows[] = {
    // ggml block types: llama.cpp runs every type it can write on CPU; the
    // GPU backends cover the legacy and K-quants and IQ4.
    {"ggml:Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS "
     "MXFP4",
     "llama.cpp CPU", "supported", "", kLlamaCpp},
    {"ggml:Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS "
     "MXFP4",
     "llama.cpp CUDA", "supported", "", kLlamaCpp},
    {"ggml:Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS "
     "MXFP4",
     "llama.cpp Metal", "supported", "", kLlamaCpp},
    {"ggml:Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS "
     "MXFP4",
     "llama.cpp Vulkan", "supported", "", kLlamaCpp},
    {"ggml:TQ1_0 TQ2_0 NVFP4", "llama.cpp CPU", "supported", "", kLlamaCpp},
    {"ggml:Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K", "vLLM",
     "supported", "GGUF loader; Volta to Hopper and AMD GPUs", kVllm},
    {"gptq", "vLLM", "supported",
     "Marlin kernels on Ampere+ (4/8-bit, group -1/32/64/128, act-order); GPTQ "
     "kernels "
     "from Volta",
     kVllm},
    {"gptq_v2", "vLLM", "supported", "GPTQModel format", kVllm},
    {"gptq", "TensorRT-LLM", "supported", "INT4 weight-only (W4A16 GPTQ)",
     kTrtllm},
    {"awq-gemm", "vLLM", "supported", "Turing+; Marlin on Ampere+", kVllm},
    {"awq-gemm", "TensorRT-LLM", "supported", "INT4 AWQ weight-only", kTrtllm},
    {"awq-gemv", "vLLM", "not supported", "vLLM loads the GEMM layout", kVllm},
    {"compressed-tensors", "vLLM", "supported",
     "INT8 W8A8 Turing+, FP8 W8A8 Ada/Hopper (W8A16 Marlin on Turing/Ampere), "
     "W4A16 "
     "through Marlin",
     kVllm},
    {"fp8", "vLLM", "supported",
     "Ada/Hopper/Blackwell W8A8; block-wise 128x128 (DeepSeek-V3) on CUDA; "
     "Turing/Ampere "
     "as W8A16",
     kVllmFp8},
    {"fp8", "TensorRT-LLM", "supported", "FP8 on Ada/Hopper/Blackwell",
     kTrtllm},
    {"modelopt", "vLLM", "supported",
     "FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, NVFP4 (W4A4 on Blackwell, "
     "W4A16 through Marlin before), MXFP8, MIXED_PRECISION; NVFP4_AWQ and "
     "W4A8_AWQ are not in its list",
     kVllmModelOpt},
    {"modelopt", "TensorRT-LLM", "supported",
     "ModelOpt is its quantizer: FP8 on Ada/Hopper/Blackwell, NVFP4 on "
     "Blackwell, W4A8_AWQ (INT4 weights, FP8 GEMM: W4A8_AWQ_LinearMethod)",
     kTrtllm},
    {"modelopt", "SGLang", "supported",
     "modelopt_fp8 and modelopt_fp4 (NVFP4 on Blackwell), NVIDIA GPUs only; "
     "W4A8_AWQ not verified",
     kSglang},
    {"mxfp4 (gpt-oss)", "vLLM", "supported",
     "gpt-oss models on Hopper/Blackwell", kVllm},
    {"mxfp4 (gpt-oss)", "llama.cpp CPU", "supported",
     "after conversion to GGUF MXFP4", kLlamaCpp},
    {"bitsandbytes", "vLLM", "supported", "NVIDIA GPUs Volta to Hopper", kVllm},
    {"bitsandbytes", "llama.cpp CPU", "not supported", "convert to GGUF first",
     kLlamaCpp},
    {"bitsandbytes", "bitsandbytes", "supported",
     "NF4/FP4 and LLM.int8 (row layout) on CUDA, ROCm, XPU and CPU", kBnb},
    {"mlx", "MLX (Apple silicon)", "supported",
     "mlx-lm: affine 2-8 bit, mxfp4, mxfp8, nvfp4; Metal kernels", kMlx},
    {"mlx", "llama.cpp CPU", "not supported", "convert to GGUF first",
     kLlamaCpp},
    // HQQMarlinConfig asserts nbits == 4 and group_size == 64 and repacks
    // the axis-1 layout for Marlin; any other layer fails to load.
    {"hqq", "vLLM", "supported",
     "HQQ Marlin: 4-bit, groups of 64, axis 1 only; Ampere+ (compute "
     "capability 8.0), computes in float16",
     kVllmHqq},
};

constexpr const char* kBackends[] = {
    "llama.cpp CPU", "llama.cpp CUDA", "llama.cpp Metal", "llama.cpp Vulkan",
    "vLLM",          "TensorRT-LLM",   "SGLang",          "MLX (Apple silicon)",
    "bitsandbytes"};

bool Matches(const Row& r, const EncodingInfo& info) {
  const absl::string_view m = r.match;
  if (absl::StartsWith(m, "ggml:")) {
    if (info.convention != "ggml") return false;
    for (absl::string_view s : absl::StrSplit(m.substr(5), ' ')) {
      if (s == info.scheme) return true;
    }
    return false;
  }
  return m == info.convention;
}

}  // namespace

std::vector<BackendSupport> BackendSupportFor(const EncodingInfo& info) {
  std::vector<BackendSupport> out;
  if (!info.quantized) return out;
  for (const char* backend : kBackends) {
    BackendSupport b{backend, "not known", "", ""};
    for (const Row& r : kRows) {
      if (backend == absl::string_view(r.backend) && Matches(r, info)) {
        b = {backend, r.status, r.notes, r.source};
        break;
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace tensormorph
