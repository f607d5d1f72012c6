// The exposition-format parser the /metrics tests rely on: it takes what the
// format allows and refuses, naming the line and the rule, what it does not.
#include "tests/support/prometheus_text.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace tensormorph::testing::prometheus_text_test {
namespace {

using ::testing::Optional;

constexpr char kValid[] =
    "# HELP calls_total Calls, by \\\\ and \\n.\n"
    "# TYPE calls_total counter\n"
    "calls_total{method=\"A\",code=\"OK\"} 3\n"
    "calls_total{ method = \"q\\\"\\\\\\n\" , } 1e3 1700000000000\n"
    "\n"
    "# a comment\n"
    "# TYPE d histogram\n"
    "d_bucket{m=\"A\",le=\"0.5\"} 1\n"
    "d_bucket{m=\"A\",le=\"1\"} 2\n"
    "d_bucket{m=\"A\",le=\"+Inf\"} 2\n"
    "d_sum{m=\"A\"} 0.75\n"
    "d_count{m=\"A\"} 2\n"
    "# TYPE g gauge\n"
    "g -Inf\n"
    "# TYPE s summary\n"
    "s{quantile=\"0.5\"} NaN\n"
    "s_sum 0\n"
    "s_count 0\n";

TEST(PrometheusTextTest, ReadsFamiliesSamplesLabelsAndValues) {
  absl::StatusOr<PrometheusScrape> s = ParsePrometheusText(kValid);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->families.at("calls_total").type, "counter");
  EXPECT_THAT(s->families.at("calls_total").help,
              Optional(std::string("Calls, by \\ and \n.")));
  EXPECT_THAT(s->Value("calls_total", {{"method", "A"}, {"code", "OK"}}),
              Optional(3.0));
  EXPECT_THAT(s->Value("calls_total", {{"method", "q\"\\\n"}}),
              Optional(1000.0));
  EXPECT_EQ(s->samples[1].timestamp_ms, 1700000000000);
  EXPECT_EQ(s->Sum("calls_total"), 1003);
  EXPECT_EQ(s->Sum("d_bucket", {{"m", "A"}}), 5);
  EXPECT_EQ(s->samples[2].family, "d");
  EXPECT_THAT(s->Value("g"), Optional(-INFINITY));
  EXPECT_TRUE(std::isnan(*s->Value("s", {{"quantile", "0.5"}})));
  EXPECT_EQ(s->Value("calls_total"), std::nullopt);  // labels must match
}

TEST(PrometheusTextTest, AcceptsAnEmptyText) {
  EXPECT_TRUE(ParsePrometheusText("").ok());
}

// Each refusal names the line (or histogram) and the rule broken.
void ExpectRefused(absl::string_view text, absl::string_view message) {
  EXPECT_THAT(ParsePrometheusText(text),
              StatusIs(absl::StatusCode::kInvalidArgument, message))
      << text;
}

TEST(PrometheusTextTest, RefusesTextWithoutAFinalLineFeed) {
  ExpectRefused("# TYPE g gauge\ng 1", "must end with a line feed");
}

TEST(PrometheusTextTest, RefusesASampleWithoutAType) {
  ExpectRefused("g 1\n", "line 1: sample 'g' belongs to no family");
  ExpectRefused("# HELP g only help\ng 1\n", "line 2: sample 'g'");
  // _bucket belongs to a histogram only.
  ExpectRefused("# TYPE s summary\ns_bucket{le=\"1\"} 1\n", "'s_bucket'");
}

