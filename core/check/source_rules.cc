#include "core/check/source_rules.h"

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/check/rules.h"
#include "core/check/value_scan.h"
#include "core/diff/gate.h"
#include "core/diff/pairing.h"
#include "core/diff/tensor_diff.h"
#include "core/util/status_macros.h"

namespace tensormorph {
namespace {

bool IsGgmlLegacy(absl::string_view scheme) {
  return scheme == "Q4_0" || scheme == "Q4_1" || scheme == "Q5_0" ||
         scheme == "Q5_1" || scheme == "Q8_0";
}
bool IsGgmlKQuant(absl::string_view scheme) {
  return absl::StartsWith(scheme, "Q") && absl::EndsWith(scheme, "_K");
}

// An integer grid of 2 to 8 bits (codes * scale (- zero)), whatever its
// quantizer.
bool IntegerGrid(const EncodingInfo& info) {
  if (!info.quantized || info.bits < 2 || info.bits > 8) return false;
  if (info.convention == "ggml") {
    return IsGgmlLegacy(info.scheme) || IsGgmlKQuant(info.scheme);
  }
  return absl::StartsWith(info.scheme, "int");
}

}  // namespace

std::optional<std::string> DefaultSourceGate(const EncodingInfo& info,
                                             absl::string_view metric) {
  if (metric == "max_excess_steps") {
    // Every quantized encoding states its rounding bound (Encoding::Bound):
    // beyond it is what the bound says is wrong. Judged where the bound is
    // held to a real quantizer's output (ggml's own, the conventions'
    // integer grids); float-coded conventions (fp8, mxfp4, bitsandbytes)
    // are not yet.
    if (!info.quantized) return std::nullopt;
    if (info.convention != "ggml" && !IntegerGrid(info)) return std::nullopt;
    return std::string("max_excess_steps>0");
  }
  if (!IntegerGrid(info)) return std::nullopt;
  if (metric == "sqnr_db") {
    const double floor = 6.02 * info.bits + 1.76 - 12;
    return absl::StrFormat("sqnr_db<%.2f", floor);
  }
  return std::nullopt;
}

absl::Status CheckAgainstSource(const Checkpoint& ckpt,
                                const Checkpoint& source,
                                const std::atomic<bool>* cancelled,
                                const std::function<void(int64_t)>& on_elements,
                                std::vector<Finding>* out) {
  TM_ASSIGN_OR_RETURN(Pairing pairing, PairTensors(ckpt, source));
  TM_RETURN_IF_ERROR(
      CheckPairing(pairing, ckpt, source, "", ckpt.path(), source.path()));
  DiffOptions options;
  options.top_k = 1;
  options.worst_groups = 1;
  DiffWorkspace workspace;
  for (const TensorPair& p : pairing.pairs) {
    const EncodingInfo& info = p.quant->encoding->info();
    std::vector<std::pair<std::string, std::string>> gates;  // rule, gate
    for (const auto& [metric, rule] :
         {std::pair<const char*, const char*>{"max_excess_steps",
                                              "source-err-steps"},
          {"sqnr_db", "source-sqnr"}}) {
      if (auto g = DefaultSourceGate(info, metric)) gates.push_back({rule, *g});
    }
    if (gates.empty()) continue;
    absl::StatusOr<TensorDiff> d =
        DiffTensor(*p.quant, *p.ref, options, p.row_map, cancelled, on_elements,
                   &workspace);
    if (absl::IsUnimplemented(d.status())) continue;
    if (!d.ok()) return d.status();
    for (const auto& [rule, text] : gates) {
      TM_ASSIGN_OR_RETURN(DiffGate gate, ParseDiffGate(text));
      // Codes chosen on purpose (error feedback): what lies beyond the
      // bound is information, reported as such.
      const bool chosen = gate.metric == "max_excess_steps" &&
                          !d->nearest_codes &&
                          d->not_nearest + d->clipped_beyond_bound > 0;
      if (!Trips(gate, *d) && !chosen) continue;
      Finding f;
      f.rule = rule;
      f.severity = chosen ? Severity::kInfo : FindCheckRule(rule)->severity;
      f.tensor = p.quant->name;
      f.file = FileOfTensor(ckpt, *p.quant);
      const std::string scheme =
          absl::StrCat(info.scheme, " (", info.convention, ")");
      if (gate.metric == "max_excess_steps") {
        f.expected = absl::StrFormat(
            "every element within its format's rounding bound (%.4g steps: "
            "%s) of its source '%s' (%s; gate %s)",
            d->bound_steps, d->bound_family, d->ref_name, scheme, text);
        std::string where;
        if (!d->worst.empty()) {
          const WorstElement& w = d->worst[0];
          where = absl::StrFormat(
              " at flat index %d (source %g, decoded %g, group %d)",
              w.flat_index, w.source, w.decoded, w.quant.group);
          f.worst_group = w.quant.group;
        }
        f.actual = absl::StrFormat(
            "max_err_steps = %.4g%s; max_excess_steps = %.4g; %d of %d "
            "elements not nearest, %d clipped beyond the bound (%d outside "
            "their group's range), %d zeroed groups",
            d->max_err_steps, where, d->max_excess_steps, d->not_nearest,
            d->count, d->clipped_beyond_bound, d->clipped, d->zeroed_groups);
        f.count =
            std::max<int64_t>(1, d->clipped_beyond_bound +
                                     (d->nearest_codes ? d->not_nearest : 0));
        f.hint = chosen
                     ? "this quantizer chooses codes other than the nearest "
                       "on purpose (error feedback): information; judge it by "
                       "clipping and SQNR"
                     : "more than rounding: a scale too small (clipping), a "
                       "zero-point off by one, or codes from another tensor; "
                       "re-quantize, or diff it (tensormorph diff) to see the "
                       "worst groups";
      } else {
        f.expected = absl::StrCat("SQNR against '", d->ref_name, "' of a ",
                                  info.bits, "-bit grid (", scheme,
                                  ") at or above its floor (gate ", text, ")");
        f.actual = absl::StrFormat(
            "sqnr_db = %.2f (cosine %.6f, relative Frobenius error %.4g)",
            d->sqnr_db, d->cosine, d->rel_fro_err);
        f.hint =
            "far below what rounding to this many bits gives: a wrong scale "
            "or zero-point convention, or a source that is not this "
            "checkpoint's";
        if (!d->worst_groups.empty()) {
          f.worst_group = d->worst_groups[0].group;
        }
      }
      out->push_back(std::move(f));
    }
  }
  return absl::OkStatus();
}

}  // namespace tensormorph
