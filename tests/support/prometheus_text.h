// A strict reader of the Prometheus text exposition format 0.0.4, written
// from the format's description and independent of the server's writer, so
// that tests of /metrics check what a scraper would accept, not what our own
// writer believes it wrote.
//
//   absl::StatusOr<PrometheusScrape> scrape = ParsePrometheusText(text);
//   ASSERT_TRUE(scrape.ok()) << scrape.status();
//   EXPECT_EQ(scrape->Value("tensormorph_calls_total",
//                           {{"method", "ReadSlice"}, {"code", "OK"}}),
//             1);
#ifndef TENSORMORPH_TESTS_SUPPORT_PROMETHEUS_TEXT_H_
#define TENSORMORPH_TESTS_SUPPORT_PROMETHEUS_TEXT_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensormorph::testing {

using PrometheusLabels = std::map<std::string, std::string>;

struct PrometheusSample {
  std::string name;         // as written: "x_bucket" for histogram x
  std::string family;       // the TYPE'd family it belongs to: "x"
  PrometheusLabels labels;  // values unescaped
  double value = 0;
  std::optional<int64_t> timestamp_ms;
};

struct PrometheusFamily {
  // counter, gauge, histogram, summary or untyped; empty for a family with
  // a HELP line only (and so no samples).
  std::string type;
  std::optional<std::string> help;  // unescaped
};

struct PrometheusScrape {
  std::map<std::string, PrometheusFamily> families;  // by family name
  std::vector<PrometheusSample> samples;             // in text order

  // The value of the sample named `name` whose labels are exactly `labels`;
  // nothing when there is none.
  std::optional<double> Value(const std::string& name,
                              const PrometheusLabels& labels = {}) const;
  // The sum of the samples named `name` whose labels include `subset` (0
  // when none do): e.g. every code of one method.
  double Sum(const std::string& name,
             const PrometheusLabels& subset = {}) const;
};

// Parses `text`, refusing (INVALID_ARGUMENT naming the line, the rule, and
// what was expected and found) anything a strict scraper could not take:
//  - text not ending in a line feed, or not UTF-8 in label values and HELP;
//  - a metric or label name outside [a-zA-Z_:][a-zA-Z0-9_:]* (labels: no
//    ':'), a label name twice in one sample, an escape other than \\ \" \n
//    in a label value (\\ and \n in HELP), an unparsable value or timestamp;
//  - HELP or TYPE given twice for a family, an unknown type, a TYPE after
//    the family's first sample;
//  - a sample whose family has no TYPE (histogram x covers x_bucket, x_sum
//    and x_count; summary x covers x, x_sum and x_count), or whose family's
//    lines were interrupted by another family's;
//  - a series (name and labels) given twice; a negative or NaN counter;
//  - a histogram series (labels but le) whose buckets are not in rising le
//    order, not cumulative, lack le="+Inf", or lack _sum or _count, or whose
//    _count differs from its +Inf bucket; a _bucket without le.
absl::StatusOr<PrometheusScrape> ParsePrometheusText(absl::string_view text);

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_PROMETHEUS_TEXT_H_
