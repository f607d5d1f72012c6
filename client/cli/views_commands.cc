// stats, heatmap and arch: the views people would rather look at than read.
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "client/cli/arguments.h"
#include "client/cli/command.h"
#include "client/cli/commands.h"
#include "client/cli/format.h"
#include "client/cli/output_file.h"
#include "client/cli/terminal_text.h"
#include "core/request_limits.h"
#include "core/util/error_reason.h"
#include "render/heatmap_render.h"

namespace tensormorph {
namespace {

std::string Bar(int64_t n, int64_t max, int width) {
  const int len =
      max > 0
          ? static_cast<int>(std::llround(static_cast<double>(n) * width / max))
          : 0;
  std::string s;
  for (int i = 0; i < len; ++i) s += "\u2588";
  return s;
}

std::string ParamsText(int64_t n) {
  if (n >= 1'000'000'000) return absl::StrFormat("%.2fB", n / 1e9);
  if (n >= 1'000'000) return absl::StrFormat("%.2fM", n / 1e6);
  if (n >= 1'000) return absl::StrFormat("%.1fK", n / 1e3);
  return absl::StrCat(n);
}

void PrintTree(const v1::ArchNode& n, int depth,
               const std::string& parent_scheme) {
  const bool leaf = n.children_size() == 0;
  if (!n.name().empty() && !(leaf && !n.boundary())) {
    std::cout << std::string(depth * 2, ' ')
              << (n.boundary() ? "\u25c6 " : "  ") << n.name() << "  ["
              << n.scheme() << "]  " << ParamsText(n.params()) << " params, "
              << BytesText(n.bytes());
    if (n.scheme_params_size() > 1) {
      std::vector<std::string> mix;
      for (const auto& [k, v] : n.scheme_params())
        mix.push_back(absl::StrCat(k, " ", ParamsText(v)));
      std::sort(mix.begin(), mix.end());
      std::cout << "  (" << absl::StrJoin(mix, ", ") << ")";
    }
    if (n.boundary())
      std::cout << "  <- boundary: " << n.scheme() << " inside "
                << parent_scheme;
    std::cout << "\n";
  }
  for (const v1::ArchNode& c : n.children()) {
    PrintTree(c, n.name().empty() ? depth : depth + 1, n.scheme());
  }
}

// A DOT string literal's contents: quotes and backslashes escaped.
std::string DotEscape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

// Node ids are numbered, not taken from paths: a Hugging Face checkpoint's
// root and its "model." subtree would otherwise share the id "model".
void PrintDot(const v1::ArchNode& n, const std::string& label, int* next_id,
              std::string* out) {
  const int id = (*next_id)++;
  absl::StrAppend(out, "  n", id, " [label=\"", DotEscape(label), "\\n",
                  DotEscape(n.scheme()), "\"",
                  n.boundary() ? ", color=red, fontcolor=red, penwidth=2" : "",
                  "];\n");
  for (const v1::ArchNode& c : n.children()) {
    if (c.children_size() == 0 && !c.boundary()) continue;
    absl::StrAppend(out, "  n", id, " -> n", *next_id, ";\n");
    PrintDot(c, c.name(), next_id, out);
  }
}

}  // namespace

int RunStats(Client& client, const GlobalOptions& g, const StatsOptionsCli& o) {
  v1::ComputeStatsRequest req;
  req.set_checkpoint(o.checkpoint);
  req.set_tensor(o.tensor);
  req.set_bins(o.bins);
  req.set_reference(o.reference);
  req.set_reference_tensor(o.reference_tensor);
  if (o.group.has_value()) req.set_group(*o.group);
  auto st = client.ComputeStats(req);
  if (!st.ok()) return ReportFailure(st.status());
  if (g.json) {
    std::cout << ToJson(*st) << "\n";
    return kExitOk;
  }
  std::cout << st->tensor() << "  " << ShapeText(st->shape()) << "  ("
            << st->encoding().scheme() << ", " << st->encoding().granularity()
            << ")";
  if (o.group.has_value()) std::cout << "  group " << *o.group;
  std::cout << "\n";
  if (st->count() == 0) {
    std::cout << "empty tensor (a zero dimension): no elements, so no "
                 "statistics\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"count", absl::StrCat(st->count())},
      {"min / max",
       absl::StrCat(NumberText(st->min()), " / ", NumberText(st->max()))},
      {"mean / std",
       absl::StrCat(NumberText(st->mean()), " / ", NumberText(st->std()))},
      {"absmax", NumberText(st->absmax())},
      {"nan / inf", absl::StrCat(st->nan_count(), " / ", st->inf_count())},
      {"zeros",
       absl::StrFormat("%d (sparsity %.4f)", st->zeros(), st->sparsity())}};
  if (st->has_reference()) {
    rows.push_back({"  pruned (x = 0)", absl::StrCat(st->pruned_zeros())});
    rows.push_back({"  induced (x != 0)", absl::StrCat(st->induced_zeros())});
  }
  if (st->has_levels()) {
    rows.push_back(
        {"levels used", absl::StrCat(st->levels_used(), " of ",
                                     int64_t{1} << st->code_bits())});
    // End levels, not clipping: a group's own min and max sit there. Only
    // a diff against the source counts clipping.
    rows.push_back(
        {"at lowest / highest level",
         absl::StrCat(st->saturated_low(), " / ", st->saturated_high())});
    rows.push_back(
        {"groups at an end level",
         absl::StrCat(st->groups_saturated(), " of ", st->groups())});
  }
  std::cout << Table(rows) << "\nhistogram\n";
  const int64_t peak =
      *std::max_element(st->histogram().begin(), st->histogram().end());
  const double w =
      (st->hist_max() - st->hist_min()) / std::max(1, st->histogram_size());
  for (int b = 0; b < st->histogram_size(); ++b) {
    std::cout << absl::StrFormat("%12s %8d ",
                                 NumberText(st->hist_min() + b * w),
                                 st->histogram(b))
              << Bar(st->histogram(b), peak, 50) << "\n";
  }
  if (st->levels_size() > 0) {
    // All of them when they fit a few lines; else the ends.
    std::vector<std::string> shown;
    for (int i = 0; i < st->levels_size(); ++i) {
      if (st->levels_size() > 64 && i == 8) {
        shown.push_back("...");
        i = st->levels_size() - 8;
      }
      shown.push_back(NumberText(st->levels(i)));
    }
    std::cout << "\nrepresentable levels (" << st->levels_size() << ")\n  "
              << absl::StrJoin(shown, " ") << "\n";
  }
  if (st->has_levels() && st->code_histogram_size() <= 64) {
    // Signed codes from the most negative up, as `scalar` prints them.
    const int size = st->code_histogram_size();
    const int first = st->codes_signed() ? -size / 2 : 0;
    std::cout << "\nlevel usage (raw codes" << (first < 0 ? ", signed" : "")
              << ")\n";
    const int64_t top = *std::max_element(st->code_histogram().begin(),
                                          st->code_histogram().end());
    for (int c = first; c < first + size; ++c) {
      const int64_t n = st->code_histogram((c + size) % size);
      std::cout << absl::StrFormat("%6d %8d ", c, n) << Bar(n, top, 50) << "\n";
    }
  }
  return kExitOk;
}

namespace {

// --index: exactly one index per leading dimension of a rank > 2 tensor.
// Negative ones count from the end (as read and scalar count them): the
// server resolves and range-checks them, as GetHeatmapRequest.leading says.
absl::StatusOr<std::vector<int64_t>> LeadingIndices(
    const HeatmapOptionsCli& o, absl::Span<const int64_t> shape) {
  const size_t rank = shape.size();
  const size_t want = rank > 2 ? rank - 2 : 0;
  if (o.leading.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", o.tensor, "' has rank ", rank, " (shape ", ShapeText(shape),
        "), so --index takes ", want, want == 1 ? " index" : " indices",
        want > 0 ? " (one per leading dimension, e.g. --index " : "",
        want > 0 ? absl::StrJoin(std::vector<std::string>(want, "0"), ",") : "",
        want > 0 ? ")" : "", ", but ", o.leading.size(), " given"));
  }
  return o.leading;
}

}  // namespace

int RunHeatmap(Client& client, const GlobalOptions& g,
               const HeatmapOptionsCli& o) {
  // Opened first: a path that cannot be written fails before the call.
  std::unique_ptr<OutputFile> png;
  if (!o.output.empty()) {
    auto file = CreateOutput("-o", o.output);
    if (!file.ok()) return ReportFailure(file.status());
    png = *std::move(file);
  }
  auto info = LookupTensor(client, o.checkpoint, o.tensor);
  if (!info.ok()) return ReportFailure(info.status());
  auto leading = LeadingIndices(o, info->shape());
  if (!leading.ok()) return ReportUsage(leading.status());
  v1::GetHeatmapRequest req;
  req.set_checkpoint(o.checkpoint);
  req.set_tensor(o.tensor);
  req.set_reference(o.reference);
  req.set_reference_tensor(o.reference_tensor);
  req.set_imatrix(o.imatrix);
  // Drawn only in a terminal, without --size: no wider than it, the rows
  // in proportion (one character a cell; a wider map wraps). A PNG asked
  // for too keeps its size.
  int width = o.width, height = o.height;
  if (const int columns = TerminalColumns(); !g.json && !o.size_given &&
                                             o.output.empty() && columns > 0 &&
                                             columns < width) {
    height = std::max(2, height * columns / width);
    width = columns;
  }
  req.set_width(width);
  req.set_height(height);
  for (int64_t i : *leading) req.add_leading(i);
  req.set_row_begin(o.row_begin);
  req.set_row_end(o.row_end);
  req.set_col_begin(o.col_begin);
  req.set_col_end(o.col_end);
  const bool by_group = o.mode == "group";
  if (o.mode == "value" || o.mode == "mean") {
    req.set_mode(v1::HEATMAP_MODE_MEAN);
  } else if (o.mode == "absmax") {
    req.set_mode(v1::HEATMAP_MODE_ABSMAX);
  } else if (o.mode == "error") {
    req.set_mode(v1::HEATMAP_MODE_ERROR);
  } else if (by_group) {
    req.set_mode(v1::HEATMAP_MODE_GROUP);
  } else if (o.mode == "zeros") {
    req.set_mode(v1::HEATMAP_MODE_ZEROS);
  } else if (o.mode == "sq-error") {
    req.set_mode(v1::HEATMAP_MODE_SQ_ERROR);
  } else {
    return ReportUsage(absl::InvalidArgumentError(
        "--mode must be value, absmax, error, group, zeros or sq-error"));
  }
  auto h = client.GetHeatmap(req);
  if (!h.ok()) return ReportFailure(h.status());
  const HeatmapStyle style = StyleFor(req.mode());
  const bool region =
      o.row_begin != 0 || o.row_end != 0 || o.col_begin != 0 || o.col_end != 0;
  const std::string title = absl::StrCat(
      h->tensor(), " ", ShapeText(h->shape()), " ", h->encoding().scheme(), " ",
      h->encoding().granularity(), " - ", o.mode,
      h->imatrix_use() == v1::IMATRIX_USE_WEIGHTED ? " (imatrix-weighted)" : "",
      region && h->row_edges_size() > 0 && h->col_edges_size() > 0
          ? absl::StrCat(" rows ", h->row_edges(0), ":",
                         h->row_edges(h->row_edges_size() - 1), " cols ",
                         h->col_edges(0), ":",
                         h->col_edges(h->col_edges_size() - 1))
          : "");
  if (g.json) {
    std::cout << ToJson(*h) << "\n";
  } else if (h->width() == 0 || h->height() == 0) {
    std::cout << title << "\nempty tensor (a zero dimension): no cells\n";
  } else if (o.term || o.output.empty()) {
    // Its colours are terminal controls of ours: around the filter, with
    // the title's controls (a name's) escaped here instead.
    UnfilteredStdout() << RenderHeatmapTerminal(
        *h, EscapeTerminalControls(title), style);
  }
  if (png != nullptr) {
    absl::StatusOr<std::string> bytes =
        RenderHeatmap(*h, title, style).EncodePng();
    if (!bytes.ok()) return ReportFailure(bytes.status());
    if (absl::Status s = png->Write(*bytes); !s.ok()) return ReportFailure(s);
    if (absl::Status s = png->Commit(); !s.ok()) return ReportFailure(s);
    if (!g.json) {
      std::cerr << "wrote " << o.output << ": " << h->width() << "x"
                << h->height() << " cells\n";
    }
  }
  return kExitOk;
}

int RunArch(Client& client, const GlobalOptions& g, const ArchOptionsCli& o) {
  auto a = client.GetArchitecture(o.checkpoint);
  if (!a.ok()) return ReportFailure(a.status());
  if (g.json) {
    std::cout << ToJson(*a) << "\n";
  } else if (o.dot) {
    std::string dot =
        "digraph architecture {\n  node [shape=box, fontname=monospace];\n";
    int next_id = 0;
    PrintDot(a->root(), o.checkpoint, &next_id, &dot);
    std::cout << dot << "}\n";
  } else {
    std::cout << o.checkpoint << "  [" << a->root().scheme() << "]  "
              << ParamsText(a->root().params()) << " params, "
              << BytesText(a->root().bytes()) << "\n";
    PrintTree(a->root(), 0, a->root().scheme());
    std::cout << a->boundaries() << " quantization "
              << (a->boundaries() == 1 ? "boundary" : "boundaries")
              << " (\u25c6)\n";
  }
  return kExitOk;
}

namespace {

class StatsCommand : public Command {
 public:
  explicit StatsCommand(CLI::App& app)
      : Command(app.add_subcommand("stats",
                                   "statistics, a histogram and level usage "
                                   "(codes, values at the end levels) of a "
                                   "tensor")) {
    CLI::App& cmd = *this->app();
    cmd.add_option("checkpoint", o_.checkpoint, "checkpoint file or directory")
        ->transform(ServedPath())
        ->required();
    cmd.add_option("tensor", o_.tensor, "tensor name")->required();
    cmd.add_option("--bins", o_.bins, "histogram bins")
        ->capture_default_str()
        ->check(CLI::Range(1, kMaxHistogramBins));
    CLI::Option* ref = cmd.add_option("--ref", o_.reference,
                                      "the full-precision source: splits zeros "
                                      "into pruned and induced")
                           ->transform(ServedPath());
    cmd.add_option("--ref-tensor", o_.reference_tensor,
                   "the tensor in --ref (default: found as diff pairs)")
        ->needs(ref);
    const CLI::Validator group_id = ParsedBy(
        [](const std::string& text) -> absl::StatusOr<int64_t> {
          int64_t id = 0;
          if (!absl::SimpleAtoi(text, &id) || id < 0) {
            return absl::InvalidArgumentError(
                absl::StrCat("not a group id (an integer >= 0): '", text, "'"));
          }
          return id;
        },
        "ID");
    group_option_ = cmd.add_option(
        "--group", group_,
        "only this quantization group (an id as 'scalar' shows it), and list "
        "its representable levels");
    group_option_->check(group_id);
    cmd.footer(
        "Examples:\n  tensormorph stats model.gguf blk.0.attn_q.weight --bins "
        "16\n"
        "  tensormorph stats model.gguf blk.0.attn_q.weight --group 3\n"
        "Quantized tensors also print: levels used (distinct codes that "
        "occur, of the 2^bits there are); at lowest / highest level "
        "(elements on their group's end levels: where a group's own min and "
        "max land by design, not clipping, which only a diff against the "
        "source can count); groups at an end level (groups with at least "
        "one such element); level usage (a histogram of the raw codes). "
        "--json prints the same (ComputeStatsResponse).");
  }
  absl::Status Finish() override {
    EscapeTensorName(&o_.tensor);
    if (group_option_->count() > 0) o_.group = group_;
    return absl::OkStatus();
  }
  int Run(const CommandContext& c) override {
    return RunStats(*c.client, c.global, o_);
  }

