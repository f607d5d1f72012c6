#include "tests/support/prometheus_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tensormorph::testing {
namespace {

bool IsValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF.
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

bool IsNameStart(char c, bool colon) {
  return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_' ||
         (colon && c == ':');
}
bool IsNameChar(char c, bool colon) {
  return IsNameStart(c, colon) ||
         absl::ascii_isdigit(static_cast<unsigned char>(c));
}
bool IsBlank(char c) { return c == ' ' || c == '\t'; }

std::string Quote(absl::string_view s) { return absl::StrCat("'", s, "'"); }

std::string LabelsText(const PrometheusLabels& labels) {
  return absl::StrCat("{",
                      absl::StrJoin(labels, ",",
                                    [](std::string* out, const auto& kv) {
                                      absl::StrAppend(out, kv.first, "=\"",
                                                      kv.second, "\"");
                                    }),
                      "}");
}

// The Go client's float syntax: decimal or exponent notation, and the
// spellings of the infinities and NaN.
std::optional<double> ParseValue(absl::string_view s) {
  if (s == "+Inf" || s == "Inf") return INFINITY;
  if (s == "-Inf") return -INFINITY;
  if (s == "NaN") return NAN;
  absl::string_view digits = s;
  if (absl::StartsWith(digits, "+")) digits.remove_prefix(1);
  if (digits.empty() || digits[0] == '+') return std::nullopt;
  double v = 0;
  const auto [end, ec] =
      std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size()) {
    return std::nullopt;
  }
  if (std::isnan(v) || std::isinf(v)) return std::nullopt;  // "nan", "inf"
  return v;
}

// One line, read left to right; every Take* leaves the cursor unmoved on
// failure.
class LineReader {
 public:
  explicit LineReader(absl::string_view line) : rest_(line) {}
  bool done() const { return rest_.empty(); }
  char peek() const { return rest_.empty() ? '\0' : rest_[0]; }
  absl::string_view rest() const { return rest_; }
  void SkipBlanks() {
    while (!rest_.empty() && IsBlank(rest_[0])) rest_.remove_prefix(1);
  }
  bool Consume(char c) {
    if (done() || rest_[0] != c) return false;
    rest_.remove_prefix(1);
    return true;
  }
  void Skip(size_t n) { rest_.remove_prefix(std::min(n, rest_.size())); }
  // A metric name (colon true) or label name.
  std::optional<std::string> TakeName(bool colon) {
    if (done() || !IsNameStart(rest_[0], colon)) return std::nullopt;
    size_t n = 1;
    while (n < rest_.size() && IsNameChar(rest_[n], colon)) ++n;
    std::string name(rest_.substr(0, n));
    rest_.remove_prefix(n);
    return name;
  }
  // Up to the next blank or the end.
  absl::string_view TakeToken() {
    size_t n = 0;
    while (n < rest_.size() && !IsBlank(rest_[n])) ++n;
    absl::string_view t = rest_.substr(0, n);
    rest_.remove_prefix(n);
    return t;
  }

 private:
  absl::string_view rest_;
};

