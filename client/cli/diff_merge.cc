#include "client/cli/diff_merge.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/diff_parts_proto.h"
#include "core/diff_parts/partition.h"
#include "core/util/status_macros.h"

namespace tensormorph {
namespace {

using Names = google::protobuf::RepeatedPtrField<std::string>;

std::string PartText(const v1::DiffPartInfo& p) {
  return absl::StrCat(p.index(), "/", p.count());
}

bool Same(const Names& a, const Names& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

// The first pairing list of `b` that differs from `a`'s, or nullptr.
const char* FirstDifferentList(const v1::DiffSummary& a,
                               const v1::DiffSummary& b) {
  if (a.pairing() != b.pairing()) return "pairing";
  if (a.pairing_architecture() != b.pairing_architecture())
    return "pairing_architecture";
  if (!Same(a.only_in_checkpoint(), b.only_in_checkpoint()))
    return "only_in_checkpoint";
  if (!Same(a.only_in_reference(), b.only_in_reference()))
    return "only_in_reference";
  if (!Same(a.shape_mismatches(), b.shape_mismatches()))
    return "shape_mismatches";
  if (!Same(a.skipped_empty(), b.skipped_empty())) return "skipped_empty";
  return nullptr;
}

std::string RunText(const v1::DiffPartInfo& p) {
  return p.run_id().empty() ? "(none)" : absl::StrCat("'", p.run_id(), "'");
}

absl::Status Refusal(absl::string_view reason, std::string message) {
  absl::Status s = absl::InvalidArgumentError(std::move(message));
  s.SetPayload(kDiffMergeReasonPayload, absl::Cord(reason));
  return s;
}

// Part `p` on its own: closed by a summary with its part info, holding
// every report the summary counts, its numbers those of a part.
absl::Status CheckPart(const DiffPartEvents& p) {
  if (!p.summary.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        p.label,
        ": no summary line: was it written by `tensormorph diff --part "
        "i/N --json`? (a part cut short has none)"));
  }
  if (!p.summary->has_part()) {
    return absl::InvalidArgumentError(absl::StrCat(
        p.label,
        ": the summary has no part info: was it written by `tensormorph "
        "diff --part i/N --json`? (that of a whole diff has none)"));
  }
  // The numbers that size what follows, checked before they are used: a
  // part file is text anyone may have edited.
  const v1::DiffPartInfo& info = p.summary->part();
  if (info.count() < 1 || info.count() > kMaxDiffParts || info.index() < 0 ||
      info.index() >= info.count()) {
    return absl::InvalidArgumentError(absl::StrCat(
        p.label, ": part ", info.index(), "/", info.count(),
        " is no part: want 0 <= index < count <= ", kMaxDiffParts));
  }
  if (info.plan_tensors() < 0 || info.plan_source_bytes() < 0 ||
      info.part_source_bytes() < 0 || p.summary->tensors_compared() < 0 ||
      p.summary->bytes_read() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        p.label, ": a negative count or size in the summary of part ",
        PartText(info), " (edited?)"));
  }
  if (p.summary->tensors_compared() != static_cast<int64_t>(p.reports.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        p.label, ": the summary of part ", PartText(p.summary->part()),
        " says ", p.summary->tensors_compared(),
        " tensors compared but the file holds ", p.reports.size(),
        " tensor reports (truncated or edited?)"));
  }
  return absl::OkStatus();
}

// `parts` (each checked by CheckPart) are of one run: last night's part of
// the same plan has the same fingerprint and other numbers.
absl::Status CheckOneRun(const std::vector<DiffPartEvents>& parts) {
  const v1::DiffPartInfo& first = parts[0].summary->part();
  for (const DiffPartEvents& p : parts) {
    const v1::DiffPartInfo& info = p.summary->part();
    if (info.run_id() != first.run_id()) {
      return Refusal(
          kDiffPartsOfDifferentRuns,
          absl::StrCat("parts of different runs: ", parts[0].label, " is part ",
                       PartText(first), " of run ", RunText(first), ", ",
                       p.label, " part ", PartText(info), " of run ",
                       RunText(info),
                       " (merge the parts of one run; a part rerun takes its "
                       "run's --run-id)"));
    }
  }
  return absl::OkStatus();
}

