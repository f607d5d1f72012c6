// core/diff_parts' rules over the API's messages, on the client side (the
// client library's router and `tensormorph diff-merge`): the request's part
// and plan key read from a QuantDiffRequest, the ranked lists written into a
// DiffSummary. Field copying only; the rules themselves are core's, so the
// server (server/proto_convert.h, its twin) and the clients cannot drift.
#ifndef TENSORMORPH_CLIENT_DIFF_PARTS_PROTO_H_
#define TENSORMORPH_CLIENT_DIFF_PARTS_PROTO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/diff_parts/fingerprint.h"
#include "core/diff_parts/partition.h"
#include "core/diff_parts/ranked_lists.h"
#include "core/diff_parts/weighted_totals.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// CheckDiffPart over request.part (unset: the whole diff).
// Errors: INVALID_ARGUMENT as CheckDiffPart.
absl::Status CheckDiffPart(const v1::QuantDiffRequest& request);

// True when `request` asks for a part (part.count > 0).
bool HasDiffPart(const v1::QuantDiffRequest& request);

// DiffPlanFingerprint of the request's checkpoint, reference, filter and
// fail_on with the `top_k` and `worst_groups` applied and the part `count`.
std::string DiffPlanFingerprint(const v1::QuantDiffRequest& request,
                                int32_t top_k, int32_t worst_groups,
                                int32_t count,
                                absl::Span<const DiffPlanItem> plan);

// What the ranked lists need of one report.
DiffSummaryEntry EntryOf(const v1::TensorDiffReport& r);

// Replaces `summary`'s worst_tensors and flagged by RankDiffEntries'.
void SetRankedLists(std::vector<DiffSummaryEntry> entries,
                    v1::DiffSummary* summary);

// Replaces `summary`'s importance-weighted totals by SumWeighted's over
// `reports` (a diff with an imatrix; the server's own are computed alike).
void SetWeightedTotals(const std::vector<v1::TensorDiffReport>& reports,
                       v1::DiffSummary* summary);

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_DIFF_PARTS_PROTO_H_
