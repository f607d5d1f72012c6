// compare --html's page (client/cli/compare_report.h): self-contained, the
// comparison inlined so that no name can break out of its script element,
// and the web page's compare_view.js inlined byte for byte.
#include "client/cli/compare_report.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "client/cli/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tensormorph {

extern const char kCompareViewJs[];
extern const size_t kCompareViewJsSize;

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kHostile[] = "</script><script>alert(1)</script><!--";

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

struct Comparison {
  v1::CompareQuantizationsRequest request;
  std::vector<v1::CompareEvent> events;
};

Comparison HostileComparison() {
  Comparison c;
  c.request.set_source(std::string("src") + kHostile + ".gguf");
  c.request.add_quantizations("a.gguf");
  c.request.add_quantizations(std::string("b") + kHostile + ".gguf");
  v1::CompareEvent row;
  row.mutable_row()->set_reference_name(std::string("blk.0") + kHostile);
  v1::CompareCell* cell = row.mutable_row()->add_cells();
  cell->set_present(true);
  cell->set_scheme("Q8_0");
  cell->set_bits_per_weight(8.5);
  c.events.push_back(row);
  v1::CompareEvent summary;
  summary.mutable_summary()->add_totals()->set_checkpoint(
      c.request.quantizations(1));
  c.events.push_back(summary);
  return c;
}

TEST(CompareReportHtml, NoNameClosesTheScriptElements) {
  Comparison c = HostileComparison();
  const std::string html = CompareReportHtml(c.request, c.events);
  // The data's and the module's: opened and closed once each.
  EXPECT_EQ(Count(html, "<script"), 2);
  EXPECT_EQ(Count(html, "</script"), 2);
  EXPECT_THAT(html, Not(HasSubstr("<!--")));
  EXPECT_THAT(html, Not(HasSubstr("alert(1)</")));
}

TEST(CompareReportHtml, InlinesEveryEventAsTheJsonOutputPrintsIt) {
  Comparison c = HostileComparison();
  const std::string html = CompareReportHtml(c.request, c.events);
  for (const v1::CompareEvent& e : c.events) {
    // The --json line, with "<" written as the JSON escape that means it.
    EXPECT_THAT(html,
                HasSubstr(absl::StrReplaceAll(ToJson(e), {{"<", "\\u003c"}})));
  }
}

TEST(CompareReportHtml, InlinesTheWebPagesCompareViewByteForByte) {
  std::ifstream in(std::string(TENSORMORPH_SOURCE_DIR) +
                   "/client/web/compare_view.js");
  ASSERT_TRUE(in) << "cannot read client/web/compare_view.js";
  std::stringstream source;
  source << in.rdbuf();
  EXPECT_EQ(std::string(kCompareViewJs, kCompareViewJsSize), source.str());
  Comparison c = HostileComparison();
  EXPECT_THAT(CompareReportHtml(c.request, c.events), HasSubstr(source.str()));
}

TEST(CompareReportHtml, LoadsNothing) {
  Comparison c = HostileComparison();
  const std::string html = CompareReportHtml(c.request, c.events);
  // Nothing to fetch, and a policy that would refuse a fetch added later.
  EXPECT_THAT(html, HasSubstr("content=\"default-src 'none'"));
  for (const char* fetches :
       {" src=", "<link", "<img", "<iframe", "url(", "import ", "fetch("}) {
    EXPECT_THAT(html, Not(HasSubstr(fetches))) << fetches;
  }
}

}  // namespace
}  // namespace tensormorph
