// The self-contained HTML report of `tensormorph compare --html FILE`: one
// file that opens in any browser, offline, and shows what the web
// inspector's Compare view shows (the matrix, the size-versus-error chart
// with its frontier, the per-layer error curves, and with a budget the mix
// and its llama-quantize command).
//
// Self-contained: the comparison's JSON (what `--json compare` prints) and
// the web page's client/web/compare_view.js, compiled into the CLI, are
// inlined; the page loads nothing, and its Content-Security-Policy
// (default-src 'none') would refuse any load a later edit might add.
#ifndef TENSORMORPH_CLIENT_CLI_COMPARE_REPORT_H_
#define TENSORMORPH_CLIENT_CLI_COMPARE_REPORT_H_

#include <string>
#include <vector>

#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// The report's HTML for the comparison `request` asked for, whose events
// (rows, then the summary; progress left out) are `events`, in the order
// they came.
std::string CompareReportHtml(const v1::CompareQuantizationsRequest& request,
                              const std::vector<v1::CompareEvent>& events);

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_CLI_COMPARE_REPORT_H_
