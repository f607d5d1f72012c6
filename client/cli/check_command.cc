// tensormorph check: findings grouped by rule for people (with a progress
// bar on a terminal), one JSON finding per line and a summary for CI, and
// exit code 3 when anything is at or above --fail-level.
#include "client/cli/check_command.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/arguments.h"
#include "client/cli/command.h"
#include "client/cli/format.h"
#include "client/cli/output_file.h"
#include "core/check/manifest.h"
#include "core/check/rules.h"

namespace tensormorph {
namespace {

const char* SeverityText(v1::CheckSeverity s) {
  switch (s) {
    case v1::CHECK_SEVERITY_INFO:
      return "info";
    case v1::CHECK_SEVERITY_WARNING:
      return "warning";
    default:
      return "error";
  }
}

v1::CheckSeverity SeverityProto(const std::string& level) {
  if (level == "info") return v1::CHECK_SEVERITY_INFO;
  if (level == "warning") return v1::CHECK_SEVERITY_WARNING;
  return v1::CHECK_SEVERITY_ERROR;
}

// Puts the manifest at `path` (--verify) into `req`. INVALID_ARGUMENT (a
// usage error) when it cannot be read or does not parse: parsed here too,
// so a broken manifest is a usage error naming the field, not a failed call.
absl::Status SetVerifyManifest(const std::string& path,
                               v1::CheckCheckpointRequest* req) {
  absl::StatusOr<std::string> text = ReadOptionFile("--verify", path);
  if (!text.ok()) return text.status();
  if (auto m = ParseManifest(*text); !m.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--verify '", path, "': ", m.status().message()));
  }
  req->set_verify_manifest(*std::move(text));
  return absl::OkStatus();
}

// What a check's stream brought, as RunCheck prints it.
struct CheckStream {
  std::vector<v1::CheckFinding> findings;  // kept for people, not --json
  std::vector<ManifestEntry> hashes;
  v1::CheckSummary summary;
  bool summarized = false;
};

// Runs the check `req`, printing its events as they come under --json (and
// a progress bar on a terminal otherwise), keeping the rest in `out`.
absl::Status StreamCheck(Client& client, const GlobalOptions& g,
                         const v1::CheckCheckpointRequest& req,
                         CheckStream* out) {
  const bool bar = !g.json && ::isatty(2);
  absl::Status s = client.CheckCheckpoint(req, [&](const v1::CheckEvent& e) {
    if (e.has_progress()) {
      if (g.json) {
        std::cerr << ToJson(e) << "\n";
      } else if (bar) {
        DrawProgressBar(e.progress());
      }
    } else if (e.has_finding()) {
      if (g.json) {
        std::cout << ToJson(e) << std::endl;
      } else {
        out->findings.push_back(e.finding());
      }
    } else if (e.has_hash()) {
      const v1::CheckTensorHash& h = e.hash();
      out->hashes.push_back({h.name(), h.file(), h.offset(), h.size(),
                             h.dtype(),
                             std::strtoull(h.xxh3_64().c_str(), nullptr, 16)});
    } else if (e.has_summary()) {
      out->summary = e.summary();
      out->summarized = true;
      if (g.json) std::cout << ToJson(e) << std::endl;
    }
    return true;
  });
  if (bar) ClearProgressBar();
  return s;
}

// Prints `findings` grouped by rule, in the summary's (the README's) order.
void PrintFindingsByRule(const v1::CheckSummary& summary,
                         const std::vector<v1::CheckFinding>& findings) {
  std::map<std::string, std::vector<const v1::CheckFinding*>> by_rule;
  for (const v1::CheckFinding& f : findings) by_rule[f.rule()].push_back(&f);
  for (const v1::CheckRuleTally& r : summary.rules()) {
    std::cout << SeverityText(r.severity()) << " " << r.rule() << ": "
              << Count(r.findings(), "finding");
    if (r.findings() > 1 && !r.worst_tensor().empty()) {
      std::cout << ", worst " << r.worst_tensor();
      if (r.has_worst_group())
        std::cout << " (group " << r.worst_group() << ")";
    }
    std::cout << "\n";
    for (const v1::CheckFinding* f : by_rule[r.rule()]) {
      std::cout << "  " << (f->tensor().empty() ? "(checkpoint)" : f->tensor());
      if (!f->file().empty()) std::cout << "  [" << f->file() << "]";
      std::cout << "\n    expected: " << f->expected()
                << "\n    actual:   " << f->actual()
                << "\n    hint:     " << f->hint() << "\n";
    }
  }
}

// Prints the summary line for people, and where the manifest of `hashes`
// went when one was asked for.
void PrintCheckSummary(const v1::CheckSummary& summary,
                       const CheckOptionsCli& o, size_t hashes,
                       bool manifest_written) {
  const double gbps = summary.wall_seconds() > 0
                          ? summary.bytes_read() / 1e9 / summary.wall_seconds()
                          : 0;
  std::cout << (summary.rules().empty() ? "" : "\n")
            << Count(summary.tensors_checked(), "tensor") << " checked ("
            << Count(summary.stored_tensors(), "stored tensor") << ", "
            << BytesText(summary.bytes_read()) << " in "
            << absl::StrFormat("%.2f s, %.2f GB/s", summary.wall_seconds(),
                               gbps)
            << "): " << Count(summary.errors(), "error") << ", "
            << Count(summary.warnings(), "warning") << ", "
            << Count(summary.infos(), "info") << "\n";
  if (manifest_written) {
    std::cout << "manifest of "
              << Count(static_cast<int64_t>(hashes), "stored tensor")
              << " written to " << o.manifest << "\n";
  } else if (!o.manifest.empty()) {
    std::cout << "no manifest written: nothing was hashed (" << o.manifest
              << " is as it was)\n";
  }
}

}  // namespace

std::string CheckHelpFooter() {
  std::string out =
      "Severities:\n"
      "  error    wrong: the model will answer wrong (NaN values, a zero-point "
      "convention\n"
      "           that contradicts the config, bytes that differ from the "
      "manifest)\n"
      "  warning  probably wrong or lossy, though it loads and runs (zero "
      "scales,\n"
      "           all-zero groups, ignore patterns that match nothing)\n"
      "  info     worth knowing (tensors with identical bytes)\n"
      "Exit codes: 0 nothing at or above --fail-level, 3 something is, 2 the "
      "call failed,\n"
      "1 a usage error. --json prints one finding per line, then the "
      "summary.\n"
      "Rules:\n";
  for (const CheckRule& r : CheckRules()) {
    absl::StrAppendFormat(&out, "  %-22s %-8s %s\n", r.id,
                          SeverityName(r.severity), r.brief);
  }
  absl::StrAppend(
      &out,
      "(docs/check.md: each rule's failure and threshold.)\n"
      "Examples:\n"
      "  tensormorph check llama-70b-gptq/\n"
      "  tensormorph check model/ --json --fail-level warning > "
      "findings.jsonl\n"
      "  tensormorph check model/ --manifest model.manifest.json\n"
      "  tensormorph check /mnt/copy/model/ --verify model.manifest.json\n"
      "  tensormorph check llama-8b-w8a16/ --source llama-8b/");
  return out;
}

int RunCheck(Client& client, const GlobalOptions& g, const CheckOptionsCli& o) {
  v1::CheckCheckpointRequest req;
  req.set_checkpoint(o.checkpoint);
  req.set_fail_level(SeverityProto(o.fail_level));
  req.set_hashes(!o.manifest.empty());
  req.set_source(o.source);
  if (!o.verify.empty()) {
    if (absl::Status s = SetVerifyManifest(o.verify, &req); !s.ok()) {
      return ReportUsage(s);
    }
  }
  // Opened before the check runs: a path that cannot be written is a usage
  // error now, not a failure after the whole checkpoint was read. Written
  // to a temporary: a check that fails leaves the manifest that was there.
  std::unique_ptr<OutputFile> manifest_out;
  if (!o.manifest.empty()) {
    auto file = CreateOutput("--manifest", o.manifest);
    if (!file.ok()) return ReportFailure(file.status());
    manifest_out = *std::move(file);
  }
  CheckStream run;
  if (absl::Status s = StreamCheck(client, g, req, &run); !s.ok()) {
    return ReportFailure(s);
  }
  if (!run.summarized) {
    return ReportFailure(absl::InternalError(
        "the check ended without a summary: nothing can be said to pass"));
  }
  // A failed check that hashed nothing (no file opened) has no manifest to
  // give: the file there is kept, as when a call fails.
  const bool write_manifest =
      manifest_out != nullptr && (!run.hashes.empty() || !run.summary.failed());
  if (write_manifest) {
    absl::Status written = manifest_out->Write(ManifestJson(run.hashes));
    if (written.ok()) written = manifest_out->Commit();
    if (!written.ok()) {
      return ReportFailure(absl::Status(
          written.code(), absl::StrCat("--manifest: ", written.message())));
    }
  }
  if (!g.json) {
    PrintFindingsByRule(run.summary, run.findings);
    PrintCheckSummary(run.summary, o, run.hashes.size(), write_manifest);
  }
  if (run.summary.failed()) {
    std::fprintf(stderr, "tensormorph: check failed: findings at or above %s\n",
                 o.fail_level.c_str());
    return kExitThreshold;
  }
  return kExitOk;
}

namespace {

class CheckCommand : public Command {
 public:
  explicit CheckCommand(CLI::App& app)
      : Command(app.add_subcommand(
            "check",
            "validate a checkpoint before serving it: index and companions, "
            "config keys, NaN/Inf, broken scales and groups, convention "
            "mismatches, duplicate tensors, integrity against a manifest, "
            "errors against a source")) {
    CLI::App& cmd = *this->app();
    cmd.add_option("checkpoint", o_.checkpoint, "checkpoint file or directory")
        ->transform(ServedPath())
        ->required();
    cmd.add_option("--fail-level", o_.fail_level,
                   "exit 3 when a finding is at or above this severity")
        ->capture_default_str()
        ->check(CLI::IsMember({"error", "warning", "info"}));
    cmd.add_option("--manifest", o_.manifest,
                   std::string("write every stored tensor's content hash "
                               "(XXH3-64) to this JSON file") +
                       kOutputGuarantee)
        ->check(OutputPathValidator());
    cmd.add_option(
        "--verify", o_.verify,
        "check the stored bytes against a manifest --manifest wrote: every "
        "tensor that differs, is missing or is extra is an error");
    cmd.add_option(
           "--source", o_.source,
           "also diff every quantized tensor against this full-precision "
           "source "
           "and hold it to the scheme's default gates (source-err-steps, "
           "source-sqnr)")
        ->transform(ServedPath());
    cmd.footer(CheckHelpFooter());
  }
  GuardedOutput Output() const override {
    constexpr auto kCheckpoint = CommandInput::Kind::kCheckpoint;
    return {"--manifest",
            o_.manifest,
            {{kCheckpoint, o_.checkpoint, "checkpoint"},
             {kCheckpoint, o_.source, "--source checkpoint"},
             {CommandInput::Kind::kFile, o_.verify, "--verify manifest"}}};
  }
  int Run(const CommandContext& c) override {
    return RunCheck(*c.client, c.global, o_);
  }

 private:
  CheckOptionsCli o_;
};

}  // namespace

std::unique_ptr<Command> RegisterCheck(CLI::App& app) {
  return std::make_unique<CheckCommand>(app);
}

}  // namespace tensormorph
