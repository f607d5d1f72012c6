#include "core/diff/gate.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tensormorph {
namespace {

constexpr const char* kMetrics[] = {"max_err_steps",  "p99_err_steps",
                                    "p999_err_steps", "above_half_step",
                                    "clipped",        "not_nearest",
                                    "zeroed_groups",  "max_excess_steps",
                                    "bound_steps",    "sqnr_db",
                                    "cosine",         "mse",
                                    "rmse",           "mean_abs_err",
                                    "max_abs_err",    "rel_fro_err",
                                    "induced_zeros",  "induced_zero_fraction"};

struct OpSpelling {
  const char* text;
  DiffGate::Op op;
};
// Two-character operators first, so ">=" is not read as ">" then "=...".
constexpr OpSpelling kOps[] = {
    {">=", DiffGate::Op::kGreaterEqual}, {"<=", DiffGate::Op::kLessEqual},
    {"==", DiffGate::Op::kEqual},        {"!=", DiffGate::Op::kNotEqual},
    {">", DiffGate::Op::kGreater},       {"<", DiffGate::Op::kLess}};

bool IsMetricChar(char c) {
  return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '_';
}

std::string NumberText(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return absl::StrFormat("%.6g", v);
}

absl::Status Bad(absl::string_view text, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "gate '", text, "' ", what, "; metrics: ", DiffGateMetrics()));
}

}  // namespace

const std::string& DiffGateMetrics() {
  static const std::string* const kText =
      new std::string(absl::StrJoin(kMetrics, ", "));
  return *kText;
}

absl::StatusOr<DiffGate> ParseDiffGate(absl::string_view text) {
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  size_t n = 0;
  while (n < rest.size() && IsMetricChar(rest[n])) ++n;
  const absl::string_view metric = rest.substr(0, n);
  rest = absl::StripLeadingAsciiWhitespace(rest.substr(n));
  const OpSpelling* op = nullptr;
  for (const OpSpelling& o : kOps) {
    if (absl::StartsWith(rest, o.text)) {
      op = &o;
      break;
    }
  }
  const absl::string_view number =
      op == nullptr ? absl::string_view()
                    : absl::StripLeadingAsciiWhitespace(
                          rest.substr(absl::string_view(op->text).size()));
  if (metric.empty() || op == nullptr || number.empty()) {
    return Bad(text, "is not METRIC OP NUMBER (e.g. max_err_steps>0.51)");
  }
  DiffGate gate;
  gate.text = std::string(text);
  gate.metric = std::string(metric);
  gate.op = op->op;
  if (!DiffMetric(TensorDiff(), gate.metric).has_value()) {
    return Bad(text, absl::StrCat("names an unknown metric '", metric, "'"));
  }
  if (!absl::SimpleAtod(number, &gate.threshold)) {
    return Bad(text, absl::StrCat("has '", number, "', not a number"));
  }
  if (std::isnan(gate.threshold)) {
    return Bad(text, "compares with NaN, which nothing equals or orders");
  }
  return gate;
}

double InducedZeroFraction(const TensorDiff& d) {
  const int64_t nonzero = d.count - d.source_zeros;
  return nonzero > 0 ? static_cast<double>(d.induced_zeros) / nonzero : 0;
}

std::optional<double> DiffMetric(const TensorDiff& d, absl::string_view m) {
  if (m == "max_err_steps") return d.max_err_steps;
  if (m == "p99_err_steps") return d.p99_err_steps;
  if (m == "p999_err_steps") return d.p999_err_steps;
  if (m == "above_half_step") return static_cast<double>(d.above_half_step);
  if (m == "clipped") return static_cast<double>(d.clipped);
  if (m == "not_nearest") return static_cast<double>(d.not_nearest);
  if (m == "zeroed_groups") return static_cast<double>(d.zeroed_groups);
  if (m == "max_excess_steps") return d.max_excess_steps;
  if (m == "bound_steps") return d.bound_steps;
  if (m == "sqnr_db") return d.sqnr_db;
  if (m == "cosine") return d.cosine;
  if (m == "mse") return d.mse;
  if (m == "rmse") return d.rmse;
  if (m == "mean_abs_err") return d.mean_abs_err;
  if (m == "max_abs_err") return d.max_abs_err;
  if (m == "rel_fro_err") return d.rel_fro_err;
  if (m == "induced_zeros") return static_cast<double>(d.induced_zeros);
  if (m == "induced_zero_fraction") return InducedZeroFraction(d);
  return std::nullopt;
}

bool Trips(const DiffGate& gate, DiffMetricLookup metric) {
  const double v = metric(gate.metric).value_or(0);
  switch (gate.op) {
    case DiffGate::Op::kGreater:
      return v > gate.threshold;
    case DiffGate::Op::kGreaterEqual:
      return v >= gate.threshold;
    case DiffGate::Op::kLess:
      return v < gate.threshold;
    case DiffGate::Op::kLessEqual:
      return v <= gate.threshold;
    case DiffGate::Op::kEqual:
      return v == gate.threshold;
    case DiffGate::Op::kNotEqual:
      return v != gate.threshold;
  }
  return false;
}

bool Trips(const DiffGate& gate, const TensorDiff& d) {
  return Trips(gate, [&](absl::string_view m) { return DiffMetric(d, m); });
}

std::vector<std::string> TrippedReasons(absl::Span<const DiffGate> gates,
                                        DiffMetricLookup metric) {
  std::vector<std::string> reasons;
  for (const DiffGate& g : gates) {
    if (!Trips(g, metric)) continue;
    reasons.push_back(absl::StrCat(g.metric, " = ",
                                   NumberText(metric(g.metric).value_or(0)),
                                   " (", g.text, ")"));
  }
  return reasons;
}

std::vector<std::string> TrippedReasons(absl::Span<const DiffGate> gates,
                                        const TensorDiff& d) {
  return TrippedReasons(gates,
                        [&](absl::string_view m) { return DiffMetric(d, m); });
}

}  // namespace tensormorph