class Parser {
 public:
  absl::StatusOr<PrometheusScrape> Parse(absl::string_view text) {
    if (!text.empty() && !absl::EndsWith(text, "\n")) {
      return absl::InvalidArgumentError(
          "the text must end with a line feed; it ends with " +
          Quote(text.substr(text.size() - std::min<size_t>(text.size(), 20))));
    }
    std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
    if (!lines.empty()) lines.pop_back();  // after the final line feed
    for (size_t i = 0; i < lines.size(); ++i) {
      line_ = i + 1;
      absl::string_view line = lines[i];
      absl::Status s;
      if (absl::StripLeadingAsciiWhitespace(line).empty()) continue;
      if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), "#")) {
        s = Comment(absl::StripLeadingAsciiWhitespace(line));
      } else {
        s = Sample(line);
      }
      if (!s.ok()) return s;
    }
    if (absl::Status s = CheckHistograms(); !s.ok()) return s;
    return std::move(scrape_);
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", line_, ": ", what));
  }

  // "# HELP name text", "# TYPE name type"; any other comment is ignored.
  absl::Status Comment(absl::string_view line) {
    LineReader r(line.substr(1));
    r.SkipBlanks();
    const absl::string_view keyword = r.TakeToken();
    if (keyword != "HELP" && keyword != "TYPE") return absl::OkStatus();
    r.SkipBlanks();
    std::optional<std::string> name = r.TakeName(/*colon=*/true);
    if (!name.has_value() || !(r.done() || IsBlank(r.peek()))) {
      return Error(absl::StrCat("# ", keyword, " needs a metric name; found ",
                                Quote(r.rest())));
    }
    if (sampled_.contains(*name)) {
      return Error(absl::StrCat("# ", keyword, " for ", Quote(*name),
                                " after its samples; metadata comes first"));
    }
    PrometheusFamily& family = scrape_.families[*name];
    if (keyword == "HELP") {
      if (family.help.has_value()) {
        return Error(absl::StrCat("second # HELP for ", Quote(*name)));
      }
      if (!r.done()) r.Skip(1);  // the one blank before the text
      absl::StatusOr<std::string> help = UnescapeHelp(r.rest());
      if (!help.ok()) return help.status();
      family.help = *std::move(help);
      return absl::OkStatus();
    }
    if (typed_.contains(*name)) {
      return Error(absl::StrCat("second # TYPE for ", Quote(*name)));
    }
    r.SkipBlanks();
    const std::string type(r.TakeToken());
    r.SkipBlanks();
    static const std::set<std::string> kTypes = {
        "counter", "gauge", "histogram", "summary", "untyped"};
    if (!kTypes.contains(type) || !r.done()) {
      return Error(absl::StrCat(
          "# TYPE ", *name,
          ": expected counter, gauge, histogram, summary or untyped; found ",
          Quote(absl::StrCat(type, r.rest()))));
    }
    family.type = type;
    typed_.insert(*name);
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> UnescapeHelp(absl::string_view s) const {
    if (!IsValidUtf8(s)) return Error("HELP text is not UTF-8");
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\\') {
        out += s[i];
        continue;
      }
      if (i + 1 < s.size() && s[i + 1] == '\\') {
        out += '\\';
      } else if (i + 1 < s.size() && s[i + 1] == 'n') {
        out += '\n';
      } else {
        return Error(absl::StrCat("HELP text: expected \\\\ or \\n; found ",
                                  Quote(s.substr(i, 2))));
      }
      ++i;
    }
    return out;
  }

  // The text between the quotes of a label value, unescaped; the cursor
  // ends past the closing quote.
  absl::StatusOr<std::string> LabelValue(LineReader& r,
                                         absl::string_view label) const {
    if (!r.Consume('"')) {
      return Error(absl::StrCat("label ", label,
                                ": expected '\"' opening its value; found ",
                                Quote(r.rest())));
    }
    std::string out;
    absl::string_view s = r.rest();
    size_t i = 0;
    for (; i < s.size() && s[i] != '"'; ++i) {
      if (s[i] != '\\') {
        out += s[i];
        continue;
      }
      const char next = i + 1 < s.size() ? s[i + 1] : '\0';
      if (next == '\\' || next == '"') {
        out += next;
      } else if (next == 'n') {
        out += '\n';
      } else {
        return Error(absl::StrCat("label ", label,
                                  ": expected \\\\, \\\" or \\n; found ",
                                  Quote(s.substr(i, 2))));
      }
      ++i;
    }
    if (i == s.size()) {
      return Error(
          absl::StrCat("label ", label, ": value has no closing '\"'"));
    }
    if (!IsValidUtf8(out)) {
      return Error(absl::StrCat("label ", label, ": value is not UTF-8"));
    }
    r.Skip(i + 1);  // the value and its closing quote
    return out;
  }

  absl::StatusOr<PrometheusLabels> Labels(LineReader& r) const {
    PrometheusLabels labels;
    r.SkipBlanks();
    while (!r.Consume('}')) {
      std::optional<std::string> name = r.TakeName(/*colon=*/false);
      if (!name.has_value()) {
        return Error(absl::StrCat("expected a label name or '}'; found ",
                                  Quote(r.rest())));
      }
      r.SkipBlanks();
      if (!r.Consume('=')) {
        return Error(absl::StrCat("label ", *name, ": expected '='; found ",
                                  Quote(r.rest())));
      }
      r.SkipBlanks();
      absl::StatusOr<std::string> value = LabelValue(r, *name);
      if (!value.ok()) return value.status();
      if (!labels.emplace(*name, *std::move(value)).second) {
        return Error(absl::StrCat("label ", *name, " given twice"));
      }
      r.SkipBlanks();
      if (r.Consume(',')) {
        r.SkipBlanks();
      } else if (r.peek() != '}') {
        return Error(absl::StrCat("expected ',' or '}' after label ", *name,
                                  "; found ", Quote(r.rest())));
      }
    }
    return labels;
  }

  // The TYPE'd family a sample name belongs to.
  absl::StatusOr<std::string> FamilyOf(const std::string& name) const {
    if (typed_.contains(name)) {
      if (scrape_.families.at(name).type == "histogram") {
        return Error(absl::StrCat(
            "sample ", Quote(name),
            " of histogram family: expected _bucket, _sum or _count"));
      }
      return name;
    }
    for (absl::string_view suffix : {"_bucket", "_sum", "_count"}) {
      if (!absl::EndsWith(name, suffix)) continue;
      const std::string base = name.substr(0, name.size() - suffix.size());
      if (!typed_.contains(base)) continue;
      const std::string& type = scrape_.families.at(base).type;
      if (type == "histogram" || (type == "summary" && suffix != "_bucket")) {
        return base;
      }
    }
    return Error(absl::StrCat("sample ", Quote(name),
                              " belongs to no family with a # TYPE line"));
  }

  absl::Status Sample(absl::string_view line) {
    LineReader r(line);
    r.SkipBlanks();
    PrometheusSample sample;
    std::optional<std::string> name = r.TakeName(/*colon=*/true);
    if (!name.has_value()) {
      return Error(absl::StrCat("expected a metric name; found ", Quote(line)));
    }
    sample.name = *std::move(name);
    if (r.Consume('{')) {
      absl::StatusOr<PrometheusLabels> labels = Labels(r);
      if (!labels.ok()) return labels.status();
      sample.labels = *std::move(labels);
    }
    if (!IsBlank(r.peek())) {
      return Error(absl::StrCat("expected a blank before the value of ",
                                Quote(sample.name), "; found ",
                                Quote(r.rest())));
    }
    r.SkipBlanks();
    const absl::string_view value = r.TakeToken();
    std::optional<double> v = ParseValue(value);
    if (!v.has_value()) {
      return Error(absl::StrCat("value of ", Quote(sample.name),
                                ": expected a float, +Inf, -Inf or NaN; found ",
                                Quote(value)));
    }
    sample.value = *v;
    r.SkipBlanks();
    if (!r.done()) {
      const absl::string_view ts = r.TakeToken();
      int64_t t = 0;
      const auto [end, ec] =
          std::from_chars(ts.data(), ts.data() + ts.size(), t);
      r.SkipBlanks();
      if (ec != std::errc() || end != ts.data() + ts.size() || !r.done()) {
        return Error(absl::StrCat("timestamp of ", Quote(sample.name),
                                  ": expected milliseconds (an integer); "
                                  "found ",
                                  Quote(absl::StrCat(ts, r.rest()))));
      }
      sample.timestamp_ms = t;
    }

    absl::StatusOr<std::string> family = FamilyOf(sample.name);
    if (!family.ok()) return family.status();
    sample.family = *std::move(family);
    if (sample.family != current_ && sampled_.contains(sample.family)) {
      return Error(absl::StrCat("sample of ", Quote(sample.family),
                                " after those of ", Quote(current_),
                                ": a family's lines must be together"));
    }
    current_ = sample.family;
    sampled_.insert(sample.family);
    if (!series_.emplace(sample.name, sample.labels).second) {
      return Error(absl::StrCat("series ", sample.name,
                                LabelsText(sample.labels), " given twice"));
    }
    const std::string& type = scrape_.families.at(sample.family).type;
    const bool non_negative =
        type == "counter" ||
        (type == "histogram" && sample.name != sample.family + "_sum");
    if (non_negative && !(sample.value >= 0)) {
      return Error(absl::StrCat(type, " ", sample.name,
                                LabelsText(sample.labels),
                                ": expected a value >= 0; found ", value));
    }
    if (type == "histogram" && sample.name == sample.family + "_bucket" &&
        !sample.labels.contains("le")) {
      return Error(absl::StrCat(sample.name, LabelsText(sample.labels),
                                ": a bucket needs an le label"));
    }
    scrape_.samples.push_back(std::move(sample));
    return absl::OkStatus();
  }

  absl::Status CheckHistograms() const {
    struct Series {
      std::vector<std::pair<double, double>> buckets;  // (le, value)
      std::optional<double> sum, count;
    };
    // By family, then by the labels other than le.
    std::map<std::pair<std::string, PrometheusLabels>, Series> all;
    for (const PrometheusSample& s : scrape_.samples) {
      if (scrape_.families.at(s.family).type != "histogram") continue;
      PrometheusLabels key = s.labels;
      key.erase("le");
      Series& series = all[{s.family, key}];
      if (s.name == s.family + "_sum") {
        series.sum = s.value;
      } else if (s.name == s.family + "_count") {
        series.count = s.value;
      } else {
        const std::optional<double> le = ParseValue(s.labels.at("le"));
        const std::string where = absl::StrCat(s.name, LabelsText(s.labels));
        if (!le.has_value() || std::isnan(*le)) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": le is not a float"));
        }
        if (!series.buckets.empty()) {
          const auto [prev_le, prev] = series.buckets.back();
          if (!(*le > prev_le)) {
            return absl::InvalidArgumentError(absl::StrCat(
                where,
                ": buckets must rise in le; this one follows le=", prev_le));
          }
          if (s.value < prev) {
            return absl::InvalidArgumentError(
                absl::StrCat(where, ": buckets must be cumulative; ", s.value,
                             " is below the previous bucket's ", prev));
          }
        }
        series.buckets.emplace_back(*le, s.value);
      }
    }
    for (const auto& [key, series] : all) {
      const std::string where =
          absl::StrCat("histogram ", key.first, LabelsText(key.second));
      if (series.buckets.empty() || !std::isinf(series.buckets.back().first)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": no le=\"+Inf\" bucket (the last one)"));
      }
      if (!series.sum.has_value() || !series.count.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": expected both _sum and _count"));
      }
      if (*series.count != series.buckets.back().second) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": _count is ", *series.count, " but the +Inf bucket is ",
            series.buckets.back().second));
      }
    }
    return absl::OkStatus();
  }

  PrometheusScrape scrape_;
  size_t line_ = 0;
  std::set<std::string> typed_;    // families with a TYPE line
  std::set<std::string> sampled_;  // families with samples seen
  std::string current_;            // the family of the last sample
  std::set<std::pair<std::string, PrometheusLabels>> series_;
};

}  // namespace

std::optional<double> PrometheusScrape::Value(
    const std::string& name, const PrometheusLabels& labels) const {
  for (const PrometheusSample& s : samples) {
    if (s.name == name && s.labels == labels) return s.value;
  }
  return std::nullopt;
}

double PrometheusScrape::Sum(const std::string& name,
                             const PrometheusLabels& subset) const {
  double total = 0;
  for (const PrometheusSample& s : samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : subset) {
      auto it = s.labels.find(k);
      match = match && it != s.labels.end() && it->second == v;
    }
    if (match) total += s.value;
  }
  return total;
}

absl::StatusOr<PrometheusScrape> ParsePrometheusText(absl::string_view text) {
  return Parser().Parse(text);
}

}  // namespace tensormorph::testing
