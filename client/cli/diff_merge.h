// Puts the parts of a diff (QuantDiffRequest.part) back together into the
// result one run of the whole diff gives. Exact, not approximate: a part
// never splits a tensor, so every TensorDiffReport is final as sent, and the
// summary is rebuilt from the parts by the single run's rules
// (core/diff_parts/ranked_lists.h).
#ifndef TENSORMORPH_CLIENT_CLI_DIFF_MERGE_H_
#define TENSORMORPH_CLIENT_CLI_DIFF_MERGE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// The refusals a caller tells apart without reading their English: each
// status MergeDiffParts returns for one of these carries the reason as its
// payload at kDiffMergeReasonPayload (absl::Status::GetPayload), the text
// of the constant.
inline constexpr absl::string_view kDiffMergeReasonPayload =
    "type.tensormorph.dev/tensormorph.v1.DiffMergeReason";
// Parts written by different runs (DiffPartInfo.run_id differs).
inline constexpr absl::string_view kDiffPartsOfDifferentRuns =
    "DIFF_PARTS_OF_DIFFERENT_RUNS";
// Parts of different plans (count or plan_fingerprint differ).
inline constexpr absl::string_view kDiffPartsOfDifferentPlans =
    "DIFF_PARTS_OF_DIFFERENT_PLANS";
// Parts of the plan missing, or one given twice.
inline constexpr absl::string_view kDiffPartsIncomplete =
    "DIFF_PARTS_INCOMPLETE";

// The reason `status` carries (above), or empty.
std::string DiffMergeReason(const absl::Status& status);

// The events of one part, as one `tensormorph diff --part i/N --json` wrote
// them (progress left out).
struct DiffPartEvents {
  std::string label;  // names the part in messages: its file
  std::vector<v1::TensorDiffReport> reports;
  std::optional<v1::DiffSummary> summary;
};

struct MergedDiff {
  std::vector<v1::TensorDiffReport> reports;  // sorted by name
  // The whole diff's: tensors_compared, bytes_read and the excess totals
  // (not_nearest, clipped, zeroed_groups; undecodable listed) summed over
  // the parts, each part once, max_excess_steps and wall_seconds their
  // maximum (they ran side by side), the weighted totals over every
  // report, the pairing lists those every part agrees on, worst_tensors
  // and flagged by SetRankedLists over every report; no `part`.
  v1::DiffSummary summary;
  // The plan's gates and checkpoints as the parts were asked for them
  // (DiffPartInfo).
  std::vector<std::string> fail_on;
  std::string checkpoint, reference;
  std::string run_id;  // the parts' (DiffPartInfo.run_id)
};

// Merges `parts` (in any order).
// Errors, each INVALID_ARGUMENT naming the parts by label:
//  - no parts;
//  - a part with no summary, or a summary without DiffPartInfo;
//  - a part info that is no part (index outside 0..count-1, count outside
//    1..kMaxDiffParts) or has a negative count or size;
//  - a part whose tensors_compared is not its count of reports (truncated);
//  - parts of different runs (run_id differs; an empty one is a run of its
//    own), naming both run ids and a file of each: kDiffPartsOfDifferentRuns,
//    checked before the plan (last night's part is of the same plan);
//  - parts of different plans (count or plan_fingerprint differ):
//    kDiffPartsOfDifferentPlans;
//  - a part given twice ("part 1/3 is in both a.jsonl and c.jsonl"):
//    kDiffPartsIncomplete;
//  - parts missing ("parts 2/3 missing; have 0/3 (a.jsonl), 1/3 (b.jsonl)"):
//    kDiffPartsIncomplete;
//  - pairing lists (pairing, pairing_architecture, only_in_checkpoint,
//    only_in_reference, shape_mismatches, skipped_empty) that differ;
//  - a tensor reported twice;
//  - reports that do not add up to the plan's plan_tensors, or parts'
//    part_source_bytes that do not add up to its plan_source_bytes.
absl::StatusOr<MergedDiff> MergeDiffParts(std::vector<DiffPartEvents> parts);

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_CLI_DIFF_MERGE_H_
