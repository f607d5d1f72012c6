// ComputeStats, GetHeatmap and GetArchitecture: the views people look at.
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/architecture.h"
#include "core/error_grid.h"
#include "core/heatmap.h"
#include "core/request_limits.h"
#include "core/stats.h"
#include "core/util/error_reason.h"
#include "proto/status_mapping.h"
#include "server/call_log.h"
#include "server/imatrix_lookup.h"
#include "server/proto_convert.h"
#include "server/reference_lookup.h"
#include "server/service.h"

namespace tensormorph {
namespace {

// The tensor and, when the request names a reference checkpoint, its
// reference tensor and how their rows line up (LookUpReference: the diff's
// rules, so that a GGUF finds its Hugging Face source here as the diff does).
struct Resolved {
  std::shared_ptr<const Checkpoint> ckpt, ref_ckpt;
  const LogicalTensor* tensor = nullptr;
  const LogicalTensor* ref = nullptr;
  RowMap ref_rows;

  // After the last read: ABORTED when a file read changed meanwhile
  // (Checkpoint::CheckUnchanged), so a reply never mixes old and new bytes.
  // Before the first read (Resolve found the files unchanged).
  absl::Status CheckNoWriters() const {
    TM_RETURN_IF_ERROR(ckpt->CheckNoWriters(*tensor));
    return ref == nullptr ? absl::OkStatus() : ref_ckpt->CheckNoWriters(*ref);
  }
  absl::Status CheckUnchanged() const {
    TM_RETURN_IF_ERROR(ckpt->CheckUnchanged(*tensor));
    return ref == nullptr ? absl::OkStatus() : ref_ckpt->CheckUnchanged(*ref);
  }
};

absl::StatusOr<Resolved> Resolve(ServiceState& state,
                                 const std::string& checkpoint,
                                 const std::string& tensor,
                                 const std::string& reference,
                                 const std::string& reference_tensor) {
  Resolved r;
  auto ckpt = state.registry.Acquire(checkpoint);
  if (!ckpt.ok()) return ckpt.status();
  r.ckpt = *ckpt;
  auto t = FindTensorOrError(*r.ckpt, checkpoint, tensor);
  if (!t.ok()) return t.status();
  r.tensor = *t;
  auto ref = LookUpReference(state.registry, *r.ckpt, *r.tensor, reference,
                             reference_tensor);
  if (!ref.ok()) return ref.status();
  r.ref_ckpt = std::move(ref->ckpt);
  r.ref = ref->tensor;
  r.ref_rows = std::move(ref->rows);
  return r;
}

// Error mode's grid for a heatmap request: the one kept for (tensor,
// reference, view) while both checkpoints' files are unchanged; else one
// computed now and kept, when it fits the budget and the request is
//  - a quantized tensor's first look (the whole view): that look inspects
//    every element anyway, and the grid costs about what it does;
//  - a plain float's first zoom (a region): its first look is a cheaper
//    pass (3x a value heatmap, the grid 7x: tests/bench/stats_bench
//    BM_HeatmapErrorVsValue), worth paying once the user zooms;
// else nullptr, and the heatmap decodes its region itself. Later zooms and
// pans reduce from the grid.
absl::StatusOr<std::shared_ptr<const ErrorGrid>> ErrorGridFor(
    ServiceState& state, const Resolved& r, const HeatmapOptions& o) {
  if (o.mode != HeatmapMode::kErrorSteps || r.ref == nullptr ||
      r.tensor->num_elements == 0 || !state.error_grids.Fits(0)) {
    return nullptr;
  }
  auto view = ViewOf(*r.tensor, o.leading);
  if (!view.ok()) return nullptr;  // ComputeHeatmap says why
  std::string key;
  for (const std::string* part :
       {&r.ckpt->path(), &r.tensor->name, &r.ref_ckpt->path(), &r.ref->name}) {
    absl::StrAppend(&key, part->size(), ":", *part, ";");
  }
  absl::StrAppend(&key, view->base);
  KeptInputs now = InputsOf(*r.ckpt, *r.ref_ckpt);
  if (auto found = state.error_grids.Find(key, now); found.ok())
    return found->value;
  const bool whole =
      o.row_begin == 0 && o.row_end == 0 && o.col_begin == 0 && o.col_end == 0;
  const bool plain = r.tensor->encoding->PlainFloatSteps() != nullptr;
  if (whole == plain || !state.error_grids.Fits(ErrorGridBytes(*r.tensor)))
    return nullptr;
  ErrorGridOptions go;
  go.leading = o.leading;
  go.ref_rows = o.ref_rows;
  go.cancelled = o.cancelled;
  TM_ASSIGN_OR_RETURN(ErrorGrid grid, ComputeErrorGrid(*r.tensor, *r.ref, go));
  // Kept only when no file changed while it was computed: a grid never
  // holds old and new bytes.
  TM_RETURN_IF_ERROR(r.CheckUnchanged());
  auto kept = std::make_shared<const ErrorGrid>(std::move(grid));
  state.error_grids.Keep(key, std::move(now), kept, kept->bytes());
  return kept;
}

absl::StatusOr<HeatmapMode> HeatmapModeOf(v1::HeatmapMode mode) {
  switch (mode) {
    case v1::HEATMAP_MODE_ABSMAX:
      return HeatmapMode::kAbsmax;
    case v1::HEATMAP_MODE_ERROR:
      return HeatmapMode::kErrorSteps;
    case v1::HEATMAP_MODE_GROUP:
      return HeatmapMode::kGroup;
    case v1::HEATMAP_MODE_ZEROS:
      return HeatmapMode::kZeros;
    case v1::HEATMAP_MODE_SQ_ERROR:
      return HeatmapMode::kSqError;
    case v1::HEATMAP_MODE_UNSPECIFIED:
    case v1::HEATMAP_MODE_MEAN:
      return HeatmapMode::kMean;
    default:
      return WithReason(absl::InvalidArgumentError(absl::StrCat(
                            "heatmap mode ", static_cast<int>(mode),
                            " is not one of HeatmapMode's values (0..6)")),
                        ErrorReason::kEnumValueInvalid, {{"field", "mode"}});
  }
}

// The importance weights GetHeatmapRequest.imatrix asks for, of the
// resolved tensor: `matrix` keeps the file's values that `weights` points
// into. None without an imatrix, or without a reference (the heatmap
// refuses SQ_ERROR without one, and no file need be read for that).
// Refuses rather than draw unweighted a map that was asked weighted (the
// proto's refusals). SQ_ERROR keeps no grid (ErrorGridFor serves ERROR
// mode only): each request decodes its region.
absl::Status WeighHeatmap(ServiceState& state, const v1::GetHeatmapRequest& req,
                          const Resolved& r,
                          std::shared_ptr<const ImportanceMatrix>* matrix,
                          TensorWeights* weights) {
  if (req.imatrix().empty()) return absl::OkStatus();
  if (req.mode() != v1::HEATMAP_MODE_SQ_ERROR) {
    const std::string& name = v1::HeatmapMode_Name(req.mode());
    return RequestFieldError(
        "imatrix",
        absl::StrCat(
            "an importance matrix weighs HEATMAP_MODE_SQ_ERROR's "
            "squared errors, not mode ",
            name.empty() ? absl::StrCat(static_cast<int>(req.mode())) : name));
  }
  if (r.ref == nullptr) return absl::OkStatus();
  TM_ASSIGN_OR_RETURN(*matrix, OpenImportanceMatrix(state.registry.sandbox(),
                                                    req.imatrix(), "imatrix"));
  const ImatrixMatch m =
      MatchImatrix(matrix->get(), r.tensor->name, r.tensor->shape);
  if (m.use != ImatrixUse::kWeighted) {
    return WithReason(
        absl::FailedPreconditionError(absl::StrCat(
            "importance matrix '", req.imatrix(), "' cannot weigh tensor '",
            r.tensor->name, "': ", m.note)),
        ErrorReason::kImatrixNotApplicable,
        {{"path", req.imatrix()},
         {"tensor", r.tensor->name},
         {"use", m.use == ImatrixUse::kMissing ? "MISSING" : "MISMATCH"}});
  }
  *weights = m.weights;
  return absl::OkStatus();
}

void FillHeatmap(const LogicalTensor& t, const Heatmap& h, bool weighted,
                 v1::GetHeatmapResponse* resp) {
  resp->set_tensor(t.name);
  for (int64_t d : t.shape) resp->add_shape(d);
  FillEncoding(t.encoding->info(), resp->mutable_encoding());
  resp->set_rows(h.rows);
  resp->set_cols(h.cols);
  resp->set_width(h.width);
  resp->set_height(h.height);
  // A page's heatmap is a million cells: sized once and copied whole,
  // not grown an element at a time.
  resp->mutable_row_edges()->Assign(h.row_edges.begin(), h.row_edges.end());
  resp->mutable_col_edges()->Assign(h.col_edges.begin(), h.col_edges.end());
  resp->mutable_values()->Assign(h.values.begin(), h.values.end());
  resp->mutable_groups()->Assign(h.groups.begin(), h.groups.end());
  resp->set_min(h.min);
  resp->set_max(h.max);
  resp->mutable_pruned()->Assign(h.pruned.begin(), h.pruned.end());
  resp->mutable_cell_element()->Assign(h.cell_element.begin(),
                                       h.cell_element.end());
  if (weighted) resp->set_imatrix_use(v1::IMATRIX_USE_WEIGHTED);
}

void FillNode(const ArchNode& n, v1::ArchNode* out, int64_t* boundaries) {
  out->set_name(n.name);
  out->set_path(n.path);
  out->set_params(n.params);
  out->set_bytes(n.bytes);
  out->set_tensors(n.tensors);
  out->set_scheme(n.scheme);
  for (const auto& [k, v] : n.scheme_params)
    (*out->mutable_scheme_params())[k] = v;
  out->set_boundary(n.boundary);
  *boundaries += n.boundary;
  for (const ArchNode& c : n.children)
    FillNode(c, out->add_children(), boundaries);
}

}  // namespace

grpc::ServerUnaryReactor* TensormorphService::ComputeStats(
    grpc::CallbackServerContext* ctx, const v1::ComputeStatsRequest* req,
    v1::ComputeStatsResponse* resp) {
  return RunOnPool(
      *state_, ctx,
      CallLog("ComputeStats", ctx, req->checkpoint(), req->tensor()), resp,
      [this, ctx, req, resp]() -> absl::Status {
        auto r = Resolve(*state_, req->checkpoint(), req->tensor(),
                         req->reference(), req->reference_tensor());
        if (!r.ok()) return r.status();
        StatsOptions o;
        o.ref_rows = std::move(r->ref_rows);
        if (req->bins() != 0) {  // 0 = the default
          TM_RETURN_IF_ERROR(CheckLimit("bins", req->bins(), "max_bins",
                                        state_->limits.max_bins));
          o.bins = req->bins();
        }
        if (req->has_range_min() != req->has_range_max()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "the histogram range needs both range_min and range_max; only ",
              req->has_range_min() ? "range_min" : "range_max", " was set"));
        }
        if (req->has_range_min()) {
          if (!(req->range_min() <= req->range_max())) {
            return absl::InvalidArgumentError(
                absl::StrCat("histogram range_min ", req->range_min(),
                             " must not exceed range_max ", req->range_max()));
          }
          o.range_min = req->range_min();
          o.range_max = req->range_max();
        }
        if (req->has_group()) o.group = req->group();
        // A caller that went away (a page left its distribution view; the
        // gateway cancels for an HTTP client that disconnected) frees its
        // worker at the next chunk.
        o.cancelled = [ctx] { return ctx->IsCancelled(); };
        TM_RETURN_IF_ERROR(r->CheckNoWriters());
        auto st = tensormorph::ComputeStats(*r->tensor, r->ref, o);
        if (!st.ok()) return st.status();
        TM_RETURN_IF_ERROR(r->CheckUnchanged());
        resp->set_tensor(r->tensor->name);
        for (int64_t d : r->tensor->shape) resp->add_shape(d);
        FillEncoding(r->tensor->encoding->info(), resp->mutable_encoding());
        resp->set_count(st->count);
        resp->set_min(st->min);
        resp->set_max(st->max);
        resp->set_mean(st->mean);
        resp->set_std(st->std);
        resp->set_absmax(st->absmax);
        resp->set_nan_count(st->nan_count);
        resp->set_inf_count(st->inf_count);
        resp->set_zeros(st->zeros);
        resp->set_sparsity(st->sparsity);
        resp->set_has_reference(st->has_reference);
        resp->set_pruned_zeros(st->pruned_zeros);
        resp->set_induced_zeros(st->induced_zeros);
        resp->set_hist_min(st->hist_min);
        resp->set_hist_max(st->hist_max);
        for (int64_t c : st->histogram) resp->add_histogram(c);
        for (int64_t c : st->reference_histogram)
          resp->add_reference_histogram(c);
        resp->set_has_levels(st->has_levels);
        resp->set_code_bits(st->code_bits);
        for (int64_t c : st->code_histogram) resp->add_code_histogram(c);
        resp->set_levels_used(st->levels_used);
        resp->set_saturated_low(st->at_lowest_level);
        resp->set_saturated_high(st->at_highest_level);
        resp->set_groups(st->groups);
        resp->set_groups_saturated(st->groups_at_end_level);
        resp->set_codes_signed(st->codes_signed);
        for (double l : st->levels) resp->add_levels(l);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* TensormorphService::GetHeatmap(
    grpc::CallbackServerContext* ctx, const v1::GetHeatmapRequest* req,
    v1::GetHeatmapResponse* resp) {
  return RunOnPool(
      *state_, ctx,
      CallLog("GetHeatmap", ctx, req->checkpoint(), req->tensor()), resp,
      [this, ctx, req, resp]() -> absl::Status {
        auto r = Resolve(*state_, req->checkpoint(), req->tensor(),
                         req->reference(), req->reference_tensor());
        if (!r.ok()) return r.status();
        HeatmapOptions o;
        o.ref_rows = std::move(r->ref_rows);
        const ServiceLimits& limits = state_->limits;
        TM_RETURN_IF_ERROR(CheckLimit("width", req->width(), "max_heatmap_side",
                                      limits.max_heatmap_side));
        TM_RETURN_IF_ERROR(CheckLimit("height", req->height(),
                                      "max_heatmap_side",
                                      limits.max_heatmap_side));
        o.width = req->width() > 0 ? req->width() : 256;  // 0 = the default
        o.height = req->height() > 0 ? req->height() : 256;
        TM_RETURN_IF_ERROR(CheckLimit(
            absl::StrCat("width * height (", o.width, " x ", o.height, ") ="),
            int64_t{o.width} * o.height, "max_heatmap_cells",
            limits.max_heatmap_cells));
        o.leading.assign(req->leading().begin(), req->leading().end());
        TM_ASSIGN_OR_RETURN(o.mode, HeatmapModeOf(req->mode()));
        // Checked against the view in core, which knows its rows and cols.
        o.row_begin = req->row_begin();
        o.row_end = req->row_end();
        o.col_begin = req->col_begin();
        o.col_end = req->col_end();
        o.locate = req->locate();
        // A caller that went away (a page left its view; the gateway cancels
        // for an HTTP client that disconnected) frees its worker at the
        // next batch of rows.
        o.cancelled = [ctx] { return ctx->IsCancelled(); };
        TM_RETURN_IF_ERROR(r->CheckNoWriters());
        TM_ASSIGN_OR_RETURN(std::shared_ptr<const ErrorGrid> grid,
                            ErrorGridFor(*state_, *r, o));
        o.errors = grid.get();
        std::shared_ptr<const ImportanceMatrix> matrix;
        TensorWeights weights;
        TM_RETURN_IF_ERROR(WeighHeatmap(*state_, *req, *r, &matrix, &weights));
        if (matrix != nullptr) o.weights = &weights;
        auto h = ComputeHeatmap(*r->tensor, r->ref, o);
        if (!h.ok()) return h.status();
        TM_RETURN_IF_ERROR(r->CheckUnchanged());
        FillHeatmap(*r->tensor, *h, o.weights != nullptr, resp);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* TensormorphService::GetArchitecture(
    grpc::CallbackServerContext* ctx, const v1::GetArchitectureRequest* req,
    v1::GetArchitectureResponse* resp) {
  return RunOnPool(
      *state_, ctx, CallLog("GetArchitecture", ctx, req->checkpoint(), ""),
      resp, [this, req, resp]() -> absl::Status {
        auto ckpt = state_->registry.Acquire(req->checkpoint());
        if (!ckpt.ok()) return ckpt.status();
        int64_t boundaries = 0;
        FillNode(BuildArchitecture(**ckpt), resp->mutable_root(), &boundaries);
        resp->set_boundaries(boundaries);
        return absl::OkStatus();
      });
}

}  // namespace tensormorph
