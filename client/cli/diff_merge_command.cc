// tensormorph diff-merge PART...: the files that `tensormorph diff --part i/N
// --json` wrote, put back together into what one run of the whole diff
// prints (client/cli/diff_merge.h), and gated as `diff --fail-on` gates.
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "client/cli/command.h"
#include "client/cli/commands.h"
#include "client/cli/diff_merge.h"
#include "client/cli/format.h"
#include "client/cli/output_file.h"
#include "client/diff_parts_proto.h"
#include "core/diff/gate.h"
#include "core/util/error_reason.h"
#include "core/util/utf8.h"
#include "google/protobuf/util/json_util.h"

namespace tensormorph {
namespace {

// The longest line a part file may hold: a tensor report with the most
// worst elements the server sends (Limits.max_top_k) is a few tens of MB of
// JSON; a longer line is no report, and is refused before it is held.
constexpr size_t kMaxPartLineBytes = 256u << 20;

// Reads `in` line by line, each line at most kMaxPartLineBytes.
class PartLines {
 public:
  explicit PartLines(std::istream& in) : in_(in) {}
  // The next line (without its newline) in `line`; false at the end.
  // Errors: INVALID_ARGUMENT for a line past kMaxPartLineBytes.
  absl::StatusOr<bool> Next(std::string* line) {
    line->clear();
    for (;;) {
      if (pos_ == buf_.size()) {
        if (done_) return !line->empty();
        buf_.resize(1 << 20);
        in_.read(buf_.data(), static_cast<std::streamsize>(buf_.size()));
        buf_.resize(static_cast<size_t>(in_.gcount()));
        pos_ = 0;
        done_ = !in_;
        continue;
      }
      const size_t nl = buf_.find('\n', pos_);
      const size_t end = nl == std::string::npos ? buf_.size() : nl;
      if (line->size() + (end - pos_) > kMaxPartLineBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("a line longer than ", kMaxPartLineBytes >> 20,
                         " MiB: no tensor report is that long"));
      }
      line->append(buf_, pos_, end - pos_);
      pos_ = end;
      if (nl != std::string::npos) {
        ++pos_;
        return true;
      }
    }
  }

 private:
  std::istream& in_;
  std::string buf_;
  size_t pos_ = 0;
  bool done_ = false;
};

// The events of one part file: its JSON lines as QuantDiffEvent (progress
// lines skipped: `diff --json` writes them to stderr, but a file may hold
// them when both streams were sent to it).
// Errors: INVALID_ARGUMENT naming the file (and line): unreadable, a line
// that is no QuantDiffEvent, an event of no kind, a second summary.
absl::StatusOr<DiffPartEvents> ReadPartFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read part file '", path, "'"));
  }
  DiffPartEvents part;
  part.label = path;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;  // another version's: refuse
  std::string line;
  PartLines lines(in);
  for (int n = 1;; ++n) {
    absl::StatusOr<bool> more = lines.Next(&line);
    if (!more.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " line ", n, ": ", more.status().message()));
    }
    if (!*more) break;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    v1::QuantDiffEvent e;
    const auto st = google::protobuf::util::JsonStringToMessage(
        KeepNegativeZeros(line), &e, options);
    if (!st.ok()) {
      // The parser's first line says what broke; the lines after it quote
      // the file's bytes, which may be anything.
      const std::string message(st.message());
      const std::string why = message.substr(0, message.find('\n'));
      return absl::InvalidArgumentError(absl::StrCat(
          path, " line ", n, ": not a QuantDiffEvent as `tensormorph diff ",
          "--json` writes them: ", EscapeUtf8(why)));
    }
    switch (e.event_case()) {
      case v1::QuantDiffEvent::kProgress:
        break;
      case v1::QuantDiffEvent::kTensor:
        part.reports.push_back(std::move(*e.mutable_tensor()));
        break;
      case v1::QuantDiffEvent::kSummary:
        if (part.summary.has_value()) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, " line ", n,
                           ": a second summary line (one part per file)"));
        }
        part.summary = std::move(*e.mutable_summary());
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat(path, " line ", n,
                         ": an event with no tensor, summary or progress"));
    }
  }
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read part file '", path, "' to its end"));
  }
  return part;
}

// A gate metric's value in `r`: every metric is a numeric field of
// TensorDiffReport by the same name (gate.h), read by reflection so the two
// lists cannot drift apart silently.
std::optional<double> ReportMetric(const v1::TensorDiffReport& r,
                                   absl::string_view metric) {
  const auto* field =
      v1::TensorDiffReport::descriptor()->FindFieldByName(std::string(metric));
  if (field == nullptr || field->is_repeated()) return std::nullopt;
  const auto* reflection = r.GetReflection();
  switch (field->cpp_type()) {
    case google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE:
      return reflection->GetDouble(r, field);
    case google::protobuf::FieldDescriptor::CPPTYPE_INT64:
      return static_cast<double>(reflection->GetInt64(r, field));
    default:
      return std::nullopt;
  }
}

// A refused merge (a part file unreadable, or parts that are not one run of
// one plan): exit kExitUsage (bad input), reported as ReportUsage reports
// any usage error, with the refusal's reason (diff_merge.h) in place of the
// generic one when it has one, for a script that tells "parts of different
// runs" from "a part still missing".
int ReportRefusedMerge(const GlobalOptions& g, const absl::Status& status) {
  return ReportUsage(g, WithReasonName(status, DiffMergeReason(status)));
}

}  // namespace

