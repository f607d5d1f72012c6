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

}  // namespace

std::string DiffMergeReason(const absl::Status& status) {
  auto reason = status.GetPayload(kDiffMergeReasonPayload);
  return reason.has_value() ? std::string(*reason) : std::string();
}

absl::StatusOr<MergedDiff> MergeDiffParts(std::vector<DiffPartEvents> parts) {
  if (parts.empty()) {
    return absl::InvalidArgumentError("no parts to merge");
  }
  // Each part on its own: closed by a summary with its part info, and
  // holding every report the summary counts.
  for (const DiffPartEvents& p : parts) {
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
    if (p.summary->tensors_compared() !=
        static_cast<int64_t>(p.reports.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          p.label, ": the summary of part ", PartText(p.summary->part()),
          " says ", p.summary->tensors_compared(),
          " tensors compared but the file holds ", p.reports.size(),
          " tensor reports (truncated or edited?)"));
    }
  }
  // One run: last night's part of the same plan has the same fingerprint
  // and other numbers.
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
  // One plan, each part once, none missing.
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
  std::map<int32_t, const DiffPartEvents*> by_index;
  for (const DiffPartEvents& p : parts) {
    const v1::DiffPartInfo& info = p.summary->part();
    auto [it, added] = by_index.emplace(info.index(), &p);
    if (!added) {
      return Refusal(kDiffPartsIncomplete,
                     absl::StrCat("part ", PartText(info), " is in both ",
                                  it->second->label, " and ", p.label));
    }
  }
  if (by_index.size() != static_cast<size_t>(first.count())) {
    std::vector<std::string> missing, have;
    for (int32_t i = 0; i < first.count(); ++i) {
      if (!by_index.contains(i))
        missing.push_back(absl::StrCat(i, "/", first.count()));
    }
    for (const auto& [i, p] : by_index) {
      have.push_back(absl::StrCat(i, "/", first.count(), " (", p->label, ")"));
    }
    return Refusal(kDiffPartsIncomplete,
                   absl::StrCat("parts ", absl::StrJoin(missing, ", "),
                                " missing; have ", absl::StrJoin(have, ", ")));
  }
  // Every part saw the same pairing of the whole plan.
  const DiffPartEvents& zero = *by_index.begin()->second;
  for (const auto& [i, p] : by_index) {
    if (const char* list = FirstDifferentList(*zero.summary, *p->summary)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the parts disagree on the pairing: ", list, " of ", p->label,
          " (part ", PartText(p->summary->part()), ") differs from that of ",
          zero.label, " (part ", PartText(zero.summary->part()), ")"));
    }
  }
  MergedDiff out;
  out.summary = *zero.summary;
  out.summary.clear_part();
  out.fail_on.assign(first.fail_on().begin(), first.fail_on().end());
  out.checkpoint = first.checkpoint();
  out.reference = first.reference();
  out.run_id = first.run_id();
  int64_t compared = 0, bytes = 0, part_bytes = 0;
  double wall = 0;
  std::map<std::string, const DiffPartEvents*> seen;
  std::vector<DiffSummaryEntry> entries;
  std::vector<std::string> undecodable;
  for (const auto& [i, p] : by_index) {
    if (__builtin_add_overflow(compared, p->summary->tensors_compared(),
                               &compared) ||
        __builtin_add_overflow(bytes, p->summary->bytes_read(), &bytes) ||
        __builtin_add_overflow(
            part_bytes, p->summary->part().part_source_bytes(), &part_bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          p->label, ": tensors_compared or bytes overflow the sum"));
    }
    wall = std::max(wall, p->summary->wall_seconds());
    // The excess totals and the tensors no part could decode, as one run
    // gives them.
    const v1::DiffSummary& ps = *p->summary;
    out.summary.set_not_nearest(out.summary.not_nearest() + ps.not_nearest());
    out.summary.set_clipped(out.summary.clipped() + ps.clipped());
    out.summary.set_zeroed_groups(out.summary.zeroed_groups() +
                                  ps.zeroed_groups());
    out.summary.set_max_excess_steps(
        std::max(out.summary.max_excess_steps(), ps.max_excess_steps()));
    for (const std::string& u : ps.undecodable()) undecodable.push_back(u);
    for (const v1::TensorDiffReport& r : p->reports) {
      auto [it, added] = seen.emplace(r.name(), p);
      if (!added) {
        return absl::InvalidArgumentError(
            it->second == p
                ? absl::StrCat("tensor '", r.name(), "' is reported twice in ",
                               p->label)
                : absl::StrCat("tensor '", r.name(), "' is reported in both ",
                               it->second->label, " and ", p->label));
      }
      out.reports.push_back(r);
      entries.push_back(EntryOf(r));
    }
  }
  // A tensor that cannot be decoded is planned, not compared.
  const int64_t planned = compared + static_cast<int64_t>(undecodable.size());
  if (planned != first.plan_tensors()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the parts compared ", compared, " tensors but their plan has ",
        first.plan_tensors(),
        undecodable.empty() ? ""
                            : absl::StrCat(" (", undecodable.size(),
                                           " more could not be decoded)")));
  }
  std::sort(undecodable.begin(), undecodable.end());
  for (std::string& u : undecodable) out.summary.add_undecodable(std::move(u));
  // Each part read its share of the plan's source, no more and no less.
  if (part_bytes != first.plan_source_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the parts' source bytes add up to ", part_bytes,
        " but their plan has ", first.plan_source_bytes(), " (edited?)"));
  }
  std::sort(out.reports.begin(), out.reports.end(),
            [](const v1::TensorDiffReport& a, const v1::TensorDiffReport& b) {
              return a.name() < b.name();
            });
  out.summary.set_tensors_compared(compared);
  out.summary.set_bytes_read(bytes);
  out.summary.set_wall_seconds(wall);
  SetRankedLists(std::move(entries), &out.summary);
  return out;
}

}  // namespace tensormorph
