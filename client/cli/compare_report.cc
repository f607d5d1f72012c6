#include "client/cli/compare_report.h"

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "client/cli/format.h"

namespace tensormorph {

// client/web/compare_view.js, compiled in by client/cli/embed_text.cmake.
extern const char kCompareViewJs[];
extern const size_t kCompareViewJsSize;

namespace {

std::string HtmlText(const std::string& text) {
  return absl::StrReplaceAll(
      text, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}});
}

// JSON inside <script>: a "<" occurs only within JSON strings, where
// \u003c means the same, so no name can close the script element early.
std::string ScriptJson(const std::string& json) {
  return absl::StrReplaceAll(json, {{"<", "\\u003c"}});
}

}  // namespace

std::string CompareReportHtml(const v1::CompareQuantizationsRequest& request,
                              const std::vector<v1::CompareEvent>& events) {
  std::vector<std::string> event_json;
  event_json.reserve(events.size());
  for (const v1::CompareEvent& e : events) event_json.push_back(ToJson(e));
  const std::string data =
      absl::StrCat("{\"request\":", ToJson(request), ",\"events\":[",
                   absl::StrJoin(event_json, ",\n"), "]}");
  std::string quantizations;
  for (int q = 0; q < request.quantizations_size(); ++q) {
    absl::StrAppend(&quantizations, "<li><code>[", q, "] ",
                    HtmlText(request.quantizations(q)), "</code></li>");
  }
  // The module runs after the document is parsed, so #report and the data
  // exist; compare_view.js has no imports, so it runs inlined as it is. The
  // request goes with the events: the mix's heading says the budget as the
  // user gave it (--budget-bpw), not only as bytes.
  return absl::StrCat(
      "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src "
      "'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'\">\n"
      "<title>tensormorph compare: ",
      HtmlText(request.source()),
      "</title>\n<style>\n"
      "html, body { margin: 0; background: #0f131a; color: #d8dee9; "
      "color-scheme: dark; font: 14px/1.45 system-ui, 'DejaVu Sans', "
      "sans-serif; }\n"
      "main { padding: 18px 24px; }\nh1 { font-size: 20px; margin: 0 0 8px; "
      "}\ncode { font-family: ui-monospace, 'DejaVu Sans Mono', monospace; "
      "}\n.quantizations { margin: 4px 0 0; padding-left: 18px; }\n"
      "</style>\n</head>\n<body>\n<main>\n<h1>Quantizations of <code>",
      HtmlText(request.source()), "</code></h1>\n<ul class=\"quantizations\">",
      quantizations,
      "</ul>\n<div id=\"report\"></div>\n</main>\n"
      "<script type=\"application/json\" id=\"comparison\">\n",
      ScriptJson(data), "\n</script>\n<script type=\"module\">\n",
      std::string(kCompareViewJs, kCompareViewJsSize),
      "\nconst comparison = JSON.parse("
      "document.getElementById('comparison').textContent);\n"
      "renderComparison(document.getElementById('report'), "
      "comparison.events, {request: "
      "comparison.request});\n</script>\n</body>\n</html>\n");
}

}  // namespace tensormorph
