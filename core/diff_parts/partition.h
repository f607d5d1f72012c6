// The split of a diff plan into parts (QuantDiffRequest.part): which pair
// each of N parts compares. A pure function of the plan, so that every part
// of a batch diff, on whatever machine, and a client routing pairs to
// servers compute the same split. Plain structs, no messages: the server
// and the clients read a request's part at their own edge.
#ifndef TENSORMORPH_CORE_DIFF_PARTS_PARTITION_H_
#define TENSORMORPH_CORE_DIFF_PARTS_PARTITION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tensormorph {

// DiffPart.count: at most this many parts.
inline constexpr int32_t kMaxDiffParts = 65536;
// DiffPart.run_id: at most this many characters, each of A-Z a-z 0-9 . _ :
// - (a Kubernetes uid, a CI run number, a timestamp), so that it can be
// named in messages and file names as it is.
inline constexpr size_t kMaxDiffRunIdLength = 128;

// One pair of a diff plan, in plan order (the quantized checkpoint's order).
struct DiffPlanItem {
  std::string name;            // the quantized tensor's
  std::string reference_name;  // its source's
  std::vector<int64_t> shape;
  // The shard file that holds the quantized tensor (its first stored
  // part's), as a name that is the same on every machine (the file's name
  // without its directory). The quantized side decides because a shard of
  // the quantized checkpoint is what a shard-affine server holds, and its
  // files are the ones the batch reads in file order. Empty: one file.
  std::string file;
  // The source's bytes plus the quantized tensor's stored bytes: what
  // comparing the pair reads. Never negative.
  int64_t bytes = 0;
};

// Checks QuantDiffRequest.part's `count` and `index` (0 and 0 when the
// part is unset): count 0 with index 0 (the whole diff), or
// 1 <= count <= kMaxDiffParts with 0 <= index < count.
// Errors: INVALID_ARGUMENT naming the field, the rule and the value given.
absl::Status CheckDiffPart(int32_t count, int32_t index);

// Checks a run id (DiffPart.run_id): at most kMaxDiffRunIdLength characters
// of A-Z a-z 0-9 . _ : -; empty is none.
// Errors: INVALID_ARGUMENT naming the rule (the id itself only when it is
// short and printable: it may be anything a client sent).
absl::Status CheckDiffRunId(absl::string_view run_id);

// The part (0 .. count-1) of each item of `plan`, in plan order.
//
// Rule: items are grouped by `file`; a group of more than floor(total/count)
// bytes is split into its items. The groups and loose items are then dealt
// largest first (ties by name: the file's for a group, the tensor's for an
// item, then plan order), each to the part with the fewest bytes so far
// (ties: the lowest index). The same plan gives the same parts everywhere:
// nothing depends on pointers, hashing or the process.
//
// Bound: every part holds at most total/count + the largest unit dealt,
// where a unit is a kept group (so at most floor(total/count)) or a single
// item. Every item is in exactly one part; with count > units some parts
// are empty; with count 1 every item is in part 0.
//
// Errors: INVALID_ARGUMENT when count is outside 1 .. kMaxDiffParts, an
// item's bytes are negative, or the total overflows int64.
absl::StatusOr<std::vector<int32_t>> PartitionDiffPlan(
    absl::Span<const DiffPlanItem> plan, int32_t count);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_DIFF_PARTS_PARTITION_H_