// `parts` (each checked by CheckPart) are of one plan.
absl::Status CheckOnePlan(const std::vector<DiffPartEvents>& parts) {
  const v1::DiffPartInfo& first = parts[0].summary->part();
  for (const DiffPartEvents& p : parts) {
    const v1::DiffPartInfo& info = p.summary->part();
    if (info.count() != first.count() ||
        info.plan_fingerprint() != first.plan_fingerprint()) {
      return Refusal(
          kDiffPartsOfDifferentPlans,
          absl::StrCat(
              "parts of different plans: ", parts[0].label, " is part ",
              PartText(first), " of plan ", first.plan_fingerprint(), ", ",
              p.label, " part ", PartText(info), " of plan ",
              info.plan_fingerprint(),
              " (another checkpoint, filter, gate, --top or part count)"));
    }
  }
  return absl::OkStatus();
}

using PartsByIndex = std::map<int32_t, const DiffPartEvents*>;

// `parts` (of one plan of `count` parts) by index: each part once, none
// missing, else kDiffPartsIncomplete.
absl::StatusOr<PartsByIndex> EachPartOnce(
    const std::vector<DiffPartEvents>& parts, int32_t count) {
  PartsByIndex by_index;
  for (const DiffPartEvents& p : parts) {
    const v1::DiffPartInfo& info = p.summary->part();
    auto [it, added] = by_index.emplace(info.index(), &p);
    if (!added) {
      return Refusal(kDiffPartsIncomplete,
                     absl::StrCat("part ", PartText(info), " is in both ",
                                  it->second->label, " and ", p.label));
    }
  }
  if (by_index.size() != static_cast<size_t>(count)) {
    std::vector<std::string> missing, have;
    for (int32_t i = 0; i < count; ++i) {
      if (!by_index.contains(i)) missing.push_back(absl::StrCat(i, "/", count));
    }
    for (const auto& [i, p] : by_index) {
      have.push_back(absl::StrCat(i, "/", count, " (", p->label, ")"));
    }
    return Refusal(kDiffPartsIncomplete,
                   absl::StrCat("parts ", absl::StrJoin(missing, ", "),
                                " missing; have ", absl::StrJoin(have, ", ")));
  }
  return by_index;
}

// Every part saw the same pairing of the whole plan as part 0.
absl::Status CheckSamePairing(const PartsByIndex& by_index) {
  const DiffPartEvents& zero = *by_index.begin()->second;
  for (const auto& [i, p] : by_index) {
    if (const char* list = FirstDifferentList(*zero.summary, *p->summary)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the parts disagree on the pairing: ", list, " of ", p->label,
          " (part ", PartText(p->summary->part()), ") differs from that of ",
          zero.label, " (part ", PartText(zero.summary->part()), ")"));
    }
  }
  return absl::OkStatus();
}

// The fields of `s` that are the whole plan's in every part (DiffSummary.part
// lists them), and nothing else: every count and total of the merge is
// added up from all parts, part 0 included, so none may start from part 0's
// own (a copy of its summary counted its clipped elements twice).
v1::DiffSummary PlanListsOf(const v1::DiffSummary& s) {
  v1::DiffSummary plan;
  plan.set_pairing(s.pairing());
  plan.set_pairing_architecture(s.pairing_architecture());
  *plan.mutable_only_in_checkpoint() = s.only_in_checkpoint();
  *plan.mutable_only_in_reference() = s.only_in_reference();
  *plan.mutable_shape_mismatches() = s.shape_mismatches();
  *plan.mutable_skipped_empty() = s.skipped_empty();
  return plan;
}

// What the parts add up to, as they are taken in index order.
struct PartTotals {
  int64_t compared = 0, bytes = 0, part_bytes = 0;
  double wall = 0;
  std::map<std::string, const DiffPartEvents*> seen;  // tensor -> its part
  std::vector<DiffSummaryEntry> entries;
  std::vector<std::string> undecodable;
};

