// The quantization configs beside a safetensors checkpoint, parsed once into
// typed structs: the edge between untrusted JSON and the convention
// resolvers. Nothing after ParseQuantConfig touches raw JSON.
//
// Rules, for every key that affects decoding:
//  - a wrong type or an out-of-range value is DATA_LOSS naming the file
//    ("config.json", "quantize_config.json", "quant_config.json"), the key
//    path ("quantization_config.config_groups.group_0.weights.num_bits") and
//    expected vs actual ("expected an integer in [1, 32], got string \"a\"");
//  - an absent key takes the default documented on its field;
//  - null counts as absent only where the reference implementation declares
//    the field Optional (noted per field); elsewhere null is a wrong type;
//  - unknown keys are ignored;
//  - floats are never accepted for integers (4.0 is refused, not truncated).
// A recognised method or variant Tensormorph does not decode is
// UNIMPLEMENTED naming it. An unknown `quant_method` string is no error: the
// conventions are recognised from the stored tensors, with a note saying so.
// Never throws.
#ifndef TENSORMORPH_CORE_QUANT_CONVENTIONS_QUANT_CONFIG_H_
#define TENSORMORPH_CORE_QUANT_CONVENTIONS_QUANT_CONFIG_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/quant/convention_resolver.h"
#include "core/quant/conventions/hqq_config.h"
#include "core/quant/conventions/mlx_config.h"
#include "core/quant/conventions/modelopt_config.h"
#include "core/quant/resolve_problem.h"