int RunDiffMerge(const GlobalOptions& g, const DiffMergeOptionsCli& o) {
  std::vector<DiffGate> gates;
  for (const std::string& text : o.fail_on) {
    auto gate = ParseDiffGate(text);
    if (!gate.ok()) {
      return ReportUsage(CopyReason(
          gate.status(),
          absl::Status(gate.status().code(),
                       absl::StrCat("--fail-on: ", gate.status().message()))));
    }
    gates.push_back(*std::move(gate));
  }
  // Opened before the parts are read: a path that cannot be written is a
  // usage error now. Written whole at the end: a refused merge leaves the
  // file that was there.
  std::unique_ptr<OutputFile> file;
  if (!o.output.empty()) {
    auto created = CreateOutput("-o", o.output);
    if (!created.ok()) return ReportFailure(created.status());
    file = *std::move(created);
  }
  std::vector<DiffPartEvents> parts;
  for (const std::string& path : o.parts) {
    auto part = ReadPartFile(path);
    if (!part.ok()) return ReportRefusedMerge(g, part.status());
    parts.push_back(*std::move(part));
  }
  auto merged = MergeDiffParts(std::move(parts));
  if (!merged.ok()) return ReportRefusedMerge(g, merged.status());

  DiffResult r{merged->checkpoint, merged->reference, merged->fail_on,
               std::move(merged->reports), std::move(merged->summary)};
  if (!o.fail_on.empty()) {
    // These gates replace the parts': every report is gated again, by the
    // rules and with the reason text the service uses.
    r.gates = o.fail_on;
    std::vector<DiffSummaryEntry> entries;
    for (v1::TensorDiffReport& t : r.reports) {
      t.clear_flagged();
      t.clear_flag_reasons();
      for (std::string& reason : TrippedReasons(
               gates,
               [&](absl::string_view m) { return ReportMetric(t, m); })) {
        t.set_flagged(true);
        t.add_flag_reasons(std::move(reason));
      }
      entries.push_back(EntryOf(t));
    }
    SetRankedLists(std::move(entries), &r.summary);
  }
  std::ostringstream to_file;
  std::ostream& out = file != nullptr ? to_file : std::cout;
  if (g.json) {
    v1::QuantDiffEvent e;
    for (const v1::TensorDiffReport& t : r.reports) {
      *e.mutable_tensor() = t;
      out << ToJson(e) << "\n";
    }
    *e.mutable_summary() = r.summary;
    out << ToJson(e) << std::endl;
  }
  const int code = PrintDiffResult(g, std::move(r), out);
  if (file != nullptr) {
    // A tripped gate still writes the merge: the report says what tripped.
    absl::Status written = file->Write(to_file.str());
    if (written.ok()) written = file->Commit();
    if (!written.ok()) return ReportFailure(written);
  }
  return code;
}

namespace {

class DiffMergeCommand : public Command {
 public:
  explicit DiffMergeCommand(CLI::App& app)
      : Command(app.add_subcommand(
                    "diff-merge",
                    "put the parts of a diff (diff --part i/N --json) back "
                    "together: the report one run of the whole diff gives, "
                    "number for number"),
                Needs::kNothing) {
    CLI::App& cmd = *this->app();
    cmd.add_option("parts", o_.parts,
                   "the part files, one per part, in any order")
        ->required();
    cmd.add_option(
           "--fail-on", o_.fail_on,
           "gate the merged reports again, replacing the parts' gates: exit 3 "
           "when any tensor trips METRIC OP NUMBER (repeatable); without it "
           "the gates the parts ran with hold")
        // One gate per --fail-on: part files after it stay part files.
        ->allow_extra_args(false);
    cmd.add_option("-o,--output", o_.output,
                   std::string("write what stdout would show (the table, or "
                               "with --json the lines) to this file") +
                       kOutputGuarantee)
        ->check(OutputPathValidator());
    cmd.footer(
        "A diff in 3 parts (say the pods of a Kubernetes Indexed Job), then "
        "merged:\n"
        "  for i in 0 1 2; do\n"
        "    tensormorph diff quant/ source/ --part $i/3 --json > "
        "part-$i.jsonl\n"
        "  done\n"
        "  tensormorph diff-merge part-*.jsonl --fail-on 'max_excess_steps>0'\n"
        "Every tensor is diffed whole by exactly one part, so the merge prints "
        "what one run prints\n"
        "(wall time: the slowest part's), as a table or with --json as lines "
        "sorted by tensor name,\n"
        "then the summary. No server is asked. Exit codes as diff: 0, or 3 "
        "when a gate trips;\n"
        "1 when the files are not one whole plan, naming them: a part missing "
        "or given twice,\n"
        "parts of different plans (checkpoints, filter, gates, --top or N), a "
        "file cut short\n"
        "(no summary, or fewer reports than it counts), a tensor reported "
        "twice.");
  }
  GuardedOutput Output() const override {
    std::vector<CommandInput> parts;
    for (const std::string& part : o_.parts) {
      parts.push_back({CommandInput::Kind::kFile, part, "part file"});
    }
    return {"-o", o_.output, parts};
  }
  // Reads the part files only: no server.
  int Run(const CommandContext& c) override {
    return RunDiffMerge(c.global, o_);
  }

 private:
  DiffMergeOptionsCli o_;
};

}  // namespace

std::unique_ptr<Command> RegisterDiffMerge(CLI::App& app) {
  return std::make_unique<DiffMergeCommand>(app);
}

}  // namespace tensormorph