 private:
  StatsOptionsCli o_;
  int64_t group_ = 0;
  CLI::Option* group_option_ = nullptr;
};

class HeatmapCommand : public Command {
 public:
  explicit HeatmapCommand(CLI::App& app)
      : Command(app.add_subcommand("heatmap",
                                   "a tensor as a picture: values, absmax, "
                                   "error in steps, squared error, or "
                                   "quantization groups")) {
    CLI::App& cmd = *this->app();
    cmd.add_option("checkpoint", o_.checkpoint, "checkpoint file or directory")
        ->transform(ServedPath())
        ->required();
    cmd.add_option("tensor", o_.tensor, "tensor name")->required();
    cmd.add_option("--mode", o_.mode,
                   "value (a cell's mean; also 'mean'), absmax, error (needs "
                   "--ref), group, zeros (the fraction exactly 0; with "
                   "--ref, induced red and pruned blue), or sq-error (each "
                   "cell's sum of squared errors against --ref; --imatrix "
                   "weighs each column by its importance, as llama-quantize "
                   "does)")
        ->capture_default_str()
        ->check(CLI::IsMember({"value", "mean", "absmax", "error", "group",
                               "zeros", "sq-error"}));
    CLI::Option* ref =
        cmd.add_option("--ref", o_.reference,
                       "the full-precision source (error and sq-error modes)")
            ->transform(ServedPath());
    cmd.add_option("--ref-tensor", o_.reference_tensor,
                   "the tensor in --ref (default: found as diff pairs)")
        ->needs(ref);
    imatrix_ = cmd.add_option("--imatrix", o_.imatrix,
                              "sq-error mode: llama.cpp importance matrix "
                              "(GGUF or legacy .dat) "
                              "weighing each element's squared error by its "
                              "column's importance")
                   ->transform(ServedPath());
    AddRegionOptions(cmd);
    cmd.add_option("-o,--output", o_.output,
                   std::string("write a PNG") + kOutputGuarantee)
        ->check(OutputPathValidator());
    cmd.add_flag("--term", o_.term, "draw with 24-bit colour in the terminal");
    cmd.footer(
        "Group mode colours neighbouring groups apart (no lines).\nExamples:\n"
        "  tensormorph heatmap model.gguf blk.0.attn_q.weight --mode group -o "
        "q.png\n"
        "  tensormorph heatmap q.gguf blk.0.attn_q.weight --mode error --ref "
        "src.gguf --term\n"
        "  tensormorph heatmap q.gguf blk.0.attn_q.weight --mode zeros --rows "
        "0:256 --cols 0:512 -o z.png\n"
        "  tensormorph heatmap q.gguf blk.0.ffn_down.weight --mode sq-error "
        "--ref src.gguf --imatrix imatrix.gguf --term");
  }
  GuardedOutput Output() const override {
    constexpr auto kCheckpoint = CommandInput::Kind::kCheckpoint;
    return {"-o",
            o_.output,
            {{kCheckpoint, o_.checkpoint, "checkpoint"},
             {kCheckpoint, o_.reference, "--ref checkpoint"},
             {CommandInput::Kind::kImportanceMatrix, o_.imatrix,
              "--imatrix file"}}};
  }
  absl::Status Finish() override;
  int Run(const CommandContext& c) override {
    return RunHeatmap(*c.client, c.global, o_);
  }

