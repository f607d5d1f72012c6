#include "client/cli/fail_on.h"

#include <regex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tensormorph {
namespace {

constexpr const char* kMetrics[] = {"max_err_steps",  "p99_err_steps",
                                    "p999_err_steps", "above_half_step",
                                    "clipped",        "sqnr_db",
                                    "cosine",         "mse",
                                    "rmse",           "mean_abs_err",
                                    "max_abs_err",    "rel_fro_err",
                                    "induced_zeros",  "induced_zero_fraction"};

}  // namespace

std::optional<double> MetricOf(const v1::TensorDiffReport& r,
                               const std::string& m) {
  if (m == "max_err_steps") return r.max_err_steps();
  if (m == "p99_err_steps") return r.p99_err_steps();
  if (m == "p999_err_steps") return r.p999_err_steps();
  if (m == "above_half_step") return static_cast<double>(r.above_half_step());
  if (m == "clipped") return static_cast<double>(r.clipped());
  if (m == "sqnr_db") return r.sqnr_db();
  if (m == "cosine") return r.cosine();
  if (m == "mse") return r.mse();
  if (m == "rmse") return r.rmse();
  if (m == "mean_abs_err") return r.mean_abs_err();
  if (m == "max_abs_err") return r.max_abs_err();
  if (m == "rel_fro_err") return r.rel_fro_err();
  if (m == "induced_zeros") return static_cast<double>(r.induced_zeros());
  if (m == "induced_zero_fraction") return r.induced_zero_fraction();
  return std::nullopt;
}

absl::StatusOr<FailOn> ParseFailOn(const std::string& text) {
  static const std::regex kExpr(
      R"(\s*([a-z_0-9]+)\s*(>=|<=|==|!=|>|<)\s*([-+0-9.eE]+|inf)\s*)");
  std::smatch m;
  std::string metrics;
  for (const char* k : kMetrics)
    absl::StrAppend(&metrics, metrics.empty() ? "" : ", ", k);
  if (!std::regex_match(text, m, kExpr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--fail-on '", text,
        "' is not METRIC OP NUMBER (e.g. max_err_steps>0.51); metrics: ",
        metrics));
  }
  FailOn f{text, m[1], m[2], 0};
  if (!MetricOf(v1::TensorDiffReport(), f.metric).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--fail-on: unknown metric '", f.metric, "'; metrics: ", metrics));
  }
  if (!absl::SimpleAtod(m[3].str(), &f.threshold)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--fail-on: '", m[3].str(), "' is not a number"));
  }
  return f;
}

bool Trips(const FailOn& f, const v1::TensorDiffReport& report) {
  const double v = *MetricOf(report, f.metric);
  if (f.op == ">") return v > f.threshold;
  if (f.op == ">=") return v >= f.threshold;
  if (f.op == "<") return v < f.threshold;
  if (f.op == "<=") return v <= f.threshold;
  if (f.op == "==") return v == f.threshold;
  return v != f.threshold;
}

}  // namespace tensormorph
