// tensormorph diff QUANT REF: the quantization diff as a CLI for people
// (a table sorted by worst error in steps, a progress bar) and for CI
// (--json lines, --fail-on gates with exit code 3).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cli/commands.h"
#include "client/cli/fail_on.h"
#include "client/cli/format.h"

namespace tensormorph {
namespace {

void DrawProgress(const v1::DiffProgress& p) {
  const double frac =
      p.bytes_total() > 0
          ? static_cast<double>(p.bytes_done()) / p.bytes_total()
          : 0;
  const int width = 30, filled = static_cast<int>(frac * width);
  std::string bar(filled, '=');
  if (filled < width) bar += '>' + std::string(width - filled - 1, ' ');
  std::fprintf(stderr, "\r[%s] %lld/%lld tensors, %s/%s, %.1f s ", bar.c_str(),
               static_cast<long long>(p.tensors_done()),
               static_cast<long long>(p.tensors_total()),
               BytesText(p.bytes_done()).c_str(),
               BytesText(p.bytes_total()).c_str(), p.elapsed_seconds());
  std::fflush(stderr);
}

}  // namespace

int RunDiff(Client& client, const GlobalOptions& g, const DiffOptionsCli& o) {
  std::vector<FailOn> gates;
  for (const std::string& text : o.fail_on) {
    auto f = ParseFailOn(text);
    if (!f.ok()) {
      std::fprintf(stderr, "tensormorph: %s\n",
                   std::string(f.status().message()).c_str());
      return kExitUsage;
    }
    gates.push_back(*f);
  }
  v1::QuantDiffRequest req;
  req.set_checkpoint(o.quant);
  req.set_reference(o.reference);
  req.set_filter(o.filter);
  req.set_top_k(o.top_k);  // 0: none
  const bool bar = !g.json && ::isatty(2);
  std::vector<v1::TensorDiffReport> reports;
  v1::DiffSummary summary;
  // --fail-on: every tensor against every gate, as it arrives, so that the
  // report printed (and kept by CI) says whether and why it tripped.
  std::vector<std::string> tripped;  // "name: metric = value (gate)"
  std::map<std::string, std::vector<std::string>> tripped_gates;  // by name
  auto gate = [&](v1::TensorDiffReport* r) {
    for (const FailOn& f : gates) {
      if (!Trips(f, *r)) continue;
      const std::string reason =
          absl::StrCat(f.metric, " = ", NumberText(*MetricOf(*r, f.metric)),
                       " (", f.text, ")");
      r->set_flagged(true);
      r->add_flag_reasons(reason);
      tripped.push_back(absl::StrCat(r->name(), ": ", reason));
      tripped_gates[r->name()].push_back(f.text);
    }
  };
  // The summary's flagged list: the server's and the gates', sorted.
  auto flag_summary = [&](v1::DiffSummary* sum) {
    std::set<std::string> names(sum->flagged().begin(), sum->flagged().end());
    for (const auto& [name, unused] : tripped_gates) names.insert(name);
    sum->clear_flagged();
    for (const std::string& n : names) sum->add_flagged(n);
  };
  absl::Status s = client.QuantDiff(req, [&](const v1::QuantDiffEvent& event) {
    v1::QuantDiffEvent e = event;
    if (e.has_progress()) {
      if (g.json) {
        std::cerr << ToJson(e) << "\n";
      } else if (bar) {
        DrawProgress(e.progress());
      }
    } else if (e.has_tensor()) {
      v1::QuantDiffEvent& out = e;
      gate(out.mutable_tensor());
      reports.push_back(out.tensor());
      if (g.json) std::cout << ToJson(out) << std::endl;
    } else if (e.has_summary()) {
      v1::QuantDiffEvent out = e;
      flag_summary(out.mutable_summary());
      summary = out.summary();
      if (g.json) std::cout << ToJson(out) << std::endl;
    }
    return true;
  });
  if (bar) std::fprintf(stderr, "\r%80s\r", "");
  if (!s.ok()) return ReportFailure(s);
  if (summary.tensors_compared() == 0) {
    // The service refuses such a diff itself (CheckPairing); an older one
    // may not, and a gate over nothing must not pass.
    return ReportFailure(absl::FailedPreconditionError(
        absl::StrCat("0 tensors compared between '", o.quant, "' and '",
                     o.reference, "': nothing passed or failed a gate")));
  }

  if (!g.json) {
    std::sort(reports.begin(), reports.end(), [](const auto& a, const auto& b) {
      return a.max_err_steps() != b.max_err_steps()
                 ? a.max_err_steps() > b.max_err_steps()
                 : a.name() < b.name();
    });
    std::vector<std::vector<std::string>> rows = {
        {"TENSOR", "SCHEME", "MAX ERR", "P99", ">0.5", "CLIPPED", "SQNR dB",
         "COSINE", "INDUCED 0", "PRUNED 0"}};
    // With gates, which of them each tensor tripped.
    if (!gates.empty()) rows[0].push_back("FAIL-ON");
    for (const auto& r : reports) {
      rows.push_back(
          {r.name(), r.scheme(), absl::StrFormat("%.4f", r.max_err_steps()),
           absl::StrFormat("%.4f", r.p99_err_steps()),
           absl::StrCat(r.above_half_step()), absl::StrCat(r.clipped()),
           absl::StrFormat("%.2f", r.sqnr_db()),
           absl::StrFormat("%.6f", r.cosine()), absl::StrCat(r.induced_zeros()),
           absl::StrCat(r.source_zeros())});
      if (!gates.empty()) {
        auto it = tripped_gates.find(r.name());
        rows.back().push_back(
            it == tripped_gates.end() ? "-" : absl::StrJoin(it->second, ", "));
      }
    }
    std::cout << "error in units of the local quantization step (rounding "
                 "alone stays <= 0.5)\n"
              << Table(rows);
    if (!reports.empty() && !reports[0].worst().empty()) {
      const auto& r = reports[0];
      std::cout << "\nworst elements of " << r.name() << ":\n";
      std::vector<std::vector<std::string>> w = {{"INDEX", "SOURCE", "DECODED",
                                                  "ERR STEPS", "CODE", "SCALE",
                                                  "ZERO", "GROUP"}};
      for (const auto& e : r.worst()) {
        w.push_back(
            {ShapeText(e.index()), NumberText(e.source()),
             NumberText(e.decoded()), absl::StrFormat("%.4f", e.err_steps()),
             absl::StrCat(e.quant().raw_code()), NumberText(e.quant().scale()),
             NumberText(e.quant().zero_point()),
             absl::StrCat(e.quant().group())});
      }
      std::cout << Table(w);
    }
    const double gbps =
        summary.wall_seconds() > 0
            ? summary.bytes_read() / 1e9 / summary.wall_seconds()
            : 0;
    std::cout << "\n"
              << Count(summary.tensors_compared(), "tensor") << " compared ("
              << PairingText(summary) << "), "
              << BytesText(summary.bytes_read()) << " of source in "
              << absl::StrFormat("%.2f s (%.2f GB/s)", summary.wall_seconds(),
                                 gbps)
              << "\n";
    if (summary.skipped_empty_size() > 0) {
      std::cout << "skipped, empty (a zero dimension, nothing to compare): "
                << absl::StrJoin(summary.skipped_empty(), ", ") << "\n";
    }
    if (summary.only_in_checkpoint_size() > 0) {
      std::cout << "only in " << o.quant << ": "
                << absl::StrJoin(summary.only_in_checkpoint(), ", ") << "\n";
    }
    if (summary.only_in_reference_size() > 0) {
      std::cout << "only in " << o.reference << ": "
                << absl::StrJoin(summary.only_in_reference(), ", ") << "\n";
    }
    if (summary.shape_mismatches_size() > 0) {
      std::cout << "shape mismatches: "
                << absl::StrJoin(summary.shape_mismatches(), "; ") << "\n";
    }
    if (!gates.empty()) {
      std::cout << "--fail-on: " << summary.flagged_size() << " of "
                << reports.size() << " tensors flagged"
                << (summary.flagged().empty() ? "" : ": ")
                << absl::StrJoin(summary.flagged(), ", ") << "\n";
    }
  }
  if (!tripped.empty()) {
    std::fprintf(stderr, "tensormorph: --fail-on tripped by %zu tensor(s):\n",
                 tripped.size());
    for (const std::string& t : tripped)
      std::fprintf(stderr, "  %s\n", t.c_str());
    return kExitThreshold;
  }
  return kExitOk;
}

}  // namespace tensormorph