 private:
  // --size, --index, --rows and --cols: which cells of which view.
  void AddRegionOptions(CLI::App& cmd);

  HeatmapOptionsCli o_;
  CLI::Option* imatrix_ = nullptr;
  CLI::Option* size_option_ = nullptr;
  std::string size_ = "128x64";
  std::string rows_, cols_;
};

void HeatmapCommand::AddRegionOptions(CLI::App& cmd) {
  size_option_ =
      cmd.add_option("--size", size_,
                     "cells WxH, each 1 to " + std::to_string(kMaxHeatmapSide) +
                         ", at most " + std::to_string(kMaxHeatmapCells) +
                         " in all (fewer when the tensor is smaller; drawn in "
                         "a terminal without --size, no wider than it)")
          ->capture_default_str()
          ->check(ParsedBy(
              [](const std::string& text) {
                return ParseSize(text, kMaxHeatmapSide, kMaxHeatmapCells);
              },
              "WxH"));
  cmd.add_option("--index", o_.leading,
                 "for rank > 2, one index per leading dimension (negative "
                 "counts from the end), comma-separated or repeated, e.g. "
                 "--index 0,3 for a rank-4 tensor")
      ->delimiter(',')
      ->allow_extra_args(false);
  const CLI::Validator range_check =
      ParsedBy([](const std::string& text) { return ParseRange(text); }, "A:B");
  cmd.add_option("--rows", rows_,
                 "only view rows [A, B) (zoom; either end may be left out)")
      ->check(range_check);
  cmd.add_option("--cols", cols_,
                 "only view columns [A, B) (zoom; either end may be left "
                 "out)")
      ->check(range_check);
}

absl::Status HeatmapCommand::Finish() {
  if ((o_.mode == "error" || o_.mode == "sq-error") && o_.reference.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mode ", o_.mode,
                     " measures against a reference: give it with --ref"));
  }
  // GetHeatmapRequest.imatrix empty means none: an empty --imatrix (an
  // unset shell variable) would draw unweighted what was asked weighted.
  if (imatrix_->count() > 0 && o_.imatrix.empty()) {
    return RequestFieldError(
        "imatrix",
        "--imatrix: the path is empty (leave --imatrix out for an "
        "unweighted map)");
  }
  // Said here in the CLI's words (the service names its request's enum).
  if (!o_.imatrix.empty() && o_.mode != "sq-error") {
    return RequestFieldError(
        "imatrix", absl::StrCat("--imatrix weighs the squared errors of "
                                "--mode sq-error, not --mode ",
                                o_.mode, ": add --mode sq-error --ref SOURCE"));
  }
  EscapeTensorName(&o_.tensor);
  // Checked by CLI11 already; the server names a region outside the view.
  auto wh = ParseSize(size_, kMaxHeatmapSide, kMaxHeatmapCells);
  if (!wh.ok()) return wh.status();
  std::tie(o_.width, o_.height) = *wh;
  o_.size_given = size_option_->count() > 0;
  if (!rows_.empty()) {
    auto r = ParseRange(rows_);
    if (!r.ok()) return r.status();
    std::tie(o_.row_begin, o_.row_end) = *r;
  }
  if (!cols_.empty()) {
    auto r = ParseRange(cols_);
    if (!r.ok()) return r.status();
    std::tie(o_.col_begin, o_.col_end) = *r;
  }
  return absl::OkStatus();
}

class ArchCommand : public Command {
 public:
  explicit ArchCommand(CLI::App& app)
      : Command(app.add_subcommand("arch",
                                   "the module tree, with a mark wherever the "
                                   "dtype or quantization scheme changes")) {
    CLI::App& cmd = *this->app();
    cmd.add_option("checkpoint", o_.checkpoint, "checkpoint file or directory")
        ->transform(ServedPath())
        ->required();
    cmd.add_flag("--dot", o_.dot, "Graphviz output");
    cmd.footer(
        "Examples:\n  tensormorph arch model.gguf\n  tensormorph arch model/ "
        "--dot | dot -Tpng > arch.png");
  }
  int Run(const CommandContext& c) override {
    return RunArch(*c.client, c.global, o_);
  }

 private:
  ArchOptionsCli o_;
};

}  // namespace

std::unique_ptr<Command> RegisterStats(CLI::App& app) {
  return std::make_unique<StatsCommand>(app);
}
std::unique_ptr<Command> RegisterHeatmap(CLI::App& app) {
  return std::make_unique<HeatmapCommand>(app);
}
std::unique_ptr<Command> RegisterArch(CLI::App& app) {
  return std::make_unique<ArchCommand>(app);
}

}  // namespace tensormorph
