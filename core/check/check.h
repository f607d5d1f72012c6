// `tensormorph check`: validates a checkpoint before anyone serves it, in
// one pass over its tensors, streaming findings as it goes.
#ifndef TENSORMORPH_CORE_CHECK_CHECK_H_
#define TENSORMORPH_CORE_CHECK_CHECK_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/check/finding.h"
#include "core/check/manifest.h"
#include "core/check/value_scan.h"
#include "core/format/checkpoint.h"

namespace tensormorph {

struct CheckOptions {
  // Findings at or above this severity fail the check (CheckSummary.failed).
  Severity fail_level = Severity::kError;
  // Pass every stored tensor's manifest entry to on_hash (--manifest).
  // Every stored byte is hashed (XXH3-64) only with hashes, verify or an
  // on_hash callback; otherwise duplicates are found from sampled
  // fingerprints (duplicates.h), with the same findings.
  bool hashes = false;
  // Check the stored bytes against this manifest (--verify).
  std::optional<std::vector<ManifestEntry>> verify;
  ValueScanOptions values;
  // Diff every quantized tensor against this source (--source): the
  // source-err-steps and source-sqnr rules (source_rules.h). A tensor the
  // diff holds to max_excess_steps is not judged by saturated-group: the
  // diff sees its clipping, the end levels only hint at it. Must outlive
  // the call.
  const Checkpoint* source = nullptr;
};

struct CheckProgress {
  int64_t tensors_done = 0, tensors_total = 0;  // logical tensors decoded
  // Progress through the checkpoint's stored bytes, each counted once:
  // bytes_total is their sum. The value pass moves them (hashing, when every
  // stored byte is hashed, the bytes it reads as it reads them); the bytes
  // it does not read move when they are hashed after it.
  int64_t bytes_done = 0, bytes_total = 0;
};

// Per rule that fired: how many findings, the sum of their counts, and its
// worst finding (its tensor and group): the one with the largest count among
// those of the rule's severity.
struct RuleTally {
  std::string rule;
  // The worst of its findings' severities: one rule's findings may differ
  // (source-err-steps), and one error among infos must read as an error.
  Severity severity = Severity::kError;
  int64_t findings = 0;
  int64_t count = 0;
  std::string worst_tensor;
  int64_t worst_group = -1;
  int64_t worst_count = 0;
};

// Adds finding `f` (of rule t->rule, or of a tally not yet begun) to `*t`:
// the severity becomes the worst seen, the counts grow, and `f` becomes the
// worst finding when it is more severe than the worst so far, or as severe
// with a larger count. Why: the worst tensor is what a reader fixes first;
// an information finding with many elements must not stand for a rule that
// tallies as an error because of another tensor.
void TallyFinding(const Finding& f, RuleTally* t);

struct CheckSummary {
  int64_t errors = 0, warnings = 0, infos = 0;  // findings per severity
  std::vector<RuleTally> rules;                 // in CheckRules() order
  // Whether any finding is at or above options.fail_level.
  bool failed = false;
  int64_t tensors_checked = 0;  // logical tensors
  // The checkpoint's stored tensors: each hashed when the hashes are asked
  // for; otherwise compared by size, and sampled where sizes match, for the
  // duplicate rule.
  int64_t stored_tensors = 0;
  // The checkpoint's stored bytes, each counted once: what the check went
  // through (the value pass reads every logical tensor's parts, hashing
  // them when asked for; every other stored tensor is then hashed).
  int64_t bytes_read = 0;
};

// Checks `ckpt`: the convention rules, the integrity rules (duplicate-tensor)
// and the value and scale rules over every logical tensor in order. With
// options.hashes, options.verify or on_hash, a content hash of every stored
// tensor is taken in the value pass that reads its bytes (stored_hashes.h;
// the rest after it), and the integrity rules run after the values: the
// hashes go to on_hash in ckpt.stored_tensors() order and are compared
// against options.verify (manifest-mismatch). Each finding goes to on_finding
// as soon as it is known; on_progress after each piece of work (callers
// throttle). Memory stays bounded by a piece of values and the hashes of the
// stored tensors, whatever the checkpoint's size. Callbacks run on the calling
// thread. A tensor that cannot be decoded is an undecodable-tensor finding, not
// an error of the call. With options.source, last, the diff against the source.
// Errors: CANCELLED; those of GuardedRead (a file that shrank under the
// read) and of reading the configs again (ReadQuantConfig); with a source,
// those of CheckAgainstSource (a source with nothing to compare).
absl::StatusOr<CheckSummary> CheckCheckpoint(
    const Checkpoint& ckpt, const CheckOptions& options,
    const std::atomic<bool>* cancelled,
    const std::function<void(const CheckProgress&)>& on_progress,
    const std::function<void(const Finding&)>& on_finding,
    const std::function<void(const ManifestEntry&)>& on_hash = {});

// The check of a checkpoint whose open failed with `open_error`: where its
// bytes break its format's rules (DATA_LOSS HEADER_INVALID: a lone file,
// or every shard, truncated or with a header that lies), one shard-corrupt
// finding naming the file the open named (the first such; the others are
// not read) and what it found, given to on_finding, and the summary of
// that one finding (failed as options.fail_level says). Why: a corrupt
// file is a finding whether or not it lies beside good shards, so a script
// tells "the check found damage" (findings, exit 3) from "the check could
// not run" (an error, exit 2) by what happened, not by the layout.
// Errors: `open_error` itself, for any other reason (a path not there, a
// refusal, a version not supported): nothing was checked.
absl::StatusOr<CheckSummary> CheckUnopened(
    const std::string& checkpoint, const absl::Status& open_error,
    const CheckOptions& options,
    const std::function<void(const Finding&)>& on_finding);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_CHECK_CHECK_H_
