#include "client/diff_plan.h"

#include <fnmatch.h>

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/diff_parts_proto.h"

namespace tensormorph {
namespace {

// As core/diff/pairing.cc's: the first `n` items, and "and K more".
std::string FewOf(const std::vector<std::string>& items, size_t n = 3) {
  std::vector<std::string> shown;
  for (size_t i = 0; i < std::min(n, items.size()); ++i) {
    shown.push_back(items[i]);
  }
  std::string out = absl::StrJoin(shown, "; ");
  if (items.size() > n)
    absl::StrAppend(&out, "; and ", items.size() - n, " more");
  return out;
}

int64_t CountQuantized(const std::vector<v1::TensorInfo>& tensors) {
  int64_t n = 0;
  for (const v1::TensorInfo& t : tensors) n += t.encoding().quantized();
  return n;
}

bool Matches(const std::string& glob, const std::string& name) {
  return glob.empty() || ::fnmatch(glob.c_str(), name.c_str(), 0) == 0;
}

struct Pair {
  const v1::TensorInfo* quant;
  const v1::TensorInfo* ref;
};

// The server's KeepNamedTensors: only the quantized tensors named.
absl::Status KeepNamed(const v1::QuantDiffRequest& req,
                       const std::vector<v1::TensorInfo>& quant,
                       std::vector<Pair>& pairs, ListedDiffPlan& plan) {
  if (req.tensors().empty()) return absl::OkStatus();
  absl::flat_hash_set<std::string> all, named;
  for (const v1::TensorInfo& t : quant) all.insert(t.name());
  for (const std::string& name : req.tensors()) {
    if (!all.contains(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensors: '", name, "' is no tensor of '", req.checkpoint(),
          "' (names as `tensormorph ls` lists them)"));
    }
    named.insert(name);
  }
  auto keep = [&](std::vector<std::string>& names, bool mismatch) {
    std::erase_if(names, [&](const std::string& n) {
      return !named.contains(mismatch ? n.substr(0, n.rfind(": [")) : n);
    });
  };
  std::erase_if(
      pairs, [&](const Pair& p) { return !named.contains(p.quant->name()); });
  keep(plan.only_in_checkpoint, false);
  keep(plan.shape_mismatches, true);
  keep(plan.skipped_empty, false);
  if (pairs.empty() && plan.only_in_checkpoint.empty() &&
      plan.shape_mismatches.empty() && plan.skipped_empty.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensors: none of the ", named.size(),
                     " tensors named matches the filter '", req.filter(), "'"));
  }
  return absl::OkStatus();
}

// core/diff/pairing.cc's CheckPairing, for pairing by name.
absl::Status CheckPairs(const v1::QuantDiffRequest& req,
                        const std::vector<v1::TensorInfo>& quant,
                        const std::vector<v1::TensorInfo>& ref,
                        const std::vector<Pair>& pairs,
                        const ListedDiffPlan& p) {
  const std::string& quant_label = req.checkpoint();
  const std::string& ref_label = req.reference();
  const std::string& glob = req.filter();
  if (CountQuantized(quant) == 0) {
    if (const int64_t n = CountQuantized(ref); n > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "arguments probably reversed: '", quant_label,
          "', given as the quantized checkpoint, holds no quantized tensor, "
          "while '",
          ref_label, "', given as its full-precision reference, holds ", n,
          "; swap them (the quantized checkpoint first, its source second)"));
    }
  }
  if (!pairs.empty()) return absl::OkStatus();
  const size_t considered = p.only_in_checkpoint.size() +
                            p.shape_mismatches.size() + p.skipped_empty.size();
  if (considered == 0) {
    if (!glob.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("0 tensors to compare: the filter '", glob,
                       "' matches none of the ", quant.size(), " tensors of '",
                       quant_label, "' (a glob on its names, e.g. '",
                       quant.empty() ? "*" : quant.front().name(), "')"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "0 tensors to compare: '", quant_label, "' holds no tensor"));
  }
  std::vector<std::string> why;
  if (!p.only_in_checkpoint.empty()) {
    std::vector<std::string> tried;
    for (const std::string& n : p.only_in_checkpoint) {
      tried.push_back(absl::StrCat("'", n, "'"));
    }
    const bool all = p.only_in_checkpoint.size() == considered;
    why.push_back(absl::StrCat(
        all ? "no name matched: none of the " : "", p.only_in_checkpoint.size(),
        " tensor(s) of '", quant_label,
        all ? "' has a counterpart in '" : "' have no counterpart in '",
        ref_label, "' (pairing by name): ", FewOf(tried)));
  }
  if (!p.shape_mismatches.empty()) {
    why.push_back(absl::StrCat(
        p.shape_mismatches.size() == considered ? "every shape mismatched: "
                                                : "",
        p.shape_mismatches.size(), " pair(s) differ in shape (", quant_label,
        " vs ", ref_label, "): ", FewOf(p.shape_mismatches)));
  }
  if (!p.skipped_empty.empty()) {
    why.push_back(absl::StrCat(
        p.skipped_empty.size(),
        " pair(s) are empty (a zero dimension): ", FewOf(p.skipped_empty)));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("0 tensors to compare between '", quant_label, "' and '",
                   ref_label, "'", glob.empty() ? "" : " (filter '", glob,
                   glob.empty() ? "" : "')", ": ", absl::StrJoin(why, "; ")));
}

}  // namespace