TEST(PrometheusTextTest, RefusesBadNamesEscapesAndValues) {
  ExpectRefused("# TYPE g gauge\n1g 1\n", "line 2: expected a metric name");
  ExpectRefused("# TYPE g gauge\ng{a:b=\"x\"} 1\n", "expected '='");
  ExpectRefused("# TYPE g gauge\ng{a=\"\\t\"} 1\n",
                "label a: expected \\\\, \\\" or \\n; found '\\t'");
  ExpectRefused("# TYPE g gauge\ng{a=\"x} 1\n", "no closing");
  ExpectRefused("# TYPE g gauge\ng{a=\"\xff\"} 1\n", "not UTF-8");
  ExpectRefused("# TYPE g gauge\ng{a=\"1\",a=\"2\"} 1\n", "a given twice");
  ExpectRefused("# TYPE g gauge\ng{a=\"1\" b=\"2\"} 1\n",
                "expected ',' or '}'");
  ExpectRefused("# TYPE g gauge\ng one\n", "expected a float");
  ExpectRefused("# TYPE g gauge\ng inf\n", "expected a float");
  ExpectRefused("# TYPE g gauge\ng 1 2.5\n", "expected milliseconds");
  ExpectRefused("# TYPE g gauge\ng 1 2 3\n", "expected milliseconds");
  ExpectRefused("# TYPE g gauge\ng{} 1x\n", "expected a float");
  ExpectRefused("# HELP g a \\t\n", "expected \\\\ or \\n");
}

TEST(PrometheusTextTest, RefusesMisplacedOrRepeatedMetadata) {
  ExpectRefused("# TYPE g gauge\n# TYPE g counter\n", "second # TYPE");
  ExpectRefused("# HELP g a\n# HELP g b\n", "second # HELP");
  ExpectRefused("# TYPE g gauge\ng 1\n# HELP g late\n",
                "line 3: # HELP for 'g' after its samples");
  ExpectRefused("# TYPE g meter\n", "expected counter, gauge");
  ExpectRefused("# TYPE g gauge extra\n", "expected counter, gauge");
}

TEST(PrometheusTextTest, RefusesInterleavedFamiliesAndRepeatedSeries) {
  ExpectRefused("# TYPE a gauge\n# TYPE b gauge\na 1\nb 1\na{x=\"1\"} 2\n",
                "line 5: sample of 'a' after those of 'b'");
  ExpectRefused("# TYPE a gauge\na{x=\"1\"} 1\na{x=\"1\"} 2\n",
                "a{x=\"1\"} given twice");
}

TEST(PrometheusTextTest, RefusesNegativeCounters) {
  ExpectRefused("# TYPE c counter\nc -1\n", "expected a value >= 0");
  ExpectRefused("# TYPE c counter\nc NaN\n", "expected a value >= 0");
}

TEST(PrometheusTextTest, RefusesBrokenHistograms) {
  const std::string head = "# TYPE d histogram\n";
  ExpectRefused(head + "d 1\n", "expected _bucket, _sum or _count");
  ExpectRefused(head + "d_bucket 1\n", "needs an le label");
  ExpectRefused(head +
                    "d_bucket{le=\"1\"} 2\nd_bucket{le=\"+Inf\"} 1\n"
                    "d_sum 0\nd_count 1\n",
                "must be cumulative");
  ExpectRefused(head + "d_bucket{le=\"2\"} 1\nd_bucket{le=\"1\"} 1\n",
                "must rise in le");
  ExpectRefused(head + "d_bucket{le=\"1\"} 1\nd_sum 0\nd_count 1\n",
                "no le=\"+Inf\" bucket");
  ExpectRefused(head + "d_bucket{le=\"+Inf\"} 1\nd_count 1\n",
                "expected both _sum and _count");
  ExpectRefused(head + "d_bucket{le=\"+Inf\"} 1\nd_sum 0\nd_count 2\n",
                "_count is 2 but the +Inf bucket is 1");
  ExpectRefused(head + "d_bucket{le=\"x\"} 1\n", "le is not a float");
  // Series are told apart by their labels other than le.
  EXPECT_TRUE(ParsePrometheusText(
                  head +
                  "d_bucket{m=\"a\",le=\"+Inf\"} 1\nd_bucket{m=\"b\",le=\"+"
                  "Inf\"} 2\nd_sum{m=\"a\"} 0\nd_sum{m=\"b\"} 0\n"
                  "d_count{m=\"a\"} 1\nd_count{m=\"b\"} 2\n")
                  .ok());
}

}  // namespace
}  // namespace tensormorph::testing::prometheus_text_test
