#include "core/diff/pairing.h"

#include <fnmatch.h>

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tensormorph {
namespace {

// The first `n` items, quoted, and "and K more" past them.
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

int64_t CountQuantized(const Checkpoint& c) {
  int64_t n = 0;
  for (const LogicalTensor& t : c.tensors()) n += t.encoding->info().quantized;
  return n;
}

}  // namespace

absl::StatusOr<Pairing> PairTensors(const Checkpoint& quant,
                                    const Checkpoint& ref,
                                    const std::string& glob) {
  const ReferenceResolver resolver(quant, ref);
  Pairing out;
  out.method = resolver.method();
  out.translated = resolver.translates();
  out.architecture = resolver.architecture();
  absl::flat_hash_set<std::string> matched_ref;
  for (const LogicalTensor& q : quant.tensors()) {
    if (!glob.empty() && ::fnmatch(glob.c_str(), q.name.c_str(), 0) != 0)
      continue;
    const LogicalTensor* r = resolver.Find(q);
    if (r == nullptr) {
      out.only_in_quant.push_back(q.name);
      continue;
    }
    matched_ref.insert(r->name);
    if (r->shape != q.shape) {
      out.shape_mismatches.push_back(
          absl::StrCat(q.name, ": [", absl::StrJoin(q.shape, ","), "] vs [",
                       absl::StrJoin(r->shape, ","), "]"));
      continue;
    }
    if (q.num_elements == 0) {
      // A zero dimension: nothing to compare (and no rows to permute).
      out.empty.push_back(q.name);
      continue;
    }
    auto map = resolver.RowMapFor(q, *r);
    if (!map.ok()) return map.status();
    out.pairs.push_back({&q, r, *std::move(map)});
  }
  for (const LogicalTensor& r : ref.tensors()) {
    if (matched_ref.contains(r.name)) continue;
    if (!glob.empty() && (resolver.translates() ||
                          ::fnmatch(glob.c_str(), r.name.c_str(), 0) != 0)) {
      continue;
    }
    out.only_in_ref.push_back(r.name);
  }
  return out;
}

absl::Status CheckPairing(const Pairing& p, const Checkpoint& quant,
                          const Checkpoint& ref, const std::string& glob,
                          absl::string_view quant_label,
                          absl::string_view ref_label) {
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
  if (!p.pairs.empty()) return absl::OkStatus();
  const size_t considered =
      p.only_in_quant.size() + p.shape_mismatches.size() + p.empty.size();
  if (considered == 0) {
    if (!glob.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "0 tensors to compare: the filter '", glob, "' matches none of the ",
          quant.tensors().size(), " tensors of '", quant_label,
          "' (a glob on its names, e.g. '",
          quant.tensors().empty() ? "*" : quant.tensors().front().name, "')"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "0 tensors to compare: '", quant_label, "' holds no tensor"));
  }
  std::vector<std::string> why;
  if (!p.only_in_quant.empty()) {
    const ReferenceResolver resolver(quant, ref);
    std::vector<std::string> tried;
    for (const std::string& n : p.only_in_quant) {
      std::vector<std::string> c = resolver.Candidates(n);
      tried.push_back(c.size() > 1 || c[0] != n
                          ? absl::StrCat("'", n, "' (tried '",
                                         absl::StrJoin(c, "', '"), "')")
                          : absl::StrCat("'", n, "'"));
    }
    const bool all = p.only_in_quant.size() == considered;
    why.push_back(absl::StrCat(
        all ? "no name matched: none of the " : "", p.only_in_quant.size(),
        " tensor(s) of '", quant_label,
        all ? "' has a counterpart in '" : "' have no counterpart in '",
        ref_label, "' (pairing ", p.method, "): ", FewOf(tried)));
  }
  if (!p.shape_mismatches.empty()) {
    why.push_back(absl::StrCat(
        p.shape_mismatches.size() == considered ? "every shape mismatched: "
                                                : "",
        p.shape_mismatches.size(), " pair(s) differ in shape (", quant_label,
        " vs ", ref_label, "): ", FewOf(p.shape_mismatches)));
  }
  if (!p.empty.empty()) {
    why.push_back(absl::StrCat(
        p.empty.size(),
        " pair(s) are empty (a zero dimension): ", FewOf(p.empty)));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("0 tensors to compare between '", quant_label, "' and '",
                   ref_label, "'", glob.empty() ? "" : " (filter '", glob,
                   glob.empty() ? "" : "')", ": ", absl::StrJoin(why, "; ")));
}

}  // namespace tensormorph
