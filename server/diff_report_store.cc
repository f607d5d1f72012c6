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

void AddInputs(const Checkpoint& c, DiffInputs* out) {
  for (const Checkpoint::File& f : c.files()) {
    std::optional<FileIdentity> id;
    if (f.mapping != nullptr) id = f.mapping->identity();
    out->emplace_back(f.path, id);
  }
  for (const Checkpoint::ReadFile& f : c.read_files()) {
    out->emplace_back(f.path, f.identity);
  }
}

}  // namespace

DiffInputs DiffInputsOf(const Checkpoint& quant, const Checkpoint& ref) {
  DiffInputs out;
  AddInputs(quant, &out);
  AddInputs(ref, &out);
  return out;
}

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
  return key;
}

void DiffReportStore::Keep(const std::string& key, DiffInputs inputs,
                           v1::GetDiffReportResponse report) {
  const int64_t bytes = static_cast<int64_t>(report.ByteSizeLong());
  absl::MutexLock lock(&mu_);
  EraseLocked(key);
  if (!Fits(bytes)) return;
  while (!lru_.empty() &&
         (static_cast<int64_t>(entries_.size()) >= max_entries_ ||
          bytes_ + bytes > max_bytes_)) {
    EraseLocked(lru_.back());
    ++evictions_;
  }
  lru_.push_front(key);
  Entry& e = entries_[key];
  e.inputs = std::move(inputs);
  e.report = std::move(report);
  e.bytes = bytes;
  e.kept = absl::Now();
  e.lru = lru_.begin();
  bytes_ += bytes;
}

void DiffReportStore::Drop(const std::string& key) {
  absl::MutexLock lock(&mu_);
  EraseLocked(key);
}

absl::StatusOr<v1::GetDiffReportResponse> DiffReportStore::Find(
    const std::string& key, const DiffInputs& now) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    return absl::NotFoundError(
        "no diff report kept for this request (none ran since the server "
        "started, or it was evicted); run the diff");
  }
  Entry& e = it->second;
  if (e.inputs != now) {
    // Which file: the first that differs, or one added or gone.
    std::string file = "a file";
    for (size_t i = 0; i < std::max(e.inputs.size(), now.size()); ++i) {
      if (i >= e.inputs.size() || i >= now.size() || e.inputs[i] != now[i]) {
        file = i < now.size() ? now[i].first : e.inputs[i].first;
        break;
      }
    }
    EraseLocked(key);
    return absl::NotFoundError(
        absl::StrCat("the kept diff report is stale and was dropped: '", file,
                     "' changed since the diff; run the diff again"));
  }
  lru_.splice(lru_.begin(), lru_, e.lru);
  v1::GetDiffReportResponse out = e.report;
  out.set_age_seconds(absl::ToDoubleSeconds(absl::Now() - e.kept));
  return out;
}

void DiffReportStore::EraseLocked(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

size_t DiffReportStore::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

int64_t DiffReportStore::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

int64_t DiffReportStore::evictions() const {
  absl::MutexLock lock(&mu_);
  return evictions_;
}

}  // namespace tensormorph
