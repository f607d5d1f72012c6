#include "core/check/check.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/check/convention_rules.h"
#include "core/check/duplicates.h"
#include "core/check/rules.h"
#include "core/check/scale_scan.h"
#include "core/check/source_rules.h"
#include "core/check/structure_rules.h"
#include "core/diff/pairing.h"
#include "core/io/fault_guard.h"
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

}  // namespace

absl::StatusOr<CheckSummary> CheckCheckpoint(
    const Checkpoint& ckpt, const CheckOptions& options,
    const std::atomic<bool>* cancelled,
    const std::function<void(const CheckProgress&)>& on_progress,
    const std::function<void(const Finding&)>& on_finding,
    const std::function<void(const ManifestEntry&)>& on_hash) {
  CheckSummary summary;
  std::map<std::string, RuleTally> tallies;
  auto report = [&](std::vector<Finding>* found) {
    for (Finding& f : *found) {
      switch (f.severity) {
        case Severity::kError:
          ++summary.errors;
          break;
        case Severity::kWarning:
          ++summary.warnings;
          break;
        case Severity::kInfo:
          ++summary.infos;
          break;
      }
      if (f.severity >= options.fail_level) summary.failed = true;
      RuleTally& t = tallies[f.rule];
      t.rule = f.rule;
      t.severity = f.severity;
      ++t.findings;
      t.count += f.count;
      if (f.count > t.worst_count || t.worst_tensor.empty()) {
        t.worst_count = f.count;
        t.worst_tensor = f.tensor;
        t.worst_group = f.worst_group;
      }
      if (on_finding) on_finding(f);
    }
    found->clear();
  };

  CheckProgress progress;
  progress.tensors_total = static_cast<int64_t>(ckpt.tensors().size());
  // Every stored byte is hashed only when the hashes are asked for
  // (--manifest, --verify); otherwise the duplicate rule samples a few
  // windows of the tensors that share a size (duplicates.h).
  const bool hash_all =
      options.hashes || options.verify.has_value() || bool(on_hash);
  // Each stored byte counts once: when hashed, half when it is hashed and
  // half when the values it holds are checked, so that the bar moves
  // through both passes and ends at the checkpoint's size (bytes_read), not
  // twice it; otherwise all of it when its values are checked.
  int64_t stored_bytes = 0, value_bytes = 0;  // what each pass goes through
  for (const StoredTensor& t : ckpt.stored_tensors()) {
    stored_bytes += static_cast<int64_t>(t.nbytes);
  }
  for (const LogicalTensor& t : ckpt.tensors()) value_bytes += PartBytes(t);
  progress.bytes_total = stored_bytes;
  const int64_t hash_share = hash_all ? stored_bytes / 2 : 0;
  int64_t hashed = 0, values_done = 0;
  auto tell = [&] {
    // hashed <= stored_bytes and values_done <= value_bytes: the sum of the
    // shares never passes the total. In double: products of two sizes.
    const double v = value_bytes > 0 ? static_cast<double>(values_done) /
                                           static_cast<double>(value_bytes)
                                     : 1.0;
    progress.bytes_done = std::min<int64_t>(
        stored_bytes,
        (hash_all ? hashed / 2 : 0) +
            static_cast<int64_t>((stored_bytes - hash_share) * v));
    if (on_progress) on_progress(progress);
  };
  tell();

  std::vector<Finding> found;
  // Structure and conventions: cheap, and what most often explains the
  // value findings.
  TM_ASSIGN_OR_RETURN(std::optional<conventions::QuantConfig> config,
                      ReadQuantConfig(ckpt));
  std::string config_file;
  if (config) {
    for (const Checkpoint::ReadFile& f : ckpt.read_files()) {
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
    CheckCompressedTensorsStorage(ckpt, *config, config_file, &explained,
                                  &dense, &found);
  }
  std::set<std::string> quiet = explained;
  quiet.insert(dense.begin(), dense.end());
  ReportOpenProblems(ckpt, quiet, &found);
  CheckCompanions(ckpt, config, quiet, &found);
  std::set<std::string> not_decoded = ModulesNotDecoded(found);
  not_decoded.insert(explained.begin(), explained.end());
  TM_RETURN_IF_ERROR(CheckGptqZeroConvention(ckpt, &found));
  if (config) CheckIgnorePatterns(ckpt, *config, config_file, &found);
  if (config) CheckModelOptExcluded(ckpt, *config, &found);
  report(&found);

  // Integrity: every stored tensor's bytes, when asked for; the duplicate
  // rule either way.
  std::vector<ManifestEntry> hashes;
  if (hash_all) {
    hashes.reserve(ckpt.stored_tensors().size());
    for (const StoredTensor& t : ckpt.stored_tensors()) {
      TM_ASSIGN_OR_RETURN(ManifestEntry e,
                          HashStoredTensor(ckpt, t, cancelled, [&](int64_t n) {
                            hashed += n;
                            tell();
                          }));
      if (on_hash) on_hash(e);
      hashes.push_back(std::move(e));
    }
  }
  summary.stored_tensors = static_cast<int64_t>(ckpt.stored_tensors().size());
  TM_RETURN_IF_ERROR(FindDuplicateTensors(ckpt, hash_all ? &hashes : nullptr,
                                          cancelled, &found));
  if (options.verify) {
    std::vector<Finding> mismatches = CompareManifest(*options.verify, hashes);
    for (Finding& f : mismatches) {
      // The manifest names files by base name; say where the copy's is.
      for (const ManifestEntry& e : hashes) {
        if (e.name == f.tensor) {
          f.file = ckpt.files()[ckpt.FindStored(e.name)->file_index].path;
          break;
        }
      }
      found.push_back(std::move(f));
    }
  }
  report(&found);

  // Values: one pass over every logical tensor.
  absl::flat_hash_set<const StoredTensor*> scanned_scales;
  const absl::flat_hash_set<std::string> judged_by_source =
      options.source != nullptr ? JudgedBySource(ckpt, *options.source)
                                : absl::flat_hash_set<std::string>();
  for (const LogicalTensor& t : ckpt.tensors()) {
    const int64_t bytes = PartBytes(t);
    if (not_decoded.contains(ModuleOfTensor(t.name))) {
      // Its convention was not resolved: read as plain tensors its parts
      // would yield findings that are not true of the checkpoint.
      values_done += bytes;
      ++progress.tensors_done;
      tell();
      continue;
    }
    const int64_t n = std::max<int64_t>(1, t.num_elements);
    int64_t done = 0, reported = 0;
    ValueScanOptions values = options.values;
    values.saturated_groups = !judged_by_source.contains(t.name);
    absl::Status scanned = ScanTensorValues(
        ckpt, t, values, cancelled,
        [&](int64_t m) {
          done += m;
          const int64_t b = bytes * done / n;
          values_done += b - reported;
          reported = b;
          tell();
        },
        &found);
    if (absl::IsUnimplemented(scanned)) {
      // One tensor that cannot be decoded must not hide what the rest hold.
      Finding f;
      f.rule = "undecodable-tensor";
      f.severity = FindCheckRule(f.rule)->severity;
      f.tensor = t.name;
      f.file = FileOfTensor(ckpt, t);
      f.expected = "a tensor Tensormorph decodes";
      f.actual = absl::StrCat(t.encoding->info().scheme,
                              ": its values were not checked (",
                              scanned.message(), ")");
      f.hint =
          "check this tensor with the runtime that reads it "
          "(llama.cpp); its bytes were still checked for duplicates (and "
          "hashed, with --manifest or --verify)";
      found.push_back(std::move(f));
    } else if (!scanned.ok()) {
      return scanned;
    }
    TM_RETURN_IF_ERROR(
        ScanStoredScales(ckpt, t, cancelled, &scanned_scales, &found));
    values_done += bytes - reported;
    ++progress.tensors_done;
    ++summary.tensors_checked;
    tell();
    report(&found);
  }
  if (options.source != nullptr) {
    TM_RETURN_IF_ERROR(CheckAgainstSource(
        ckpt, *options.source, cancelled, [&](int64_t) { tell(); }, &found));
    report(&found);
  }
  summary.bytes_read = stored_bytes;
  for (const CheckRule& r : CheckRules()) {
    auto it = tallies.find(std::string(r.id));
    if (it != tallies.end()) summary.rules.push_back(it->second);
  }
  return summary;
}

}  // namespace tensormorph