absl::StatusOr<ListedDiffPlan> PlanDiffByName(
    const v1::QuantDiffRequest& request, std::vector<v1::TensorInfo> quant,
    std::vector<v1::TensorInfo> ref) {
  // A server walks its tensors sorted by name (bytewise), and lists them so.
  auto by_name = [](const v1::TensorInfo& a, const v1::TensorInfo& b) {
    return a.name() < b.name();
  };
  std::sort(quant.begin(), quant.end(), by_name);
  std::sort(ref.begin(), ref.end(), by_name);
  absl::flat_hash_map<absl::string_view, const v1::TensorInfo*> refs;
  for (const v1::TensorInfo& r : ref) refs.emplace(r.name(), &r);

  const std::string& glob = request.filter();
  ListedDiffPlan plan;
  std::vector<Pair> pairs;
  absl::flat_hash_set<absl::string_view> matched;
  for (const v1::TensorInfo& q : quant) {
    if (!Matches(glob, q.name())) continue;
    auto it = refs.find(q.name());
    if (it == refs.end()) {
      plan.only_in_checkpoint.push_back(q.name());
      continue;
    }
    const v1::TensorInfo& r = *it->second;
    matched.insert(r.name());
    if (!std::equal(q.shape().begin(), q.shape().end(), r.shape().begin(),
                    r.shape().end())) {
      plan.shape_mismatches.push_back(
          absl::StrCat(q.name(), ": [", absl::StrJoin(q.shape(), ","), "] vs [",
                       absl::StrJoin(r.shape(), ","), "]"));
      continue;
    }
    if (q.num_elements() == 0) {
      plan.skipped_empty.push_back(q.name());
      continue;
    }
    pairs.push_back({&q, &r});
  }
  for (const v1::TensorInfo& r : ref) {
    if (matched.contains(r.name()) || !Matches(glob, r.name())) continue;
    plan.only_in_reference.push_back(r.name());
  }
  if (absl::Status s = KeepNamed(request, quant, pairs, plan); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckPairs(request, quant, ref, pairs, plan); !s.ok()) {
    return s;
  }
  for (const Pair& p : pairs) {
    // Byte counts off the wire: checked before they are summed.
    int64_t bytes = 0;
    if (p.ref->stored_bytes() < 0 || p.quant->stored_bytes() < 0 ||
        __builtin_add_overflow(p.ref->stored_bytes(), p.quant->stored_bytes(),
                               &bytes)) {
      return absl::InternalError(absl::StrCat(
          "the pair '", p.quant->name(), "' lists stored_bytes ",
          p.quant->stored_bytes(), " (quantized) and ", p.ref->stored_bytes(),
          " (source): want non-negative counts whose sum fits 64 bits"));
    }
    DiffPlanItem item{p.quant->name(),
                      p.ref->name(),
                      {p.quant->shape().begin(), p.quant->shape().end()},
                      p.quant->parts().empty() ? "" : p.quant->parts(0).file(),
                      bytes};
    plan.items.push_back(std::move(item));
    plan.source_bytes.push_back(p.ref->stored_bytes());
  }
  return plan;
}

absl::StatusOr<DiffSelection> SelectDiffPart(
    const v1::QuantDiffRequest& request, const ListedDiffPlan& plan) {
  if (absl::Status s = CheckDiffPart(request); !s.ok()) return s;
  DiffSelection out;
  int64_t plan_source_bytes = 0;
  for (int64_t b : plan.source_bytes) {
    // Each non-negative (PlanDiffByName); their sum may still overflow.
    if (__builtin_add_overflow(plan_source_bytes, b, &plan_source_bytes)) {
      return absl::InternalError(
          "the source tensors' stored_bytes sum past 64 bits");
    }
  }
  if (!HasDiffPart(request)) {
    for (size_t i = 0; i < plan.items.size(); ++i) out.todo.push_back(i);
    out.bytes_total = plan_source_bytes;
    return out;
  }
  const v1::DiffPart& want = request.part();
  auto parts = PartitionDiffPlan(plan.items, want.count());
  if (!parts.ok()) return parts.status();
  for (size_t i = 0; i < plan.items.size(); ++i) {
    if ((*parts)[i] != want.index()) continue;
    out.todo.push_back(i);
    out.bytes_total += plan.source_bytes[i];
  }
  // As the server applies them: unset asks for the default.
  const int32_t top_k = request.has_top_k() ? request.top_k() : 10;
  const int32_t worst_groups =
      request.has_worst_groups() ? request.worst_groups() : 5;
  v1::DiffPartInfo& info = out.part.emplace();
  info.set_index(want.index());
  info.set_count(want.count());
  info.set_plan_tensors(static_cast<int64_t>(plan.items.size()));
  info.set_plan_source_bytes(plan_source_bytes);
  info.set_part_source_bytes(out.bytes_total);
  info.set_plan_fingerprint(DiffPlanFingerprint(request, top_k, worst_groups,
                                                want.count(), plan.items));
  *info.mutable_fail_on() = request.fail_on();
  info.set_checkpoint(request.checkpoint());
  info.set_reference(request.reference());
  info.set_run_id(want.run_id());
  return out;
}

}  // namespace tensormorph
