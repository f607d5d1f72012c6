#include "client/diff_parts_proto.h"

#include <utility>

namespace tensormorph {

absl::Status CheckDiffPart(const v1::QuantDiffRequest& request) {
  if (absl::Status s = CheckDiffRunId(request.part().run_id()); !s.ok()) {
    return s;
  }
  return CheckDiffPart(request.part().count(), request.part().index());
}

bool HasDiffPart(const v1::QuantDiffRequest& request) {
  return request.has_part() && request.part().count() > 0;
}

std::string DiffPlanFingerprint(const v1::QuantDiffRequest& request,
                                int32_t top_k, int32_t worst_groups,
                                int32_t count,
                                absl::Span<const DiffPlanItem> plan) {
  DiffPlanKey key;
  key.checkpoint = request.checkpoint();
  key.reference = request.reference();
  key.filter = request.filter();
  key.fail_on.assign(request.fail_on().begin(), request.fail_on().end());
  key.top_k = top_k;
  key.worst_groups = worst_groups;
  key.count = count;
  return DiffPlanFingerprint(key, plan);
}

DiffSummaryEntry EntryOf(const v1::TensorDiffReport& r) {
  return {r.name(), r.max_err_steps(), r.flagged()};
}

void SetRankedLists(std::vector<DiffSummaryEntry> entries,
                    v1::DiffSummary* summary) {
  RankedLists lists = RankDiffEntries(std::move(entries));
  summary->clear_worst_tensors();
  for (std::string& name : lists.worst_tensors) {
    summary->add_worst_tensors(std::move(name));
  }
  summary->clear_flagged();
  for (std::string& name : lists.flagged) summary->add_flagged(std::move(name));
}

void SetWeightedTotals(const std::vector<v1::TensorDiffReport>& reports,
                       v1::DiffSummary* summary) {
  std::vector<WeightedEntry> entries;
  entries.reserve(reports.size());
  for (const v1::TensorDiffReport& r : reports) {
    entries.push_back({r.name(), static_cast<int>(r.imatrix_use()),
                       r.imatrix_note(), r.weighted_sq_err(),
                       r.weighted_source_energy()});
  }
  WeightedTotals t = SumWeighted(std::move(entries));
  summary->set_imatrix_weighted(t.weighted);
  summary->set_weighted_sq_err(t.sq_err);
  summary->set_weighted_source_energy(t.energy);
  summary->set_weighted_sqnr_db(t.sqnr_db);
  summary->clear_imatrix_missing();
  for (std::string& n : t.missing) summary->add_imatrix_missing(std::move(n));
  summary->clear_imatrix_mismatched();
  for (std::string& n : t.mismatched) {
    summary->add_imatrix_mismatched(std::move(n));
  }
}

}  // namespace tensormorph
