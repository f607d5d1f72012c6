#include "core/diff/pairing.h"

#include <fnmatch.h>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
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

absl::StatusOr<Pairing> PairTensors(const Checkpoint& quant,
                                    const Checkpoint& ref,
                                    const std::string& glob) {
  Pairing out;
  const bool translate = quant.format() == CheckpointFormat::kGguf &&
                         ref.format() != CheckpointFormat::kGguf;
  std::string arch;
  int64_t heads = 0, kv_heads = 0;
  if (translate) {
    // Escaped: spelled like the keys it builds, and shown in the reply.
    // The copy made at open, not the GGUF value: that views the mapping,
    // and a file shrunk since would fault here, outside any guard.
    for (const MetadataEntry& e : quant.metadata()) {
      if (e.key == "general.architecture" && e.type == "string") {
        arch = EscapeUtf8(e.raw);
      }
    }
    if (const GgufKv* h =
            FindKv(quant, absl::StrCat(arch, ".attention.head_count"))) {
      heads = static_cast<int64_t>(h->AsUnsigned().value_or(0));
    }
    kv_heads = heads;
    if (const GgufKv* h =
            FindKv(quant, absl::StrCat(arch, ".attention.head_count_kv"))) {
      kv_heads = static_cast<int64_t>(h->AsUnsigned().value_or(heads));
    }
    out.method = absl::StrCat("GGUF -> Hugging Face names (",
                              arch.empty() ? "?" : arch, ")");
  } else {
    out.method = "by name";
  }
  // RoPE permutation: llama.cpp's LlamaModel (llama, mistral) permutes.
  const bool permute = translate && (arch == "llama" || arch == "mistral");
  absl::flat_hash_set<std::string> matched_ref;
  for (const LogicalTensor& q : quant.tensors()) {
    if (!glob.empty() && ::fnmatch(glob.c_str(), q.name.c_str(), 0) != 0)
      continue;
    std::string ref_name = q.name;
    if (translate) {
      auto hf = GgufToHfName(q.name);
      ref_name = hf.value_or(q.name);
    }
    const LogicalTensor* r = ref.FindTensor(ref_name);
    if (r == nullptr) {
      out.only_in_quant.push_back(q.name);
      continue;
    }
    matched_ref.insert(r->name);
    if (r->shape != q.shape) {
      out.shape_mismatches.push_back(
          absl::StrCat(q.name, ": [", absl::StrJoin(q.shape, ","), "] vs [",
                       absl::StrJoin(r->shape, ","), "]"));
      continue;
    }
    if (q.num_elements == 0) {
      // A zero dimension: nothing to compare (and no rows to permute).
      out.empty.push_back(q.name);
      continue;
    }
    TensorPair p{&q, r, {}};
    const bool is_q = absl::StrContains(q.name, ".attn_q.");
    const bool is_k = absl::StrContains(q.name, ".attn_k.");
    if (permute && (is_q || is_k) && q.shape.size() == 2) {
      const int64_t n = is_q ? heads : kv_heads;
      if (n <= 0 || q.shape[0] % n != 0 || (q.shape[0] / n) % 2 != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cannot undo the RoPE permutation of '", q.name, "': ", q.shape[0],
            " rows do not divide into ", n, " heads of even size (", arch,
            ".attention.head_count", is_k ? "_kv" : "", ")"));
      }
      p.row_map = LlamaRopeRowMap(q.shape[0], n);
    }
    out.pairs.push_back(std::move(p));
  }
  for (const LogicalTensor& r : ref.tensors()) {
    if (matched_ref.contains(r.name)) continue;
    if (!glob.empty() &&
        (translate || ::fnmatch(glob.c_str(), r.name.c_str(), 0) != 0)) {
      continue;
    }
    out.only_in_ref.push_back(r.name);
  }
  return out;
}

}  // namespace tensormorph
