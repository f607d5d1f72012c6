#include "core/diff/reference_resolver.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/util/error_reason.h"
#include "core/util/utf8.h"

namespace tensormorph {
namespace {

struct NameRule {
  const char* gguf;
  const char* hf;
};
// llama.cpp's tensor names for llama-family models (gguf-py constants).
constexpr NameRule kGlobal[] = {
    {"token_embd", "model.embed_tokens"},
    {"output_norm", "model.norm"},
    {"output", "lm_head"},
};
constexpr NameRule kBlock[] = {
    {"attn_norm", "input_layernorm"},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
};

const GgufKv* FindKv(const Checkpoint& c, absl::string_view key) {
  for (const GgufKv& kv : c.gguf_metadata()) {
    if (kv.key == key) return &kv;
  }
  return nullptr;
}

std::string ShapeOf(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

std::optional<std::string> GgufToHfName(absl::string_view name) {
  std::vector<absl::string_view> parts = absl::StrSplit(name, '.');
  const absl::string_view suffix = parts.back();  // weight / bias
  if (parts.size() == 2) {
    for (const NameRule& r : kGlobal) {
      if (parts[0] == r.gguf) return absl::StrCat(r.hf, ".", suffix);
    }
    return std::nullopt;
  }
  int layer;
  if (parts.size() == 4 && parts[0] == "blk" &&
      absl::SimpleAtoi(parts[1], &layer)) {
    for (const NameRule& r : kBlock) {
      if (parts[2] == r.gguf) {
        return absl::StrCat("model.layers.", layer, ".", r.hf, ".", suffix);
      }
    }
  }
  return std::nullopt;
}

RowMap LlamaRopeRowMap(int64_t rows, int64_t n_heads) {
  RowMap map(static_cast<size_t>(rows));
  const int64_t hd = rows / n_heads;
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < hd / 2; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        map[h * hd + 2 * i + j] = h * hd + j * (hd / 2) + i;
      }
    }
  }
  return map;
}

ReferenceResolver::ReferenceResolver(const Checkpoint& quant,
                                     const Checkpoint& ref)
    : ref_(&ref) {
  translate_ = quant.format() == CheckpointFormat::kGguf &&
               ref.format() != CheckpointFormat::kGguf;
  if (!translate_) {
    method_ = "by name";
    return;
  }
  // Escaped: spelled like the keys it builds, and shown in the reply.
  // The copy made at open, not the GGUF value: that views the mapping, and a
  // file shrunk since would fault here, outside any guard.
  for (const MetadataEntry& e : quant.metadata()) {
    if (e.key == "general.architecture" && e.type == "string") {
      arch_ = EscapeUtf8(e.raw);
    }
  }
  if (const GgufKv* h =
          FindKv(quant, absl::StrCat(arch_, ".attention.head_count"))) {
    heads_ = static_cast<int64_t>(h->AsUnsigned().value_or(0));
  }
  kv_heads_ = heads_;
  if (const GgufKv* h =
          FindKv(quant, absl::StrCat(arch_, ".attention.head_count_kv"))) {
    kv_heads_ = static_cast<int64_t>(h->AsUnsigned().value_or(heads_));
  }
  method_ = absl::StrCat("GGUF -> Hugging Face names (",
                         arch_.empty() ? "?" : arch_, ")");
  // llama.cpp's LlamaModel (llama, mistral) permutes Q and K for RoPE.
  permute_ = arch_ == "llama" || arch_ == "mistral";
}

std::vector<std::string> ReferenceResolver::Candidates(
    absl::string_view quant_name) const {
  std::vector<std::string> out;
  if (translate_) {
    if (auto hf = GgufToHfName(quant_name)) out.push_back(*std::move(hf));
  }
  out.emplace_back(quant_name);
  return out;
}

const LogicalTensor* ReferenceResolver::Find(const LogicalTensor& quant) const {
  for (const std::string& name : Candidates(quant.name)) {
    if (const LogicalTensor* r = ref_->FindTensor(name)) return r;
  }
  return nullptr;
}

absl::StatusOr<RowMap> ReferenceResolver::RowMapFor(
    const LogicalTensor& quant, const LogicalTensor& ref) const {
  // Under its own GGUF name the reference is in GGUF row order already.
  if (!permute_ || ref.name == quant.name || quant.shape.size() != 2 ||
      quant.num_elements == 0) {
    return RowMap();
  }
  const bool is_q = absl::StrContains(quant.name, ".attn_q.");
  const bool is_k = absl::StrContains(quant.name, ".attn_k.");
  if (!is_q && !is_k) return RowMap();
  const int64_t n = is_q ? heads_ : kv_heads_;
  if (n <= 0 || quant.shape[0] % n != 0 || (quant.shape[0] / n) % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot undo the RoPE permutation of '", quant.name, "': ",
        quant.shape[0], " rows do not divide into ", n, " heads of even size (",
        arch_, ".attention.head_count", is_k ? "_kv" : "", ")"));
  }
  return LlamaRopeRowMap(quant.shape[0], n);
}

absl::StatusOr<ResolvedReference> ReferenceResolver::Resolve(
    const LogicalTensor& quant, absl::string_view ref_name,
    absl::string_view ref_label) const {
  ResolvedReference out;
  if (!ref_name.empty()) {
    out.tensor = ref_->FindTensor(ref_name);
    if (out.tensor == nullptr) {
      return WithReason(absl::NotFoundError(absl::StrCat(
                            "reference tensor '", ref_name, "' not found in '",
                            ref_label, "' (", ref_->tensors().size(),
                            " tensors; list them with `tensormorph ls`)")),
                        ErrorReason::kTensorNotFound,
                        {{"checkpoint", std::string(ref_label)},
                         {"tensor", std::string(ref_name)}});
    }
  } else {
    out.tensor = Find(quant);
    if (out.tensor == nullptr) {
      std::vector<std::string> tried;
      for (const std::string& c : Candidates(quant.name)) {
        tried.push_back(absl::StrCat("'", c, "'"));
      }
      return absl::NotFoundError(absl::StrCat(
          "no reference for '", quant.name, "' in '", ref_label, "': tried ",
          absl::StrJoin(tried, " and "), " (pairing ", method_,
          "); name it with reference_tensor (CLI: --ref-tensor NAME)"));
    }
  }
  if (out.tensor->shape != quant.shape) {
    return absl::InvalidArgumentError(
        absl::StrCat("the reference '", out.tensor->name, "' in '", ref_label,
                     "' has shape ", ShapeOf(out.tensor->shape), ", '",
                     quant.name, "' has shape ", ShapeOf(quant.shape)));
  }
  auto map = RowMapFor(quant, *out.tensor);
  if (!map.ok()) return map.status();
  out.row_map = *std::move(map);
  return out;
}

}  // namespace tensormorph
