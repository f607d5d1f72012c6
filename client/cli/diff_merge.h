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

#include "absl/status/statusor.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// The events of one part, as one `tensormorph diff --part i/N --json` wrote
// them (progress left out).
struct DiffPartEvents {
  std::string label;  // names the part in messages: its file
  std::vector<v1::TensorDiffReport> reports;
  std::optional<v1::DiffSummary> summary;
};

struct MergedDiff {
  std::vector<v1::TensorDiffReport> reports;  // sorted by name
  // The whole diff's: tensors_compared and bytes_read summed over the
  // parts, wall_seconds their maximum (they ran side by side), the pairing
  // lists those every part agrees on, worst_tensors and flagged by
  // SetRankedLists over every report; no `part`.
  v1::DiffSummary summary;
  // The plan's gates and checkpoints as the parts were asked for them
  // (DiffPartInfo).
  std::vector<std::string> fail_on;
  std::string checkpoint, reference;
};

// Merges `parts` (in any order).
// Errors, each INVALID_ARGUMENT naming the parts by label:
//  - no parts;
//  - a part with no summary, or a summary without DiffPartInfo;
//  - a part info that is no part (index outside 0..count-1, count outside
//    1..kMaxDiffParts) or has a negative count or size;
//  - a part whose tensors_compared is not its count of reports (truncated);
//  - parts of different plans (count or plan_fingerprint differ);
//  - a part given twice ("part 1/3 is in both a.jsonl and c.jsonl");
//  - parts missing ("parts 2/3 missing; have 0/3 (a.jsonl), 1/3 (b.jsonl)");
//  - pairing lists (pairing, pairing_architecture, only_in_checkpoint,
//    only_in_reference, shape_mismatches, skipped_empty) that differ;
//  - a tensor reported twice;
//  - reports that do not add up to the plan's plan_tensors, or parts'
//    part_source_bytes that do not add up to its plan_source_bytes.
absl::StatusOr<MergedDiff> MergeDiffParts(std::vector<DiffPartEvents> parts);

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_CLI_DIFF_MERGE_H_
