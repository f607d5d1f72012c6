// Translations from core's types to the public API's messages.
#ifndef TENSORMORPH_SERVER_PROTO_CONVERT_H_
#define TENSORMORPH_SERVER_PROTO_CONVERT_H_

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/diff_parts/fingerprint.h"
#include "core/diff_parts/ranked_lists.h"
#include "core/diff_parts/weighted_totals.h"
#include "core/format/checkpoint.h"
#include "core/quant/scalar_info.h"
#include "core/tensor.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// The API's names for core's closed sets. A value core adds later and this
// file does not know yet maps to *_UNSPECIFIED.
v1::CheckpointFormat ToProto(CheckpointFormat format);
// From core/compat.h's BackendSupport::status ("supported", ...).
v1::SupportStatus SupportStatusToProto(absl::string_view status);

void FillCheckpointInfo(const Checkpoint& ckpt, v1::GetCheckpointResponse* out);
void FillEncoding(const EncodingInfo& info, v1::Encoding* out);
void FillTensorInfo(const Checkpoint& ckpt, const LogicalTensor& tensor,
                    v1::TensorInfo* out);
void FillScalar(const ScalarInfo& s, v1::ScalarInspection* out);

// A diff in parts: core/diff_parts' structs read from and written into the
// messages (the client library's side is client/diff_parts_proto.h).
// The plan key of `request` with the `top_k`, `worst_groups` applied and the
// part `count`.
DiffPlanKey DiffPlanKeyOf(const v1::QuantDiffRequest& request, int32_t top_k,
                          int32_t worst_groups, int32_t count);
DiffSummaryEntry DiffSummaryEntryOf(const v1::TensorDiffReport& report);
// Replaces out's worst_tensors and flagged.
void FillRankedLists(RankedLists lists, v1::DiffSummary* out);

// The summary's importance-weighted totals (SumWeighted) over `reports`.
void FillWeightedTotals(const std::vector<v1::TensorDiffReport>& reports,
                        v1::DiffSummary* out);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_PROTO_CONVERT_H_
