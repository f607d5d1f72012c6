// tensormorph imatrix FILE: an importance matrix of llama.cpp's (GGUF or
// legacy .dat) as the server reads it: per tensor its columns, experts,
// token counts and chunks, and for MoE tensors the experts calibration
// never reached (whose weights llama-quantize then takes as 1).
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/command.h"
#include "client/cli/commands.h"
#include "client/cli/format.h"

namespace tensormorph {
namespace {

// "3 of 8: 1, 4, 6" or "-".
std::string NeverReachedText(const v1::ImatrixEntryInfo& e) {
  if (e.experts_never_reached().empty()) return "-";
  return absl::StrCat(e.experts_never_reached_size(), " of ", e.experts(), ": ",
                      absl::StrJoin(e.experts_never_reached(), ", "));
}

std::string CountsText(const v1::ImatrixEntryInfo& e) {
  double lo = 0, hi = 0;
  for (int i = 0; i < e.counts_size(); ++i) {
    lo = i == 0 ? e.counts(i) : std::min(lo, e.counts(i));
    hi = i == 0 ? e.counts(i) : std::max(hi, e.counts(i));
  }
  return lo == hi ? absl::StrFormat("%.0f", hi)
                  : absl::StrFormat("%.0f..%.0f", lo, hi);
}

void PrintImatrix(const v1::GetImportanceMatrixResponse& m, std::ostream& out) {
  const bool gguf = m.form() == v1::IMATRIX_FORM_GGUF;
  out << m.path() << ": " << (gguf ? "GGUF" : "legacy .dat")
      << " importance matrix, " << Count(m.entries_size(), "tensor") << ", "
      << Count(m.chunk_count(), "chunk");
  if (m.chunk_size() > 0) out << " of " << m.chunk_size() << " tokens";
  if (m.datasets_size() > 0) {
    out << ", datasets: " << absl::StrJoin(m.datasets(), ", ");
  }
  out << "\n";
  std::vector<std::vector<std::string>> rows = {{"TENSOR", "COLUMNS", "EXPERTS",
                                                 gguf ? "TOKENS" : "NCALL",
                                                 "CHUNKS", "NEVER REACHED"}};
  int64_t partial = 0;
  for (const v1::ImatrixEntryInfo& e : m.entries()) {
    partial += e.experts_never_reached().empty() ? 0 : 1;
    rows.push_back({e.name(), absl::StrCat(e.columns()),
                    absl::StrCat(e.experts()), CountsText(e),
                    absl::StrCat(e.chunks()), NeverReachedText(e)});
  }
  out << Table(rows);
  if (partial > 0) {
    out << Count(partial, "tensor")
        << " with experts calibration never reached (llama-quantize weighs "
           "their columns 1)\n";
  } else if (!gguf) {
    out << "(the legacy form records neither experts nor their counts)\n";
  }
}

class ImatrixCommand : public Command {
 public:
  explicit ImatrixCommand(CLI::App& app)
      : Command(app.add_subcommand(
            "imatrix",
            "an importance matrix of llama.cpp's (GGUF or legacy .dat): "
            "tensors, chunk counts, and experts calibration never reached")) {
    this->app()
        ->add_option("file", path_, "the imatrix file, as the server sees it")
        ->transform(ServedPath())
        ->required();
    this->app()->footer(
        "Examples:\n  tensormorph imatrix imatrix.gguf\n"
        "  tensormorph --json imatrix imatrix.dat\n"
        "  tensormorph diff model-q4_k.gguf model-f16.gguf --imatrix "
        "imatrix.gguf");
  }
  int Run(const CommandContext& c) override {
    auto m = c.client->GetImportanceMatrix(path_);
    if (!m.ok()) return ReportFailure(m.status());
    if (c.global.json) {
      std::cout << ToJson(*m) << std::endl;
    } else {
      PrintImatrix(*m, std::cout);
    }
    return kExitOk;
  }

 private:
  std::string path_;
};

}  // namespace

std::unique_ptr<Command> RegisterImatrix(CLI::App& app) {
  return std::make_unique<ImatrixCommand>(app);
}

}  // namespace tensormorph
