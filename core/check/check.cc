#include "core/check/check.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/check/convention_rules.h"
#include "core/check/duplicates.h"
#include "core/check/rules.h"
#include "core/check/scale_scan.h"
#include "core/check/source_rules.h"
#include "core/check/stored_hashes.h"
#include "core/check/structure_rules.h"
#include "core/diff/pairing.h"
#include "core/io/fault_guard.h"
#include "core/util/error_reason.h"
#include "core/util/status_macros.h"

namespace tensormorph {
namespace {

int64_t PartBytes(const LogicalTensor& t) {
  int64_t b = 0;
  for (const StoredTensor* p : t.encoding->parts()) {
    b += static_cast<int64_t>(p->nbytes);
  }
  return b;
}

// The tensors CheckAgainstSource will diff and hold to max_excess_steps,
// which judges their clipping from the source itself. Empty when the
// pairing fails (CheckAgainstSource then reports why, and saturated-group
// still judges every tensor).
absl::flat_hash_set<std::string> JudgedBySource(const Checkpoint& ckpt,
                                                const Checkpoint& source) {
  absl::flat_hash_set<std::string> names;
  absl::StatusOr<Pairing> pairing = PairTensors(ckpt, source);
  if (!pairing.ok()) return names;
  for (const TensorPair& p : pairing->pairs) {
    if (DefaultSourceGate(p.quant->encoding->info(), "max_excess_steps")) {
      names.insert(p.quant->name);
    }
  }
  return names;
}

// One check as an object: each pass is a named step over shared state (the
// tallies, the progress, the findings not yet reported).
class Checker {
 public:
  Checker(const Checkpoint& ckpt, const CheckOptions& options,
          const std::atomic<bool>* cancelled,
          const std::function<void(const CheckProgress&)>& on_progress,
          const std::function<void(const Finding&)>& on_finding,
          const std::function<void(const ManifestEntry&)>& on_hash)
      : ckpt_(ckpt),
        options_(options),
        cancelled_(cancelled),
        on_progress_(on_progress),
        on_finding_(on_finding),
        on_hash_(on_hash) {}

  absl::StatusOr<CheckSummary> Run();

 private:
  void Report();
  void Tell();
  // Structure and conventions: cheap, and what most often explains the
  // value findings. Sets not_decoded_.
  absl::Status StructureRules();
  // duplicate-tensor, and with verify manifest-mismatch; `hashes` every
  // stored tensor's entry when hashed, else nullptr.
  absl::Status IntegrityRules(const std::vector<ManifestEntry>* hashes);
  absl::Status ValuePass();
  absl::Status CheckValues(const LogicalTensor& t);
  // The hashes no value pass took, then the integrity rules over them all.
  absl::Status FinishHashes();

  const Checkpoint& ckpt_;
  const CheckOptions& options_;
  const std::atomic<bool>* cancelled_;
  const std::function<void(const CheckProgress&)>& on_progress_;
  const std::function<void(const Finding&)>& on_finding_;
  const std::function<void(const ManifestEntry&)>& on_hash_;

