// The plan of a QuantDiff paired by name, computed from the two
// checkpoints' listings (ListTensors) instead of the checkpoints themselves:
// what a router needs to split a diff over servers that each hold some of
// the pairs, and to give the summary, the refusals and the parts one server
// holding both checkpoints would give.
//
// It mirrors, rule for rule, what a tensormorphd computes for one request:
// core/diff/pairing.cc (PairTensors by name, CheckPairing) and
// server/quant_diff_reactor.cc (KeepNamedTensors, PlanPart). Only pairing
// by name is covered: a GGUF against a non-GGUF source translates names on
// the server, from metadata a listing does not carry.
#ifndef TENSORMORPH_CLIENT_DIFF_PLAN_H_
#define TENSORMORPH_CLIENT_DIFF_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/diff_parts/partition.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

struct ListedDiffPlan {
  // The pairs, in plan order (the quantized checkpoint's tensors by name,
  // bytewise, as a server walks them), each as PartitionDiffPlan takes it:
  // file = the quantized tensor's first stored part's file (a listing names
  // it without its directory, as the server's plan does), bytes = the
  // source's stored bytes plus the quantized tensor's. (A file name that is
  // not UTF-8 is listed escaped, \xHH, where the server's plan has its
  // bytes: the split of such a checkpoint's parts may then differ from a
  // server's, its fingerprint not.)
  std::vector<DiffPlanItem> items;
  // The source's stored bytes of each item (what bytes_read counts).
  std::vector<int64_t> source_bytes;
  // DiffSummary's lists, as the server sends them.
  std::vector<std::string> only_in_checkpoint, only_in_reference,
      shape_mismatches, skipped_empty;
};

// Pairs every tensor of `quant` (the listing of request.checkpoint(), in
// any order) whose name matches request.filter() (fnmatch, flags 0, as the
// server matches) with the tensor of the same name in `ref`, keeps only
// request.tensors() when given, and refuses what the server refuses, with
// the same codes and messages:
//  - INVALID_ARGUMENT "tensors: '...' is no tensor of ..." and "tensors:
//    none of the N tensors named matches the filter ...";
//  - INVALID_ARGUMENT "arguments probably reversed: ...";
//  - INVALID_ARGUMENT when the filter matches no tensor of `quant`;
//  - FAILED_PRECONDITION "0 tensors to compare ..." when no pair is left.
absl::StatusOr<ListedDiffPlan> PlanDiffByName(
    const v1::QuantDiffRequest& request, std::vector<v1::TensorInfo> quant,
    std::vector<v1::TensorInfo> ref);

// The pairs one request diffs: every item, or with request.part the part's
// share (PartitionDiffPlan), with the part's DiffPartInfo exactly as the
// server fills it (plan_fingerprint included).
struct DiffSelection {
  std::vector<size_t> todo;  // indices into the plan's items, plan order
  int64_t bytes_total = 0;   // their source bytes
  std::optional<v1::DiffPartInfo> part;
};

// Errors: INVALID_ARGUMENT from CheckDiffPart or PartitionDiffPlan.
absl::StatusOr<DiffSelection> SelectDiffPart(
    const v1::QuantDiffRequest& request, const ListedDiffPlan& plan);

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_DIFF_PLAN_H_
