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

}  // namespace tensormorph