  CheckSummary summary_;
  std::map<std::string, RuleTally> tallies_;
  std::vector<Finding> found_;
  CheckProgress progress_;
  // With every stored byte hashed (hash_all), the hashes taken in the value
  // pass; nullptr otherwise.
  std::unique_ptr<StoredHashes> hashes_;
  std::set<std::string> not_decoded_;
  absl::flat_hash_set<const StoredTensor*> scanned_scales_;
  absl::flat_hash_set<std::string> judged_by_source_;
  // Progress: the value pass goes through value_bytes_, hashing the parts
  // it reads as it goes; the stored bytes it does not read are hashed after
  // it (leftover_hashed_ of hashes_->unclaimed_bytes()).
  int64_t stored_bytes_ = 0, value_bytes_ = 0, values_done_ = 0;
  int64_t leftover_hashed_ = 0;
};

void Checker::Report() {
  for (Finding& f : found_) {
    switch (f.severity) {
      case Severity::kError:
        ++summary_.errors;
        break;
      case Severity::kWarning:
        ++summary_.warnings;
        break;
      case Severity::kInfo:
        ++summary_.infos;
        break;
    }
    if (f.severity >= options_.fail_level) summary_.failed = true;
    RuleTally& t = tallies_[f.rule];
    t.rule = f.rule;
    TallyFinding(f, &t);
    if (on_finding_) on_finding_(f);
  }
  found_.clear();
}

// Each stored byte counts once, when the pass that reads it does: the value
// pass (hashing as it reads) or, for bytes it does not read, the hashes
// after it. In double: products of two sizes.
void Checker::Tell() {
  const int64_t unclaimed = hashes_ ? hashes_->unclaimed_bytes() : 0;
  const double v = value_bytes_ > 0 ? static_cast<double>(values_done_) /
                                          static_cast<double>(value_bytes_)
                                    : 1.0;
  progress_.bytes_done = std::min<int64_t>(
      stored_bytes_, static_cast<int64_t>((stored_bytes_ - unclaimed) * v) +
                         std::min(leftover_hashed_, unclaimed));
  if (on_progress_) on_progress_(progress_);
}

absl::Status Checker::StructureRules() {
  TM_ASSIGN_OR_RETURN(std::optional<conventions::QuantConfig> config,
                      ReadQuantConfig(ckpt_));
  std::string config_file;
  if (config) {
    for (const Checkpoint::ReadFile& f : ckpt_.read_files()) {
      if (f.identity && f.path.size() >= 11 &&
          f.path.compare(f.path.size() - 11, 11, "config.json") == 0) {
        config_file = f.path;
        break;
      }
    }
  }
  // Modules whose stored tensors a structure finding explains: reported
  // once, by the rule that names the cause, and not decoded.
  std::set<std::string> explained, dense;
  if (config) {
    CheckCompressedTensorsStorage(ckpt_, *config, config_file, &explained,
                                  &dense, &found_);
  }
  std::set<std::string> quiet = explained;
  quiet.insert(dense.begin(), dense.end());
  ReportOpenProblems(ckpt_, quiet, &found_);
  CheckCompanions(ckpt_, config, quiet, &found_);
  not_decoded_ = ModulesNotDecoded(found_);
  not_decoded_.insert(explained.begin(), explained.end());
  TM_RETURN_IF_ERROR(CheckGptqZeroConvention(ckpt_, &found_));
  if (config) CheckIgnorePatterns(ckpt_, *config, config_file, &found_);
  if (config) CheckModelOptExcluded(ckpt_, *config, &found_);
  Report();
  return absl::OkStatus();
}

absl::Status Checker::IntegrityRules(const std::vector<ManifestEntry>* hashes) {
  summary_.stored_tensors = static_cast<int64_t>(ckpt_.stored_tensors().size());
  TM_RETURN_IF_ERROR(FindDuplicateTensors(ckpt_, hashes, cancelled_, &found_));
  if (options_.verify && hashes != nullptr) {
    std::vector<Finding> mismatches =
        CompareManifest(*options_.verify, *hashes);
    for (Finding& f : mismatches) {
      // The manifest names files by base name; say where the copy's is.
      for (const ManifestEntry& e : *hashes) {
        if (e.name == f.tensor) {
          f.file = ckpt_.files()[ckpt_.FindStored(e.name)->file_index].path;
          break;
        }
      }
      found_.push_back(std::move(f));
    }
  }
  Report();
  return absl::OkStatus();
}

absl::Status Checker::ValuePass() {
  if (options_.source != nullptr) {
    judged_by_source_ = JudgedBySource(ckpt_, *options_.source);
  }
  if (hashes_) {
    for (const LogicalTensor& t : ckpt_.tensors()) {
      if (!not_decoded_.contains(ModuleOfTensor(t.name))) hashes_->Claim(t);
    }
  }
  for (const LogicalTensor& t : ckpt_.tensors()) {
    TM_RETURN_IF_ERROR(CheckValues(t));
  }
  return absl::OkStatus();
}

Finding Undecodable(const Checkpoint& ckpt, const LogicalTensor& t,
                    const absl::Status& why) {
  Finding f;
  f.rule = "undecodable-tensor";
  f.severity = FindCheckRule(f.rule)->severity;
  f.tensor = t.name;
  f.file = FileOfTensor(ckpt, t);
  f.expected = "a tensor Tensormorph decodes";
  f.actual =
      absl::StrCat(t.encoding->info().scheme, ": its values were not checked (",
                   why.message(), ")");
  f.hint =
      "check this tensor with the runtime that reads it (llama.cpp); its "
      "bytes were still checked for duplicates (and hashed, with --manifest "
      "or --verify)";
  return f;
}

absl::Status Checker::CheckValues(const LogicalTensor& t) {
  const int64_t bytes = PartBytes(t);
  if (not_decoded_.contains(ModuleOfTensor(t.name))) {
    // Its convention was not resolved: read as plain tensors its parts
    // would yield findings that are not true of the checkpoint.
    values_done_ += bytes;
    ++progress_.tensors_done;
    Tell();
    return absl::OkStatus();
  }
  if (hashes_) TM_RETURN_IF_ERROR(hashes_->Begin(t));
  const int64_t n = std::max<int64_t>(1, t.num_elements);
  int64_t done = 0, reported = 0;
  ValueScanOptions values = options_.values;
  values.saturated_groups = !judged_by_source_.contains(t.name);
  absl::Status scanned = ScanTensorValues(
      ckpt_, t, values, cancelled_,
      [&](int64_t m) {
        done += m;
        // The piece's bytes are still in cache: hash them now.
        if (hashes_) hashes_->Advance(done, n);
        const int64_t b = bytes * done / n;
        values_done_ += b - reported;
        reported = b;
        Tell();
      },
      &found_);
  if (absl::IsUnimplemented(scanned)) {
    // One tensor that cannot be decoded must not hide what the rest hold.
    found_.push_back(Undecodable(ckpt_, t, scanned));
  } else if (!scanned.ok()) {
    return scanned;
  }
  if (hashes_) TM_RETURN_IF_ERROR(hashes_->End(cancelled_));
  TM_RETURN_IF_ERROR(
      ScanStoredScales(ckpt_, t, cancelled_, &scanned_scales_, &found_));
  values_done_ += bytes - reported;
  ++progress_.tensors_done;
  ++summary_.tensors_checked;
  Tell();
  Report();
  return absl::OkStatus();
}

absl::Status Checker::FinishHashes() {
  TM_ASSIGN_OR_RETURN(std::vector<ManifestEntry> entries,
                      hashes_->Finish(cancelled_, [&](int64_t n) {
                        leftover_hashed_ += n;
                        Tell();
                      }));
  if (on_hash_) {
    for (const ManifestEntry& e : entries) on_hash_(e);
  }
  return IntegrityRules(&entries);
}

absl::StatusOr<CheckSummary> Checker::Run() {
  progress_.tensors_total = static_cast<int64_t>(ckpt_.tensors().size());
  for (const StoredTensor& t : ckpt_.stored_tensors()) {
    stored_bytes_ += static_cast<int64_t>(t.nbytes);
  }
  for (const LogicalTensor& t : ckpt_.tensors()) value_bytes_ += PartBytes(t);
  progress_.bytes_total = stored_bytes_;
  // Every stored byte is hashed only when the hashes are asked for
  // (--manifest, --verify), in the value pass; otherwise the duplicate rule
  // samples a few windows of the tensors that share a size (duplicates.h),
  // before the values.
  if (options_.hashes || options_.verify.has_value() || bool(on_hash_)) {
    hashes_ = std::make_unique<StoredHashes>(ckpt_);
  }
  Tell();
  TM_RETURN_IF_ERROR(StructureRules());
  if (!hashes_) TM_RETURN_IF_ERROR(IntegrityRules(nullptr));
  TM_RETURN_IF_ERROR(ValuePass());
  if (hashes_) TM_RETURN_IF_ERROR(FinishHashes());
  if (options_.source != nullptr) {
    TM_RETURN_IF_ERROR(CheckAgainstSource(
        ckpt_, *options_.source, cancelled_, [&](int64_t) { Tell(); },
        &found_));
    Report();
  }
  summary_.bytes_read = stored_bytes_;
  for (const CheckRule& r : CheckRules()) {
    auto it = tallies_.find(std::string(r.id));
    if (it != tallies_.end()) summary_.rules.push_back(it->second);
  }
  return std::move(summary_);
}

}  // namespace

void TallyFinding(const Finding& f, RuleTally* t) {
  // A rule's findings can differ in severity (source-err-steps is info for
  // a quantizer that chooses its codes): the tally, which people and
  // scripts read as the rule's verdict, takes the worst of them, and so
  // does its worst finding.
  const bool first = t->findings == 0;
  const bool worse = first || f.severity > t->severity ||
                     (f.severity == t->severity && f.count > t->worst_count);
  t->severity = first ? f.severity : std::max(t->severity, f.severity);
  ++t->findings;
  t->count += f.count;
  if (worse) {
    t->worst_count = f.count;
    t->worst_tensor = f.tensor;
    t->worst_group = f.worst_group;
  }
}

absl::StatusOr<CheckSummary> CheckUnopened(
    const std::string& checkpoint, const absl::Status& open_error,
    const CheckOptions& options,
    const std::function<void(const Finding&)>& on_finding) {
  if (!IsReason(open_error, ErrorReason::kHeaderInvalid)) return open_error;
  Finding f;
  f.rule = "shard-corrupt";
  f.severity = FindCheckRule(f.rule)->severity;
  f.file = checkpoint;
  for (const auto& [key, value] : ReasonMetadataOf(open_error)) {
    if (key == "file") f.file = value;
  }
  f.expected = "a file that keeps its format's rules";
  f.actual = std::string(open_error.message());
  f.hint =
      "copy the file again (compare its size and hash with the source): "
      "none of its tensors can be read, and nothing else opened to check";
  CheckSummary summary;
  summary.errors = f.severity == Severity::kError ? 1 : 0;
  summary.warnings = f.severity == Severity::kWarning ? 1 : 0;
  summary.infos = f.severity == Severity::kInfo ? 1 : 0;
  summary.failed = f.severity >= options.fail_level;
  RuleTally tally;
  tally.rule = f.rule;
  TallyFinding(f, &tally);
  summary.rules.push_back(std::move(tally));
  if (on_finding) on_finding(f);
  return summary;
}

absl::StatusOr<CheckSummary> CheckCheckpoint(
    const Checkpoint& ckpt, const CheckOptions& options,
    const std::atomic<bool>* cancelled,
    const std::function<void(const CheckProgress&)>& on_progress,
    const std::function<void(const Finding&)>& on_finding,
    const std::function<void(const ManifestEntry&)>& on_hash) {
  Checker checker(ckpt, options, cancelled, on_progress, on_finding, on_hash);
  return checker.Run();
}

}  // namespace tensormorph