// Adds part `p` to `totals` and its reports and excess totals to `out`.
// Errors: sums that overflow, a tensor reported twice.
absl::Status AddPart(const DiffPartEvents* p, PartTotals* totals,
                     MergedDiff* out) {
  if (__builtin_add_overflow(totals->compared, p->summary->tensors_compared(),
                             &totals->compared) ||
      __builtin_add_overflow(totals->bytes, p->summary->bytes_read(),
                             &totals->bytes) ||
      __builtin_add_overflow(totals->part_bytes,
                             p->summary->part().part_source_bytes(),
                             &totals->part_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(p->label, ": tensors_compared or bytes overflow the sum"));
  }
  totals->wall = std::max(totals->wall, p->summary->wall_seconds());
  // The excess totals and the tensors no part could decode, as one run
  // gives them.
  const v1::DiffSummary& ps = *p->summary;
  out->summary.set_not_nearest(out->summary.not_nearest() + ps.not_nearest());
  out->summary.set_clipped(out->summary.clipped() + ps.clipped());
  out->summary.set_zeroed_groups(out->summary.zeroed_groups() +
                                 ps.zeroed_groups());
  out->summary.set_max_excess_steps(
      std::max(out->summary.max_excess_steps(), ps.max_excess_steps()));
  for (const std::string& u : ps.undecodable()) {
    totals->undecodable.push_back(u);
  }
  for (const v1::TensorDiffReport& r : p->reports) {
    auto [it, added] = totals->seen.emplace(r.name(), p);
    if (!added) {
      return absl::InvalidArgumentError(
          it->second == p
              ? absl::StrCat("tensor '", r.name(), "' is reported twice in ",
                             p->label)
              : absl::StrCat("tensor '", r.name(), "' is reported in both ",
                             it->second->label, " and ", p->label));
    }
    out->reports.push_back(r);
    totals->entries.push_back(EntryOf(r));
  }
  return absl::OkStatus();
}

}  // namespace

std::string DiffMergeReason(const absl::Status& status) {
  auto reason = status.GetPayload(kDiffMergeReasonPayload);
  return reason.has_value() ? std::string(*reason) : std::string();
}

absl::StatusOr<MergedDiff> MergeDiffParts(std::vector<DiffPartEvents> parts) {
  if (parts.empty()) {
    return absl::InvalidArgumentError("no parts to merge");
  }
  for (const DiffPartEvents& p : parts) TM_RETURN_IF_ERROR(CheckPart(p));
  TM_RETURN_IF_ERROR(CheckOneRun(parts));
  TM_RETURN_IF_ERROR(CheckOnePlan(parts));
  const v1::DiffPartInfo& first = parts[0].summary->part();
  TM_ASSIGN_OR_RETURN(const PartsByIndex by_index,
                      EachPartOnce(parts, first.count()));
  TM_RETURN_IF_ERROR(CheckSamePairing(by_index));
  MergedDiff out;
  out.summary = PlanListsOf(*by_index.begin()->second->summary);
  out.fail_on.assign(first.fail_on().begin(), first.fail_on().end());
  out.checkpoint = first.checkpoint();
  out.reference = first.reference();
  out.run_id = first.run_id();
  PartTotals totals;
  for (const auto& [i, p] : by_index) {
    TM_RETURN_IF_ERROR(AddPart(p, &totals, &out));
  }
  // A tensor that cannot be decoded is planned, not compared.
  const int64_t planned =
      totals.compared + static_cast<int64_t>(totals.undecodable.size());
  if (planned != first.plan_tensors()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the parts compared ", totals.compared,
                     " tensors but their plan has ", first.plan_tensors(),
                     totals.undecodable.empty()
                         ? ""
                         : absl::StrCat(" (", totals.undecodable.size(),
                                        " more could not be decoded)")));
  }
  std::sort(totals.undecodable.begin(), totals.undecodable.end());
  for (std::string& u : totals.undecodable) {
    out.summary.add_undecodable(std::move(u));
  }
  // Each part read its share of the plan's source, no more and no less.
  if (totals.part_bytes != first.plan_source_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the parts' source bytes add up to ", totals.part_bytes,
        " but their plan has ", first.plan_source_bytes(), " (edited?)"));
  }
  std::sort(out.reports.begin(), out.reports.end(),
            [](const v1::TensorDiffReport& a, const v1::TensorDiffReport& b) {
              return a.name() < b.name();
            });
  out.summary.set_tensors_compared(totals.compared);
  out.summary.set_bytes_read(totals.bytes);
  out.summary.set_wall_seconds(totals.wall);
  SetRankedLists(std::move(totals.entries), &out.summary);
  // With an imatrix every compared tensor states its use: the totals of
  // all parts' reports, in name order as one run adds them.
  if (std::any_of(out.reports.begin(), out.reports.end(),
                  [](const v1::TensorDiffReport& r) {
                    return r.imatrix_use() != v1::IMATRIX_USE_UNSPECIFIED;
                  })) {
    SetWeightedTotals(out.reports, &out.summary);
  }
  return out;
}

}  // namespace tensormorph
