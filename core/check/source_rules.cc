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
    // beyond it is what the bound says is wrong.
    if (!info.quantized) return std::nullopt;
    return std::string("max_excess_steps>0");
  }
  if (metric != "sqnr_db" || !info.quantized) return std::nullopt;
  // An integer grid's floor: 12 dB under what rounding a Gaussian to that
  // many bits gives. Codebooks, lattices and float codes have no such
  // figure; for them the floor is 0 dB: an error larger than the weights
  // themselves, worse than storing zeros.
  if (!IntegerGrid(info)) return std::string("sqnr_db<0");
  return absl::StrFormat("sqnr_db<%.2f", 6.02 * info.bits + 1.76 - 12);
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
      // Codes chosen on purpose: what lies beyond the bound is
      // information, reported as such, clipping included: GPTQ takes a
      // group's range from weights its error feedback has already moved,
      // AWQ and the IQ grids search for a clip. Their SQNR judges them.
      const bool chosen = gate.metric == "max_excess_steps" &&
                          !d->nearest_codes &&
                          d->not_nearest + d->clipped_beyond_bound > 0;
      // A zero scale stored for a non-zero group by a quantizer that never
      // does so: its elements are out of every step metric, so it is judged
      // here.
      const bool zeroed = gate.metric == "max_excess_steps" &&
                          d->zeroed_groups > 0 && !d->zeroes_groups;
      if (!Trips(gate, *d) && !chosen && !zeroed) continue;
      Finding f;
      f.rule = rule;
      f.severity =
          chosen && !zeroed ? Severity::kInfo : FindCheckRule(rule)->severity;
      // Below 0 dB the decoded tensor is further from its source than zeros
      // are: no quantizer writes that (codes or scales from elsewhere).
      if (gate.metric == "sqnr_db" && d->sqnr_db < 0) {
        f.severity = Severity::kError;
      }
      f.tensor = p.quant->name;
      f.file = FileOfTensor(ckpt, *p.quant);
      const std::string scheme =
          absl::StrCat(info.scheme, " (", info.convention, ")");
      if (gate.metric == "max_excess_steps") {
        f.expected = absl::StrFormat(
            "every element within its format's rounding bound (%.4g steps: "
            "%s) of its source '%s' (%s; gate %s)",
            d->bound_steps, d->bound_family, d->ref_name, scheme, text);
        // The element furthest beyond its bound, not the one furthest
        // from its source: designed clipping may err more, and is no cause.
        std::string where;
        const WorstElement* w =
            d->max_excess_element ? &*d->max_excess_element
                                  : (d->worst.empty() ? nullptr : &d->worst[0]);
        if (w != nullptr) {
          where = absl::StrFormat(
              " at flat index %d (source %g, decoded %g, %.4g steps, group "
              "%d)",
              w->flat_index, w->source, w->decoded, w->err_steps,
              w->quant.group);
          f.worst_group = w->quant.group;
        }
        if (zeroed && d->max_excess_steps == 0) {
          where = absl::StrFormat(" (a zero scale stored for group %d)",
                                  d->first_zeroed_group);
          f.worst_group = d->first_zeroed_group;
        }
        f.actual = absl::StrFormat(
            "max_err_steps = %.4g; max_excess_steps = %.4g%s; %d of %d "
            "elements not nearest, %d clipped beyond the bound (%d outside "
            "their group's range), %d zeroed groups",
            d->max_err_steps, d->max_excess_steps, where, d->not_nearest,
            d->count, d->clipped_beyond_bound, d->clipped, d->zeroed_groups);
        f.count =
            std::max<int64_t>(1, d->clipped_beyond_bound +
                                     (d->nearest_codes ? d->not_nearest : 0));
        f.hint = f.severity == Severity::kInfo
                     ? "this quantizer chooses codes other than the nearest "
                       "on purpose (error feedback): information; judge it by "
                       "clipping and SQNR"
                     : "more than rounding: a scale too small (clipping) or "
                       "stored as zero, a zero-point off by one, or codes "
                       "from another tensor; "
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
