#include "server/compare_summary.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/compare/bits_per_weight.h"
#include "core/compare/dominance.h"
#include "core/compare/gguf_layout.h"
#include "core/compare/knapsack.h"
#include "core/compare/llama_ftype.h"
#include "core/compare/llama_mix.h"
#include "core/diff/weighted_error.h"
#include "core/format/stored_tensor.h"
#include "core/util/status_macros.h"

namespace tensormorph {
namespace {

// Every quantization holds the row's tensor and decodes it: the rows all
// quantizations are compared (and mixed) over.
bool Shared(const v1::CompareRow& row) {
  for (const v1::CompareCell& c : row.cells()) {
    if (!c.present() || !c.undecodable().empty()) return false;
  }
  return true;
}

bool Weighted(const v1::CompareCell& c) {
  return c.imatrix_use() == v1::IMATRIX_USE_WEIGHTED;
}

// How errors are summed: with an imatrix (weighted), the factor an error it
// does not weigh is multiplied by (UnweightedErrorFactor); without, 1.
struct Footing {
  bool weighted = false;
  double unweighted_factor = 1;
};

// The error dominance and the mix minimise: with an imatrix the cell's
// weighted error where the imatrix weighs it, and where it does not
// (llama.cpp quantizes such a tensor without weights) its unweighted one
// times the matrix's mean importance, so that both kinds of term scale
// with the matrix alike and no choice depends on its overall scale;
// without, the unweighted one.
double Cost(const v1::CompareCell& c, const Footing& f) {
  if (!f.weighted) return c.sum_squared_error();
  return Weighted(c) ? c.weighted_error()
                     : f.unweighted_factor * c.sum_squared_error();
}

// SQNR averaged with element counts as weights, over the tensors whose
// SQNR is finite (an exact tensor, a norm kept in F32, adds no error and
// would make any mean infinite); infinite when every tensor is exact.
struct SqnrMean {
  double weighted = 0;
  int64_t elements = 0;
  bool any = false;
  void Add(double sqnr_db, int64_t count) {
    any = true;
    if (!std::isfinite(sqnr_db)) return;
    weighted += sqnr_db * static_cast<double>(count);
    elements += count;
  }
  double Value() const {
    if (elements > 0) return weighted / static_cast<double>(elements);
    return any ? std::numeric_limits<double>::infinity() : 0;
  }
};

void FillTotals(const v1::CompareQuantizationsRequest& req, const Footing& f,
                const std::vector<const v1::CompareRow*>& shared,
                const std::vector<v1::CompareRow>& rows,
                v1::CompareSummary* out) {
  const int n = req.quantizations_size();
  std::vector<SizeError> points(n);
  for (int q = 0; q < n; ++q) {
    v1::CompareTotals* t = out->add_totals();
    t->set_checkpoint(req.quantizations(q));
    SqnrMean sqnr;
    WeightedSums sums;
    for (const v1::CompareRow* row : shared) {
      const v1::CompareCell& c = row->cells(q);
      t->set_tensors(t->tensors() + 1);
      t->set_elements(t->elements() + row->count());
      t->set_bytes(t->bytes() + c.bytes());
      t->set_sum_squared_error(t->sum_squared_error() + c.sum_squared_error());
      sqnr.Add(c.sqnr_db(), row->count());
      if (!f.weighted) continue;
      t->set_weighted_error(t->weighted_error() + Cost(c, f));
      if (Weighted(c)) {
        t->set_tensors_weighted(t->tensors_weighted() + 1);
        sums.sum_w_sq_err += c.weighted_error();
        sums.sum_w_xx += c.weighted_source_energy();
      }
    }
    if (t->tensors_weighted() > 0) {
      t->set_weighted_sqnr_db(WeightedSqnrDb(sums));
    }
    for (const v1::CompareRow& row : rows) {
      if (row.cells(q).present() && !Shared(row)) {
        t->set_tensors_not_shared(t->tensors_not_shared() + 1);
      }
    }
    t->set_bits_per_weight(BitsPerWeight(t->bytes(), t->elements()));
    t->set_sqnr_db(sqnr.Value());
    points[q] = {t->bytes(),
                 f.weighted ? t->weighted_error() : t->sum_squared_error()};
  }
  const std::vector<std::vector<int>> by = DominatedBy(points);
  for (int q = 0; q < n; ++q) {
    for (int d : by[q]) out->mutable_totals(q)->add_dominated_by(d);
  }
}

void FillLayers(int n, const Footing& f,
                const std::vector<const v1::CompareRow*>& shared,
                v1::CompareSummary* out) {
  // Per layer the points dominance is on, and the unweighted errors.
  std::map<std::string, std::pair<std::vector<SizeError>, std::vector<double>>>
      layers;
  for (const v1::CompareRow* row : shared) {
    const std::string layer = LayerOf(row->reference_name());
    if (layer.empty()) continue;
    auto& [points, unweighted] = layers[layer];
    points.resize(n);
    unweighted.resize(n);
    for (int q = 0; q < n; ++q) {
      points[q].bytes += row->cells(q).bytes();
      points[q].error += Cost(row->cells(q), f);
      unweighted[q] += row->cells(q).sum_squared_error();
    }
  }
  for (const auto& [name, layer] : layers) {
    const auto& [points, unweighted] = layer;
    v1::CompareLayer* l = out->add_layers();
    l->set_layer(name);
    const std::vector<std::vector<int>> by = DominatedBy(points);
    for (int q = 0; q < n; ++q) {
      l->add_bytes(points[q].bytes);
      l->add_sum_squared_error(unweighted[q]);
      if (f.weighted) l->add_weighted_error(points[q].error);
      if (!by[q].empty()) l->add_dominated(q);
    }
  }
}

int64_t BudgetBytes(const v1::CompareQuantizationsRequest& req,
                    int64_t elements) {
  if (req.has_budget_bytes()) return req.budget_bytes();
  const double bytes = std::floor(req.budget_bits_per_weight() *
                                  static_cast<double>(elements) / 8.0);
  return bytes >= 9.2e18 ? std::numeric_limits<int64_t>::max()
                         : static_cast<int64_t>(bytes);
}

// The llama.cpp side of the mix: overrides relative to the base, its ftype
// and the predicted file size, when every quantization is a one-file GGUF.
void FillLlamaMix(
    const std::vector<std::shared_ptr<const Checkpoint>>& quantizations,
    const std::vector<const v1::CompareRow*>& shared, v1::CompareMix* mix) {
  std::vector<GgufLayout> layouts;
  for (const auto& c : quantizations) {
    std::optional<GgufLayout> layout = GgufLayoutOf(*c);
    if (!layout.has_value()) return;
    layouts.push_back(*std::move(layout));
  }
  const GgufLayout& base = layouts[mix->base()];
  mix->set_base_ftype(base.file_type);
  mix->set_base_ftype_name(LlamaFtypeName(base.file_type));
  absl::flat_hash_map<std::string, int64_t> chosen_bytes;
  for (size_t k = 0; k < shared.size(); ++k) {
    const v1::CompareChoice& choice = mix->choices(static_cast<int>(k));
    const v1::CompareCell& cell = shared[k]->cells(choice.quantization());
    chosen_bytes[cell.name()] = cell.bytes();
    const LogicalTensor* t =
        quantizations[choice.quantization()]->FindTensor(cell.name());
    // llama.cpp quantizes tensors of two or more dimensions only.
    if (t != nullptr && t->shape.size() >= 2) {
      mix->add_tensor_type_overrides(
          LlamaTensorTypeOverride(cell.name(), cell.scheme()));
    }
  }
  std::vector<int64_t> bytes;
  for (const auto& [name, n] : base.tensors) {
    auto it = chosen_bytes.find(name);
    bytes.push_back(it != chosen_bytes.end() ? it->second : n);
  }
  absl::StatusOr<int64_t> size =
      PredictGgufFileSize(base.data_offset, base.alignment, bytes);
  mix->set_predicted_file_size(size.ok() ? *size : 0);
}

// The bytes of the smallest mix: each item's smallest option (saturating,
// so a sum past int64 reads as no budget being enough).
int64_t LeastBytes(const std::vector<std::vector<KnapsackOption>>& items) {
  int64_t least = 0;
  for (const std::vector<KnapsackOption>& options : items) {
    int64_t smallest = std::numeric_limits<int64_t>::max();
    for (const KnapsackOption& o : options) {
      smallest = std::min(smallest, o.bytes);
    }
    if (smallest > std::numeric_limits<int64_t>::max() - least) {
      return std::numeric_limits<int64_t>::max();
    }
    least += smallest;
  }
  return least;
}

absl::Status FillMix(
    const v1::CompareQuantizationsRequest& req, const Footing& f,
    const std::vector<std::shared_ptr<const Checkpoint>>& quantizations,
    const std::vector<const v1::CompareRow*>& shared, v1::CompareMix* mix) {
  const int n = req.quantizations_size();
  std::vector<std::vector<KnapsackOption>> items;
  int64_t elements = 0;
  for (const v1::CompareRow* row : shared) {
    std::vector<KnapsackOption>& options = items.emplace_back();
    for (int q = 0; q < n; ++q) {
      options.push_back({row->cells(q).bytes(), Cost(row->cells(q), f)});
    }
    elements += row->count();
  }
  const int64_t budget = BudgetBytes(req, elements);
  mix->set_budget_bytes(budget);
  mix->set_base(req.base());
  mix->set_base_ftype(-1);
  // A budget below the smallest mix is the user's to raise: said here, so
  // that the rows and totals measured stand (the knapsack would refuse it).
  const int64_t least = LeastBytes(items);
  if (least > budget) {
    mix->set_budget_unmet(true);
    mix->set_least_bytes(least);
    mix->set_least_bits_per_weight(BitsPerWeight(least, elements));
    return absl::OkStatus();
  }
  TM_ASSIGN_OR_RETURN(KnapsackChoice choice,
                      SolveMultipleChoiceKnapsack(items, budget));
  mix->set_bytes(choice.bytes);
  mix->set_bits_per_weight(BitsPerWeight(choice.bytes, elements));
  if (f.weighted) mix->set_weighted_error(choice.error);
  SqnrMean sqnr;
  double unweighted = 0;  // in row order, as the knapsack adds
  for (size_t k = 0; k < shared.size(); ++k) {
    const int q = choice.option[k];
    const v1::CompareCell& cell = shared[k]->cells(q);
    unweighted += cell.sum_squared_error();
    v1::CompareChoice* c = mix->add_choices();
    c->set_reference_name(shared[k]->reference_name());
    c->set_name(cell.name());
    c->set_quantization(q);
    c->set_scheme(cell.scheme());
    c->set_ggml_type(-1);
    if (const LogicalTensor* t = quantizations[q]->FindTensor(cell.name());
        t != nullptr && quantizations[q]->format() == CheckpointFormat::kGguf &&
        t->encoding->parts().size() == 1) {
      c->set_ggml_type(
          static_cast<int32_t>(t->encoding->parts()[0]->ggml_type_id));
    }
    sqnr.Add(cell.sqnr_db(), shared[k]->count());
  }
  mix->set_sqnr_db(sqnr.Value());
  mix->set_sum_squared_error(f.weighted ? unweighted : choice.error);
  FillLlamaMix(quantizations, shared, mix);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::CompareSummary> SummarizeComparison(
    const v1::CompareQuantizationsRequest& request,
    const std::vector<v1::CompareRow>& rows,
    const std::vector<std::shared_ptr<const Checkpoint>>& quantizations,
    const ImportanceMatrix* imatrix) {
  v1::CompareSummary out;
  const bool weighted = imatrix != nullptr;
  const Footing footing = {weighted,
                           weighted ? UnweightedErrorFactor(*imatrix) : 1.0};
  out.set_weighted(weighted);
  if (weighted) out.set_unweighted_factor(footing.unweighted_factor);
  std::vector<const v1::CompareRow*> shared;
  for (const v1::CompareRow& row : rows) {
    if (!Shared(row)) {
      out.add_not_shared(row.reference_name());
      for (int q = 0; q < row.cells_size(); ++q) {
        if (!row.cells(q).undecodable().empty()) {
          out.add_undecodable(
              absl::StrCat(row.reference_name(), " in [", q, "]"));
        }
      }
      continue;
    }
    shared.push_back(&row);
    if (weighted &&
        !std::all_of(row.cells().begin(), row.cells().end(), Weighted)) {
      out.add_unweighted(row.reference_name());
    }
  }
  FillTotals(request, footing, shared, rows, &out);
  FillLayers(request.quantizations_size(), footing, shared, &out);
  if (request.budget_case() !=
      v1::CompareQuantizationsRequest::BUDGET_NOT_SET) {
    TM_RETURN_IF_ERROR(
        FillMix(request, footing, quantizations, shared, out.mutable_mix()));
    *out.mutable_mix()->mutable_left_out() = out.not_shared();
  }
  return out;
}

}  // namespace tensormorph
