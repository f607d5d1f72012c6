// tensormorph compare SOURCE Q1 Q2 ...: N quantizations of one source side
// by side (CompareQuantizations): a matrix of tensors by quantizations, the
// totals with the dominated ones marked, per-layer dominance, and with
// --budget-bpw / --budget-bytes the mix and llama.cpp's overrides for it;
// with --html FILE also a self-contained HTML report (compare_report.h).
// Exit codes as diff's: 0, 1 usage, 2 the call failed, 4 some tensor could
// not be decoded (its cell says why).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/command.h"
#include "client/cli/commands.h"
#include "client/cli/compare_report.h"
#include "client/cli/format.h"
#include "client/cli/output_file.h"
#include "core/util/error_reason.h"

namespace tensormorph {
namespace {

struct CompareOptionsCli {
  std::string source;
  std::vector<std::string> quantizations;
  std::string filter;
  std::optional<double> budget_bpw;
  std::optional<std::string> budget_bytes_text;  // parsed by CheckOptions
  std::optional<int64_t> budget_bytes;
  int base = 0;
  std::string html;  // --html FILE; empty = none
  std::string imatrix;
};

std::string SqnrText(double db) {
  return std::isinf(db) ? "inf" : absl::StrFormat("%.2f", db);
}

// A cell's type ("Q4_K", "int8 symmetric") and the rest: "4.50 31.20",
// bits per weight and SQNR dB; "!" after a cell whose worst element lies
// beyond the format's bound; " w33.10", the importance-weighted SQNR, where
// an imatrix weighed the tensor. Apart, so that the figures after types of
// different lengths line up in a column.
std::pair<std::string, std::string> CellText(const v1::CompareCell& c) {
  if (!c.present()) return {"-", ""};
  if (!c.undecodable().empty()) return {c.scheme(), "(cannot decode)"};
  std::string weighted;
  if (c.imatrix_use() == v1::IMATRIX_USE_WEIGHTED) {
    weighted = " w" + SqnrText(c.weighted_sqnr_db());
  }
  return {
      c.scheme(),
      absl::StrFormat("%.2f %s%s%s", c.bits_per_weight(), SqnrText(c.sqnr_db()),
                      c.max_excess_steps() > 0 ? "!" : "", weighted)};
}

void PrintMatrix(const CompareOptionsCli& o,
                 const std::vector<v1::CompareRow>& rows, std::ostream& out) {
  std::vector<std::vector<std::string>> table = {{"TENSOR"}};
  for (size_t q = 0; q < o.quantizations.size(); ++q) {
    table[0].push_back(absl::StrCat("[", q, "]"));
  }
  // Each column's types padded to its widest.
  const int n = static_cast<int>(o.quantizations.size());
  std::vector<size_t> type_width(n, 0);
  for (const v1::CompareRow& r : rows) {
    for (int q = 0; q < n && q < r.cells_size(); ++q) {
      type_width[q] =
          std::max(type_width[q], CellText(r.cells(q)).first.size());
    }
  }
  for (const v1::CompareRow& r : rows) {
    table.push_back({r.reference_name()});
    for (int q = 0; q < r.cells_size(); ++q) {
      auto [type, rest] = CellText(r.cells(q));
      if (!rest.empty() && q < n) {
        type.resize(type_width[q], ' ');
        type += " " + rest;
      }
      table.back().push_back(type);
    }
  }
  out << "cells: type, bits per weight, SQNR dB (! beyond the format's "
         "bound)"
      << (o.imatrix.empty() ? "" : ", w importance-weighted SQNR dB") << "\n"
      << Table(table);
}

// The rows left out of the totals, by why: a quantization lacks the
// tensor, or holds it but it cannot be decoded there.
void PrintLeftOut(const std::vector<v1::CompareRow>& rows,
                  const v1::CompareSummary& s, std::ostream& out) {
  std::vector<std::string> lacking;
  for (const v1::CompareRow& r : rows) {
    for (const v1::CompareCell& c : r.cells()) {
      if (c.present()) continue;
      lacking.push_back(r.reference_name());
      break;
    }
  }
  if (!lacking.empty()) {
    out << "not held by every quantization (left out of the totals): "
        << absl::StrJoin(lacking, ", ") << "\n";
  }
  if (s.undecodable_size() > 0) {
    out << "cannot be decoded (left out of the totals): "
        << absl::StrJoin(s.undecodable(), ", ") << "\n";
  }
}

void PrintTotals(const CompareOptionsCli& o,
                 const std::vector<v1::CompareRow>& rows,
                 const v1::CompareSummary& s, std::ostream& out) {
  std::vector<std::vector<std::string>> table = {
      {"", "QUANTIZATION", "TENSORS", "BYTES", "BPW", "SQNR dB",
       "SQUARED ERROR", "DOMINATED BY"}};
  for (int q = 0; q < s.totals_size(); ++q) {
    const v1::CompareTotals& t = s.totals(q);
    std::vector<std::string> by;
    for (int d : t.dominated_by()) by.push_back(absl::StrCat("[", d, "]"));
    table.push_back({absl::StrCat("[", q, "]"), t.checkpoint(),
                     absl::StrCat(t.tensors()), absl::StrCat(t.bytes()),
                     absl::StrFormat("%.4f", t.bits_per_weight()),
                     SqnrText(t.sqnr_db()), NumberText(t.sum_squared_error()),
                     by.empty() ? "-" : absl::StrJoin(by, " ")});
    if (s.weighted()) {
      // No tensor weighed: weighted_sqnr_db is 0 there, no measurement.
      table.back().insert(
          table.back().end() - 1,
          {t.tensors_weighted() > 0 ? SqnrText(t.weighted_sqnr_db()) : "-",
           NumberText(t.weighted_error())});
    }
  }
  if (s.weighted()) {
    table[0].insert(table[0].end() - 1, {"W SQNR dB", "WEIGHTED ERROR"});
  }
  out << "\ntotals over the tensors every quantization holds; dominated: "
         "another is no larger and no worse"
      << (s.weighted() ? " in weighted error" : "") << "\n"
      << Table(table);
  if (s.unweighted_size() > 0) {
    out << "not weighted by the imatrix (their unweighted error times the "
           "matrix's mean importance, "
        << NumberText(s.unweighted_factor())
        << ", counts in the weighted totals and the mix): "
        << absl::StrJoin(s.unweighted(), ", ") << "\n";
  }
  for (const v1::CompareLayer& l : s.layers()) {
    if (l.dominated().empty()) continue;
    std::vector<std::string> marks;
    for (int d : l.dominated()) marks.push_back(absl::StrCat("[", d, "]"));
    out << l.layer() << ": dominated " << absl::StrJoin(marks, " ") << "\n";
  }
  PrintLeftOut(rows, s, out);
}

// The command llama.cpp makes the mix with: the base's ftype by the name
// llama-quantize takes, or, when the base names none it knows, FTYPE and a
// note (a number such as -1 would be refused, or worse, taken). A weighted
// mix names IMATRIX: the predicted error holds only when llama.cpp
// quantizes with the matrix the comparison weighed by.
void PrintLlamaCommand(const v1::CompareMix& m, bool weighted,
                       std::ostream& out) {
  out << "llama.cpp: llama-quantize";
  if (weighted) out << " --imatrix IMATRIX";
  for (const std::string& t : m.tensor_type_overrides()) {
    out << " --tensor-type '" << t << "'";
  }
  const bool known = !m.base_ftype_name().empty();
  out << " SOURCE.gguf OUT.gguf " << (known ? m.base_ftype_name() : "FTYPE");
  if (known) {
    out << "\n(the base [" << m.base() << "]'s ftype; ";
  } else {
    out << "\n(the base [" << m.base() << "] names no ftype llama-quantize "
        << "takes (general.file_type "
        << (m.base_ftype() < 0 ? std::string("absent")
                               : absl::StrCat(m.base_ftype()))
        << "): put for FTYPE the one it was made with; ";
  }
  if (weighted) out << "IMATRIX: the importance matrix given to --imatrix; ";
  out << "predicted file size " << m.predicted_file_size() << " bytes";
  if (m.left_out_size() > 0) {
    out << ", if llama.cpp keeps the base's type for the " << m.left_out_size()
        << " tensors left out of the mix";
  }
  out << ")\n";
}

void PrintMix(const v1::CompareMix& m, bool weighted, std::ostream& out) {
  if (m.budget_unmet()) {
    out << "\nno mix: the budget of " << m.budget_bytes()
        << " bytes is below the smallest mix, " << m.least_bytes() << " bytes ("
        << absl::StrFormat("%.4f", m.least_bits_per_weight())
        << " bits per weight)\n";
    return;
  }
  out << "\nmix within " << m.budget_bytes() << " bytes: " << m.bytes()
      << " bytes, " << absl::StrFormat("%.4f", m.bits_per_weight())
      << " bits per weight, squared error " << NumberText(m.sum_squared_error())
      << ", SQNR " << SqnrText(m.sqnr_db()) << " dB";
  if (weighted) {
    out << ", weighted error " << NumberText(m.weighted_error())
        << " (the least within the budget)";
  }
  out << "\n";
  std::vector<std::vector<std::string>> table = {{"TENSOR", "FROM", "TYPE"}};
  for (const v1::CompareChoice& c : m.choices()) {
    table.push_back({c.reference_name(),
                     absl::StrCat("[", c.quantization(), "]"), c.scheme()});
  }
  out << Table(table);
  if (m.left_out_size() > 0) {
    out << "left out of the mix (no choice made; its errors leave them out): "
        << absl::StrJoin(m.left_out(), ", ") << "\n";
  }
  if (m.tensor_type_overrides_size() > 0) PrintLlamaCommand(m, weighted, out);
}

// Opened before the comparison runs: a path that cannot be written is a
// usage error now, not after every quantization was read. Null when no
// --html was asked for.
absl::StatusOr<std::unique_ptr<OutputFile>> OpenReport(
    const CompareOptionsCli& o) {
  if (o.html.empty()) return nullptr;
  return CreateOutput("--html", o.html);
}

absl::Status WriteReport(OutputFile& file,
                         const v1::CompareQuantizationsRequest& req,
                         const std::vector<v1::CompareEvent>& events) {
  absl::Status s = file.Write(CompareReportHtml(req, events));
  if (s.ok()) s = file.Commit();
  if (!s.ok())
    return absl::Status(s.code(), absl::StrCat("--html: ", s.message()));
  return absl::OkStatus();
}

// What the CLI can tell is wrong before any call: usage errors (exit 1,
// REQUEST_INVALID {field: the flag}) rather than a refused call naming a
// proto field. Fills o->budget_bytes from its text, refusing what int64
// cannot hold (a number past it would otherwise be clamped).
absl::Status CheckOptions(CompareOptionsCli* o) {
  if (o->budget_bpw && !(std::isfinite(*o->budget_bpw) && *o->budget_bpw > 0)) {
    return RequestFieldError("--budget-bpw",
                             absl::StrCat("--budget-bpw ", *o->budget_bpw,
                                          " is not a positive number"));
  }
  // Applied in bytes, bpw x elements / 8: past int64 even for one element
  // it cannot be applied as asked (--budget-bytes refuses the same).
  if (o->budget_bpw && *o->budget_bpw / 8.0 >= 9.2e18) {
    return RequestFieldError(
        "--budget-bpw", absl::StrCat("--budget-bpw ", *o->budget_bpw,
                                     " is more bytes than a budget can hold"));
  }
  if (o->budget_bytes_text) {
    int64_t bytes = 0;
    if (!absl::SimpleAtoi(*o->budget_bytes_text, &bytes) || bytes <= 0) {
      return RequestFieldError(
          "--budget-bytes",
          absl::StrCat("--budget-bytes ", *o->budget_bytes_text,
                       " is not a positive whole number of bytes up to ",
                       std::numeric_limits<int64_t>::max()));
    }
    o->budget_bytes = bytes;
  }
  const int n = static_cast<int>(o->quantizations.size());
  if (o->base < 0 || o->base >= n) {
    return RequestFieldError(
        "--base", absl::StrCat("--base ", o->base, " is no index of the ", n,
                               " quantizations (0 to ", n - 1, ")"));
  }
  return absl::OkStatus();
}

// Warns (not an error: comparing a file with itself is odd, not wrong) of
// inputs that are one file, however spelled, where the paths are local.
void WarnOfSameFiles(const CompareOptionsCli& o) {
  std::vector<std::pair<std::string, std::string>> inputs = {
      {"the source", o.source}};
  for (size_t q = 0; q < o.quantizations.size(); ++q) {
    inputs.push_back({absl::StrCat("[", q, "]"), o.quantizations[q]});
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (size_t j = i + 1; j < inputs.size(); ++j) {
      std::error_code ec;
      if (!std::filesystem::equivalent(inputs[i].second, inputs[j].second,
                                       ec) ||
          ec) {
        continue;
      }
      std::cerr << "tensormorph: warning: " << inputs[j].first << " is "
                << inputs[i].first << "'s file (" << inputs[j].second << ")\n";
    }
  }
}

// Warns when the source holds a quantized tensor: every figure is then an
// error against a quantization, not against the full precision (which a
// user may mean, so not an error). The listing is metadata only; if it
// fails, nothing is said (the comparison itself succeeded).
void WarnIfSourceQuantized(Client& client, const std::string& source) {
  absl::StatusOr<std::vector<v1::TensorInfo>> tensors =
      client.ListTensors(source);
  if (!tensors.ok()) return;
  for (const v1::TensorInfo& t : *tensors) {
    if (!t.encoding().quantized()) continue;
    std::cerr << "tensormorph: warning: the source " << source
              << " is quantized (" << t.name() << " is "
              << t.encoding().scheme()
              << "): the errors are against it, not the full precision\n";
    return;
  }
}

// Warns of each quantization the imatrix weighs in no tensor (its names
// differ from the matrix's, say a Hugging Face checkpoint beside GGUFs): its
// weighted figures rest on unweighted errors alone, as diff warns.
void WarnIfWeighedNowhere(const v1::CompareSummary& s) {
  if (!s.weighted()) return;
  for (int q = 0; q < s.totals_size(); ++q) {
    const v1::CompareTotals& t = s.totals(q);
    if (t.tensors() == 0 || t.tensors_weighted() > 0) continue;
    std::cerr << "tensormorph: warning: the imatrix weighs none of the "
              << t.tensors() << " tensors of [" << q << "] " << t.checkpoint()
              << " (no entry of their names, or of another size): its "
                 "weighted error is its unweighted one times the matrix's "
                 "mean importance\n";
  }
}

// The server's refusal of a --budget-bpw that comes to no byte over the
// tensors compared is the same usage error as --budget-bytes 0: exit 1,
// naming the flag. Null for any other status.
std::optional<absl::Status> BudgetUsageError(const absl::Status& s) {
  if (!IsReason(s, ErrorReason::kRequestInvalid)) return std::nullopt;
  const ErrorMetadata metadata = ReasonMetadataOf(s);
  const std::pair<std::string, std::string> field = {"field",
                                                     "budget_bits_per_weight"};
  if (std::find(metadata.begin(), metadata.end(), field) == metadata.end()) {
    return std::nullopt;
  }
  return RequestFieldError("--budget-bpw",
                           absl::StrCat("--budget-bpw: ", s.message()));
}

int RunCompare(Client& client, const GlobalOptions& g, CompareOptionsCli o) {
  if (absl::Status s = CheckOptions(&o); !s.ok()) return ReportUsage(g, s);
  WarnOfSameFiles(o);
  v1::CompareQuantizationsRequest req;
  req.set_source(o.source);
  for (const std::string& q : o.quantizations) req.add_quantizations(q);
  req.set_filter(o.filter);
  req.set_base(o.base);
  if (o.budget_bpw) req.set_budget_bits_per_weight(*o.budget_bpw);
  if (o.budget_bytes) req.set_budget_bytes(*o.budget_bytes);
  auto report = OpenReport(o);
  if (!report.ok()) return ReportFailure(report.status());
  std::vector<v1::CompareEvent> report_events;  // rows, then the summary
  if (!o.imatrix.empty()) req.set_imatrix(o.imatrix);
  const bool bar = !g.json && ::isatty(2);
  std::vector<v1::CompareRow> rows;
  v1::CompareSummary summary;
  bool undecodable = false;
  absl::Status s =
      client.CompareQuantizations(req, [&](const v1::CompareEvent& e) {
        if (e.has_progress()) {
          if (g.json) {
            std::cerr << ToJson(e) << "\n";
          } else if (bar) {
            DrawProgressBar(e.progress());
          }
          return true;
        }
        if (g.json) std::cout << ToJson(e) << std::endl;
        if (*report != nullptr) report_events.push_back(e);
        if (e.has_row()) {
          rows.push_back(e.row());
          for (const v1::CompareCell& c : e.row().cells()) {
            undecodable |= !c.undecodable().empty();
          }
        } else if (e.has_summary()) {
          summary = e.summary();
        }
        return true;
      });
  if (bar) ClearProgressBar();
  if (auto usage = BudgetUsageError(s)) return ReportUsage(g, *usage);
  if (!s.ok()) return ReportFailure(s);
  WarnIfSourceQuantized(client, o.source);
  WarnIfWeighedNowhere(summary);
  if (*report != nullptr) {
    if (absl::Status w = WriteReport(**report, req, report_events); !w.ok()) {
      return ReportFailure(w);
    }
  }
  if (!g.json) {
    for (size_t q = 0; q < o.quantizations.size(); ++q) {
      std::cout << "[" << q << "] " << o.quantizations[q] << "\n";
    }
    PrintMatrix(o, rows, std::cout);
    PrintTotals(o, rows, summary, std::cout);
    if (summary.has_mix()) {
      PrintMix(summary.mix(), summary.weighted(), std::cout);
    }
  }
  // A budget no mix fits is a gate the user set and the data tripped: the
  // matrix and totals stand, the mix does not.
  if (summary.mix().budget_unmet()) {
    std::cerr << "tensormorph: the budget of " << summary.mix().budget_bytes()
              << " bytes is below the smallest mix, "
              << summary.mix().least_bytes() << " bytes\n";
    return kExitThreshold;
  }
  return undecodable ? kExitGaps : kExitOk;
}

class CompareCommand : public Command {
 public:
  explicit CompareCommand(CLI::App& app)
      : Command(app.add_subcommand(
            "compare",
            "N quantizations of one source side by side: per tensor type, "
            "bits per weight, SQNR; totals and the dominated ones; with a "
            "budget, the per-tensor mix of least error and llama.cpp's "
            "--tensor-type overrides for it")) {
    CLI::App& cmd = *this->app();
    cmd.add_option("source", o_.source, "the full-precision source")
        ->transform(ServedPath())
        ->required();
    cmd.add_option("quantizations", o_.quantizations,
                   "two or more quantizations of it")
        ->transform(ServedPath())
        ->required();
    cmd.add_option("--filter", o_.filter,
                   "glob on the source's tensor names (the rows)");
    auto* bpw = cmd.add_option(
        "--budget-bpw", o_.budget_bpw,
        "pick per tensor the quantization whose tensor to use, least total "
        "squared error within this many bits per weight");
    auto* bytes = cmd.add_option("--budget-bytes", o_.budget_bytes_text,
                                 "the same within this many stored bytes");
    bpw->excludes(bytes);
    cmd.add_option("--base", o_.base,
                   "the quantization (its index) whose ftype the overrides "
                   "are relative to")
        ->capture_default_str();
    cmd.add_option("--html", o_.html,
                   std::string("also write a self-contained HTML report to "
                               "FILE: the matrix, the size-versus-error chart "
                               "with the frontier, per-layer error curves; no "
                               "network requests") +
                       kOutputGuarantee)
        ->check(OutputPathValidator());
    imatrix_ = cmd.add_option(
                      "--imatrix", o_.imatrix,
                      "a llama.cpp importance matrix (GGUF or .dat): weighted "
                      "figures beside the unweighted, dominance and the mix on "
                      "the weighted error")
                   ->transform(ServedPath());
    cmd.footer(
        "Examples:\n"
        "  tensormorph compare model-f32.gguf model-q8_0.gguf "
        "model-q4_k_m.gguf\n"
        "  tensormorph compare model-f32.gguf model-q8_0.gguf "
        "model-q4_k_m.gguf --budget-bpw 6 --base 1\n"
        "  tensormorph compare model-f32.gguf model-q8_0.gguf "
        "model-q4_k_m.gguf --imatrix imatrix.dat --html compare.html\n"
        "  tensormorph --json compare model-f32.gguf model-q8_0.gguf "
        "model-q4_k_m.gguf --filter 'blk.0.*'");
  }
  absl::Status Finish() override {
    // CompareQuantizationsRequest.imatrix set but empty is refused by the
    // server; refused here first, as diff does, as the usage error it is
    // (an unset shell variable), whether embedded or with --server.
    if (imatrix_->count() > 0 && o_.imatrix.empty()) {
      return RequestFieldError(
          "imatrix",
          "--imatrix: the path is empty (leave --imatrix out for an "
          "unweighted comparison)");
    }
    if (o_.quantizations.size() < 2) {
      return absl::InvalidArgumentError(
          "compare needs two or more quantizations (for one: tensormorph "
          "diff)");
    }
    return absl::OkStatus();
  }
  GuardedOutput Output() const override {
    constexpr auto kCheckpoint = CommandInput::Kind::kCheckpoint;
    std::vector<CommandInput> inputs = {
        {kCheckpoint, o_.source, "source checkpoint"}};
    for (size_t q = 0; q < o_.quantizations.size(); ++q) {
      inputs.push_back({kCheckpoint, o_.quantizations[q],
                        absl::StrCat("quantization [", q, "]")});
    }
    // The matrix is read too: a report written over it would lose it.
    inputs.push_back(
        {CommandInput::Kind::kImportanceMatrix, o_.imatrix, "--imatrix file"});
    return {"--html", o_.html, inputs};
  }
  int Run(const CommandContext& c) override {
    return RunCompare(*c.client, c.global, o_);
  }

 private:
  CompareOptionsCli o_;
  CLI::Option* imatrix_ = nullptr;
};

}  // namespace

std::unique_ptr<Command> RegisterCompare(CLI::App& app) {
  return std::make_unique<CompareCommand>(app);
}

}  // namespace tensormorph