namespace tensormorph::conventions {

enum class QuantMethod {
  kNone,     // no config names one: recognise conventions from the tensors
  kUnknown,  // a quant_method string Tensormorph does not know: likewise
  kGptq,
  kAwq,
  kCompressedTensors,
  kFp8,  // "fp8", "fbgemm_fp8"
  kMxfp4,
  kBitsandbytes,
  kMlx,       // config.json "quantization" (mlx-lm), no quant_method
  kModelOpt,  // "modelopt", or hf_quant_config.json
  kHqq,
};

// AutoGPTQ / GPTQModel (quantize_config.json or quantization_config).
struct GptqConfig {
  int bits = 4;              // "bits": integer in [1, 32]; 2, 3, 4, 8 decode
  int64_t group_size = 128;  // "group_size": >= 1, or -1 = one group per row
  bool v1 = true;            // "checkpoint_format": "gptq" (zeros stored - 1)
                             // or "gptq_v2"
  bool sym = true;           // "sym"
  bool desc_act = false;     // "desc_act"
};

// AutoAWQ (quant_config.json or quantization_config).
struct AwqConfig {
  int bits = 4;              // "bits", else "w_bit": only 4 decodes
  int64_t group_size = 128;  // "group_size", else "q_group_size": >= 1
  bool gemv = false;         // "version": "gemm" or "gemv", any case
  bool zero_point = true;    // "zero_point"
};

// compressed-tensors (llm-compressor), one config group's weights.
enum class CtFormat {
  kIntQuantized,
  kNaiveQuantized,
  kFloatQuantized,
  kPackQuantized,
  kNvfp4PackQuantized,
  kMxfp4PackQuantized,
  kOther,  // named in `format_name`; UNIMPLEMENTED when a tensor uses it
};
enum class CtType { kInt, kFloat };
enum class CtStrategy { kTensor, kChannel, kGroup, kBlock, kOther };
struct CtScheme {
  std::string group;  // the config_groups key, for messages
  CtFormat format = CtFormat::kIntQuantized;
  std::string format_name;     // "format" of the group, else of the config;
                               // default "int-quantized"; null = absent
  int bits = 8;                // "num_bits": integer in [1, 32]; 2..8 decode
  CtType type = CtType::kInt;  // "type": "int" or "float"
  bool symmetric = true;       // "symmetric"
  // "strategy" (null = absent): "tensor", "channel", "group" (also
  // "tensor_group"), "block"; when absent, inferred as compressed-tensors
  // does: group with a group_size >= 1, channel with -1, block with a
  // block_structure, else tensor.
  CtStrategy strategy = CtStrategy::kTensor;
  std::string strategy_name;
  std::optional<int64_t> group_size;  // "group_size" (null = absent): >= 1
                                      // or -1
  // "block_structure" (null = absent): [rows, cols], each >= 1, or the
  // older string spelling "RxC".
  std::optional<std::array<int64_t, 2>> block;
  std::vector<std::string> targets;  // "targets": strings
};
struct CompressedTensorsConfig {
  // Groups whose "weights" is absent or null quantize no weights and are
  // left out.
  std::vector<CtScheme> schemes;
  // "ignore" (null = absent): strings, module patterns as `targets` takes
  // them (targets.h), of modules left unquantized.
  std::vector<std::string> ignore;
  // "quantization_status" (null = absent, ""): "compressed" when the
  // weights are stored in `format`, "frozen" / "initialized" /
  // "calibration" when they were saved uncompressed (dense floats).
  std::string quantization_status;
};

// FP8 outside compressed-tensors.
struct Fp8Config {
  // "weight_block_size" (null = absent): [rows, cols], each >= 1.
  std::optional<std::array<int64_t, 2>> weight_block_size;
};

struct QuantConfig {
  QuantMethod method = QuantMethod::kNone;
  std::string method_name;  // lower case, as named ("" when none)
  GptqConfig gptq;
  AwqConfig awq;
  CompressedTensorsConfig compressed_tensors;
  Fp8Config fp8;
  MlxConfig mlx;
  ModelOptConfig modelopt;
  HqqConfig hqq;
  // What a user should know about how the configs were read (e.g. an
  // unknown quant_method); surfaced with the detected conventions.
  std::vector<std::string> notes;
};

// Picks the config that names the method (config.json's MLX
// "quantization" first, as mlx-lm reads it, or a quantization_config with
// MLX's keys and no quant_method; else config.json's quantization_config,
// else hf_quant_config.json (ModelOpt), else quantize_config.json with
// default method "gptq", else quant_config.json with default "awq") and
// parses it.
// A config.json whose top level is not an object, or whose
// quantization_config is present, not null and not an object, is DATA_LOSS;
// so is a quantize_config.json / quant_config.json that is not an object.
// Errors: DATA_LOSS as above; UNIMPLEMENTED for a recognised but unsupported
// method or variant.
absl::StatusOr<QuantConfig> ParseQuantConfig(const QuantConfigs& files);
// As ParseQuantConfig, for `tensormorph check`: every key problem (a wrong
// type, width or range, an unsupported value, a missing required key) is
// appended to `problems` as a "config-key" ResolveProblem naming the file,
// the key path and expected vs actual, and parsing goes on with the key's
// default (a refused quantization_config reads as none). Errors: none from
// the keys; those of a failure that is not a key's.
absl::StatusOr<QuantConfig> ParseQuantConfigLenient(
    const QuantConfigs& files, std::vector<ResolveProblem>* problems);

// The quant state bitsandbytes stores as JSON text in a U8 tensor.
struct BnbQuantState {
  std::vector<int64_t> shape;      // "shape": non-empty, each >= 1
  int64_t blocksize = 64;          // "blocksize": >= 1
  int64_t nested_blocksize = 256;  // "nested_blocksize": >= 1
  float nested_offset = 0;         // "nested_offset": a finite number
};
// `what` names the tensor holding the text, as messages print it.
// Errors: DATA_LOSS naming `what`, the key and expected vs actual.
absl::StatusOr<BnbQuantState> ParseBnbQuantState(absl::string_view text,
                                                 absl::string_view what);

}  // namespace tensormorph::conventions

#endif  // TENSORMORPH_CORE_QUANT_CONVENTIONS_QUANT_CONFIG_H_
