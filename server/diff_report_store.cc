#include "server/diff_report_store.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tensormorph {
namespace {

void AddField(std::string* key, absl::string_view value) {
  absl::StrAppend(key, value.size(), ":", value, ";");
}

}  // namespace

std::string DiffReportKey(const v1::QuantDiffRequest& req,
                          const Checkpoint& quant, const Checkpoint& ref) {
  std::string key;
  AddField(&key, quant.path());
  AddField(&key, ref.path());
  AddField(&key, req.filter());
  std::vector<std::string> tensors(req.tensors().begin(), req.tensors().end());
  std::sort(tensors.begin(), tensors.end());
  tensors.erase(std::unique(tensors.begin(), tensors.end()), tensors.end());
  AddField(&key, absl::StrCat(tensors.size()));
  for (const std::string& t : tensors) AddField(&key, t);
  AddField(&key, absl::StrCat(req.has_top_k() ? req.top_k() : 10));
  AddField(&key, absl::StrCat(req.has_worst_groups() ? req.worst_groups() : 5));
  AddField(&key, absl::StrCat(req.fail_on_size()));
  for (const std::string& g : req.fail_on()) AddField(&key, g);
  const bool part = req.has_part() && req.part().count() != 0;
  AddField(&key, part
                     ? absl::StrCat(req.part().index(), "/", req.part().count())
                     : "");
  // Only when set: the keys of diffs without one stay as they were.
  if (!req.imatrix().empty()) AddField(&key, req.imatrix());
  return key;
}

void DiffReportStore::Keep(const std::string& key, DiffInputs inputs,
                           v1::GetDiffReportResponse report) {
  const int64_t bytes = static_cast<int64_t>(report.ByteSizeLong());
  kept_.Keep(
      key, std::move(inputs),
      std::make_shared<const v1::GetDiffReportResponse>(std::move(report)),
      bytes);
}

absl::StatusOr<v1::GetDiffReportResponse> DiffReportStore::Find(
    const std::string& key, const DiffInputs& now) {
  auto found = kept_.Find(key, now);
  if (!found.ok()) return found.status();
  v1::GetDiffReportResponse out = *found->value;
  out.set_age_seconds(absl::ToDoubleSeconds(absl::Now() - found->kept));
  return out;
}

}  // namespace tensormorph
