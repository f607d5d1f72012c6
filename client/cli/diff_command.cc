// tensormorph diff QUANT REF: the quantization diff as a CLI for people
// (a table sorted by worst error in steps, a progress bar) and for CI
// (--json lines, --fail-on gates with exit code 3).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/arguments.h"
#include "client/cli/command.h"
#include "client/cli/commands.h"
#include "client/cli/format.h"
#include "core/diff/gate.h"
#include "core/diff_parts/fingerprint.h"
#include "core/diff_parts/partition.h"
#include "core/request_limits.h"
#include "core/util/error_reason.h"

namespace tensormorph {
namespace {

// The gates of `gates` that `r` tripped, as written: the service ends each
// of its flag_reasons with "(GATE AS WRITTEN)".
std::vector<std::string> TrippedGates(const v1::TensorDiffReport& r,
                                      const std::vector<std::string>& gates) {
  std::vector<std::string> tripped;
  for (const std::string& gate : gates) {
    for (const std::string& reason : r.flag_reasons()) {
      if (absl::EndsWith(reason, absl::StrCat(" (", gate, ")"))) {
        tripped.push_back(gate);
        break;
      }
    }
  }
  return tripped;
}

// The run id of a part given no --run-id: 'inputs-' and 16 hex digits of
// FNV-1a 64 over both checkpoints as named, and each one's files (name and
// size) and total bytes as the server opened them. Every part of one batch
// computes the same; so do two batches over files of the same names and
// sizes (give --run-id to tell those apart: the overlays give the Job's uid).
absl::StatusOr<std::string> InputsRunId(Client& client,
                                        const DiffOptionsCli& o) {
  uint64_t hash = kFnv1a64Basis;
  auto feed = [&hash](absl::string_view s) {
    hash = Fnv1a64(absl::StrCat(s.size(), ":"), hash);
    hash = Fnv1a64(s, hash);
  };
  for (const std::string* path : {&o.quant, &o.reference}) {
    auto info = client.GetCheckpoint(*path);
    if (!info.ok()) return info.status();
    feed(*path);
    feed(absl::StrCat(info->files_size(), " files, ", info->total_bytes()));
    for (const v1::FileInfo& f : info->files()) {
      feed(f.path());
      feed(absl::StrCat(f.size_bytes()));
    }
  }
  return absl::StrFormat("inputs-%016x", hash);
}

}  // namespace

int RunDiff(Client& client, const GlobalOptions& g, const DiffOptionsCli& o) {
  // The service evaluates the gates (QuantDiffRequest.fail_on) and marks
  // what trips them; they are parsed here too, by the same core parser, so
  // a typo is a usage error (exit 1) and not a failed call (exit 2).
  std::vector<std::string> gates;
  for (const std::string& text : o.fail_on) {
    if (auto f = ParseDiffGate(text); !f.ok()) {
      return ReportUsage(CopyReason(
          f.status(),
          absl::Status(f.status().code(),
                       absl::StrCat("--fail-on: ", f.status().message()))));
    }
    gates.push_back(text);
  }
  v1::QuantDiffRequest req;
  req.set_checkpoint(o.quant);
  req.set_reference(o.reference);
  req.set_filter(o.filter);
  req.set_top_k(o.top_k);  // 0: none
  req.set_imatrix(o.imatrix);
  for (const std::string& text : gates) req.add_fail_on(text);
  if (o.part_count > 0) {
    req.mutable_part()->set_index(o.part_index);
    req.mutable_part()->set_count(o.part_count);
    std::string run_id = o.run_id;
    if (run_id.empty()) {
      auto derived = InputsRunId(client, o);
      if (!derived.ok()) return ReportFailure(derived.status());
      run_id = *std::move(derived);
    }
    req.mutable_part()->set_run_id(std::move(run_id));
  }
  const bool bar = !g.json && ::isatty(2);
  DiffResult result{o.quant, o.reference, gates, {}, {}};
  absl::Status s = client.QuantDiff(req, [&](const v1::QuantDiffEvent& event) {
    v1::QuantDiffEvent e = event;
    if (e.has_progress()) {
      if (g.json) {
        std::cerr << ToJson(e) << "\n";
      } else if (bar) {
        DrawProgressBar(e.progress());
      }
    } else if (e.has_tensor()) {
      result.reports.push_back(e.tensor());
      if (g.json) std::cout << ToJson(e) << std::endl;
    } else if (e.has_summary()) {
      result.summary = e.summary();
      if (g.json) std::cout << ToJson(e) << std::endl;
    }
    return true;
  });
  if (bar) ClearProgressBar();
  if (!s.ok()) return ReportFailure(s);
  if (o.part_count > 0 && !result.summary.has_part()) {
    // A server older than QuantDiffRequest.part diffed everything: its
    // output must not pass for a part.
    return ReportFailure(absl::UnimplementedError(
        "the server ignored --part (its summary says no part): it predates "
        "diffs in parts; its output is the whole diff, not part " +
        absl::StrCat(o.part_index, "/", o.part_count)));
  }
  if (result.summary.tensors_compared() == 0 && !result.summary.has_part() &&
      result.summary.undecodable_size() == 0) {
    // The service refuses such a diff itself (CheckPairing); an older one
    // may not, and a gate over nothing must not pass. A part may be empty:
    // its plan is not. Pairs that could not be decoded are the answer
    // itself: listed, and exit kExitGaps.
    return ReportFailure(absl::FailedPreconditionError(
        absl::StrCat("0 tensors compared between '", o.quant, "' and '",
                     o.reference, "': nothing passed or failed a gate")));
  }
  return PrintDiffResult(g, std::move(result));
}

namespace {

// The table of `reports` (worst first) with the gates each tripped, then
// the worst elements of the first.
void PrintDiffTable(const std::vector<v1::TensorDiffReport>& reports,
                    const std::vector<std::string>& gates, std::ostream& out) {
  std::vector<std::vector<std::string>> rows = {
      {"TENSOR", "SCHEME", "MAX ERR", "BOUND", "EXCESS", "NOT NEAREST",
       "CLIPPED", "ZEROED", "P99", "SQNR dB", "COSINE", "INDUCED 0",
       "SOURCE 0"}};
  // With an imatrix, the weighted SQNR ("-" where it has no entry).
  const bool weighted =
      std::any_of(reports.begin(), reports.end(), [](const auto& t) {
        return t.imatrix_use() != v1::IMATRIX_USE_UNSPECIFIED;
      });
  if (weighted) rows[0].push_back("W SQNR dB");
  // With gates, which of them each tensor tripped.
  if (!gates.empty()) rows[0].push_back("FAIL-ON");
  for (const auto& t : reports) {
    rows.push_back(
        {t.name(), t.scheme(), absl::StrFormat("%.4f", t.max_err_steps()),
         absl::StrFormat("%.4f", t.bound_steps()),
         absl::StrFormat("%.4f", t.max_excess_steps()),
         // Chosen codes (GPTQ): not nearest is information, in brackets.
         t.nearest_codes() ? absl::StrCat(t.not_nearest())
                           : absl::StrCat("(", t.not_nearest(), ")"),
         absl::StrCat(t.clipped()), absl::StrCat(t.zeroed_groups()),
         absl::StrFormat("%.4f", t.p99_err_steps()),
         absl::StrFormat("%.2f", t.sqnr_db()),
         absl::StrFormat("%.6f", t.cosine()), absl::StrCat(t.induced_zeros()),
         absl::StrCat(t.source_zeros())});
    if (weighted) {
      rows.back().push_back(t.imatrix_use() == v1::IMATRIX_USE_WEIGHTED
                                ? absl::StrFormat("%.2f", t.weighted_sqnr_db())
                                : "-");
    }
    if (!gates.empty()) {
      const std::vector<std::string> tripped = TrippedGates(t, gates);
      rows.back().push_back(tripped.empty() ? "-"
                                            : absl::StrJoin(tripped, ", "));
    }
  }
  out << "error in units of the local quantization step; BOUND: the most "
         "a correct quantizer of the format reaches (0.5, more where the "
         "stored scale was rounded to f16), EXCESS: the worst beyond it\n"
      << Table(rows);
  if (!reports.empty() && !reports[0].worst().empty()) {
    const auto& t = reports[0];
    out << "\nworst elements of " << t.name() << ":\n";
    std::vector<std::vector<std::string>> w = {{"INDEX", "SOURCE", "DECODED",
                                                "ERR STEPS", "CODE", "SCALE",
                                                "ZERO", "GROUP"}};
    for (const auto& e : t.worst()) {
      w.push_back(
          {ShapeText(e.index()), NumberText(e.source()),
           NumberText(e.decoded()), absl::StrFormat("%.4f", e.err_steps()),
           absl::StrCat(e.quant().raw_code()), NumberText(e.quant().scale()),
           NumberText(e.quant().zero_point()),
           absl::StrCat(e.quant().group())});
    }
    out << Table(w);
  }
}

// With an imatrix: the weighted totals, and the tensors it did not weigh.
void PrintWeightedSummary(const v1::DiffSummary& s, std::ostream& out) {
  if (s.imatrix_weighted() + s.imatrix_missing_size() +
          s.imatrix_mismatched_size() ==
      0) {
    return;
  }
  out << "imatrix: " << Count(s.imatrix_weighted(), "tensor")
      << " weighted, weighted SQNR ";
  if (s.imatrix_weighted() > 0) {
    out << absl::StrFormat(
        "%.2f dB (weighted squared error %.6g of source %.6g)",
        s.weighted_sqnr_db(), s.weighted_sq_err(), s.weighted_source_energy());
  } else {
    out << "-";  // nothing weighed: the sums are 0, no figure
  }
  out << "\n";
  if (s.imatrix_missing_size() > 0) {
    out << "imatrix has no entry for: "
        << absl::StrJoin(s.imatrix_missing(), ", ") << "\n";
  }
  for (const std::string& m : s.imatrix_mismatched()) {
    out << "imatrix entry does not fit " << m << "\n";
  }
}

// The lines under the table: totals, the part, what was not compared, what
// went beyond the bound, and the gates' tally.
void PrintDiffSummary(const DiffResult& r, std::ostream& out) {
  const v1::DiffSummary& summary = r.summary;
  const double gbps = summary.wall_seconds() > 0
                          ? summary.bytes_read() / 1e9 / summary.wall_seconds()
                          : 0;
  out << "\n"
      << Count(summary.tensors_compared(), "tensor") << " compared ("
      << PairingText(summary) << "), " << BytesText(summary.bytes_read())
      << " of source in "
      << absl::StrFormat("%.2f s (%.2f GB/s)", summary.wall_seconds(), gbps)
      << "\n";
  if (summary.has_part()) {
    const v1::DiffPartInfo& p = summary.part();
    out << "part " << p.index() << "/" << p.count() << " of plan "
        << p.plan_fingerprint() << ": " << summary.tensors_compared() << " of "
        << Count(p.plan_tensors(), "tensor") << ", "
        << BytesText(p.part_source_bytes()) << " of "
        << BytesText(p.plan_source_bytes())
        << " of source; `tensormorph diff-merge` puts the parts' "
           "--json output together\n";
  }
  if (summary.skipped_empty_size() > 0) {
    out << "skipped, empty (a zero dimension, nothing to compare): "
        << absl::StrJoin(summary.skipped_empty(), ", ") << "\n";
  }
  if (summary.only_in_checkpoint_size() > 0) {
    out << "only in " << r.quant << ": "
        << absl::StrJoin(summary.only_in_checkpoint(), ", ") << "\n";
  }
  if (summary.only_in_reference_size() > 0) {
    out << "only in " << r.reference << ": "
        << absl::StrJoin(summary.only_in_reference(), ", ") << "\n";
  }
  if (summary.undecodable_size() > 0) {
    out << "not compared, cannot decode (" << summary.undecodable_size()
        << "):\n";
    for (const std::string& u : summary.undecodable()) {
      out << "  " << u << "\n";
    }
  }
  if (summary.clipped() > 0) {
    out << "clipped: " << summary.clipped()
        << " elements outside their group's range"
        << (summary.max_excess_steps() > 0
                ? ""
                : " (no more than the formats clip by design)")
        << "\n";
  }
  if (summary.not_nearest() + summary.zeroed_groups() > 0 ||
      summary.max_excess_steps() > 0) {
    out << "beyond the bound: " << summary.not_nearest() << " not nearest; "
        << summary.zeroed_groups() << " zeroed groups; max excess "
        << absl::StrFormat("%.4f", summary.max_excess_steps()) << " steps\n";
  }
  PrintWeightedSummary(summary, out);
  if (summary.shape_mismatches_size() > 0) {
    out << "shape mismatches: "
        << absl::StrJoin(summary.shape_mismatches(), "; ") << "\n";
  }
  if (!r.gates.empty()) {
    out << "--fail-on: " << summary.flagged_size() << " of " << r.reports.size()
        << " tensors flagged" << (summary.flagged().empty() ? "" : ": ")
        << absl::StrJoin(summary.flagged(), ", ") << "\n";
  }
}

// A whole diff with an importance matrix that weighed none of the compared
// tensors: its weighted figures are all 0, which a script may read as
// measured; most likely the matrix is another model's. A part is not
// warned: its share may hold only tensors the matrix has no entry for.
void WarnIfImatrixMatchedNothing(const v1::DiffSummary& s) {
  const int unweighed = s.imatrix_missing_size() + s.imatrix_mismatched_size();
  if (s.has_part() || s.imatrix_weighted() > 0 || unweighed == 0) return;
  std::fprintf(stderr,
               "tensormorph: warning: the importance matrix weighed none of "
               "the %d compared tensors (%d without an entry of their name, "
               "%d with one of another size): is it another model's? No "
               "weighted figure is given\n",
               unweighed, s.imatrix_missing_size(),
               s.imatrix_mismatched_size());
}

// The exit code of a diff that ran: kExitThreshold when a gate tripped
// (each reason on stderr), kExitGaps when tensors could not be decoded.
int DiffExitCode(const v1::DiffSummary& summary,
                 const std::vector<v1::TensorDiffReport>& reports) {
  if (!summary.flagged().empty()) {
    std::fprintf(stderr, "tensormorph: --fail-on tripped by %d tensor(s):\n",
                 summary.flagged_size());
    for (const auto& t : reports) {
      for (const std::string& reason : t.flag_reasons())
        std::cerr << "  " << t.name() << ": " << reason << '\n';
    }
    return kExitThreshold;
  }
  if (summary.undecodable_size() > 0) {
    std::fprintf(stderr,
                 "tensormorph: %d tensor(s) not compared: cannot decode\n",
                 summary.undecodable_size());
    return kExitGaps;
  }
  return kExitOk;
}

}  // namespace

int PrintDiffResult(const GlobalOptions& g, DiffResult r, std::ostream& out) {
  if (!g.json) {
    std::sort(r.reports.begin(), r.reports.end(),
              [](const auto& a, const auto& b) {
                return a.max_err_steps() != b.max_err_steps()
                           ? a.max_err_steps() > b.max_err_steps()
                           : a.name() < b.name();
              });
    PrintDiffTable(r.reports, r.gates, out);
    PrintDiffSummary(r, out);
  }
  WarnIfImatrixMatchedNothing(r.summary);
  return DiffExitCode(r.summary, r.reports);
}

namespace {

class DiffCommand : public Command {
 public:
  explicit DiffCommand(CLI::App& app)
      : Command(app.add_subcommand(
            "diff",
            "quantization diff: a quantized checkpoint against its "
            "full-precision source, with error in units of the local "
            "quantization step")) {
    CLI::App& cmd = *this->app();
    cmd.add_option("quantized", o_.quant, "the quantized checkpoint")
        ->transform(ServedPath())
        ->required();
    cmd.add_option("reference", o_.reference, "its full-precision source")
        ->transform(ServedPath())
        ->required();
    cmd.add_option("--filter", o_.filter,
                   "glob on the quantized tensors' names");
    cmd.add_option("--top", o_.top_k,
                   "worst elements reported per tensor (0 = none); the "
                   "table prints those of the worst tensor, --json every "
                   "tensor's")
        ->capture_default_str()
        ->check(CLI::Range(0, kMaxDiffTopK));
    cmd.add_option(
        "--fail-on", o_.fail_on,
        "exit 3 when any tensor trips METRIC OP NUMBER (repeatable), e.g. "
        "'max_excess_steps>0', 'not_nearest>0' or 'sqnr_db<25'");
    imatrix_ = cmd.add_option(
                      "--imatrix", o_.imatrix,
                      "llama.cpp importance matrix (GGUF or legacy .dat): also "
                      "report each tensor's squared error weighted by its "
                      "columns' importance, and its weighted SQNR")
                   ->transform(ServedPath());
    cmd.add_option("--part", part_,
                   "only part i of N (from 0): a share of the tensors, "
                   "balanced by bytes, one shard file's together where "
                   "balance allows; the same split on every machine. Merge "
                   "the parts' --json output with diff-merge")
        ->check(ParsedBy(
            [](const std::string& text) { return ParseDiffPart(text); },
            "i/N"));
    cmd.add_option(
           "--run-id", o_.run_id,
           "with --part: the batch run the part belongs to, written into it "
           "so that diff-merge refuses parts of different runs; every part "
           "of a run gives the same (a Kubernetes Job's uid, a CI run "
           "number). Unset: a fingerprint of the two checkpoints' files "
           "(names and sizes), the same for every part")
        ->envname("TENSORMORPH_RUN_ID")
        ->check(CLI::Validator(
            [](std::string& text) {
              return std::string(CheckDiffRunId(text).message());
            },
            "ID"));
    cmd.footer(
        "Error in steps is |x - x_hat| / the gap between quantization levels. "
        "Each format states\n"
        "its bound (BOUND): 0.5 for round-to-nearest, a little more where "
        "the scale is stored\n"
        "as f16 (Q8_0, Q4_x, Q5_x), a designed clip for Q4_0/Q5_0, K-quants "
        "and IQ4.\n"
        "CLIPPED counts sources outside their group's range (by design or "
        "not); NOT NEAREST\n"
        "those inside it with another level closer; EXCESS is how far the "
        "worst lies beyond\n"
        "the bound; zero-scale groups are counted apart (ZEROED).\n"
        "Examples:\n  tensormorph diff model-q4_k.gguf hf-source/ --filter "
        "'blk.0.*'\n"
        "  tensormorph diff quant/ source/ --json --fail-on "
        "'max_excess_steps>0' --fail-on 'sqnr_db<25'\n"
        "  tensormorph diff quant/ source/ --part 1/3 --json > part-1.jsonl   "
        "(see diff-merge)");
  }
  absl::Status Finish() override {
    // QuantDiffRequest.imatrix empty means none: the service cannot tell
    // an empty path from no option, so an empty --imatrix (an unset shell
    // variable) would diff unweighted and pass for a weighted run.
    if (imatrix_->count() > 0 && o_.imatrix.empty()) {
      return RequestFieldError(
          "imatrix",
          "--imatrix: the path is empty (leave --imatrix out for an "
          "unweighted diff)");
    }
    if (part_.empty()) return absl::OkStatus();
    auto part = ParseDiffPart(part_);  // checked by CLI11 already
    if (!part.ok()) return part.status();
    std::tie(o_.part_index, o_.part_count) = *part;
    return absl::OkStatus();
  }
  int Run(const CommandContext& c) override {
    return RunDiff(*c.client, c.global, o_);
  }

 private:
  DiffOptionsCli o_;
  CLI::Option* imatrix_ = nullptr;
  std::string part_;
};

}  // namespace

std::unique_ptr<Command> RegisterDiff(CLI::App& app) {
  return std::make_unique<DiffCommand>(app);
}

}  // namespace tensormorph
