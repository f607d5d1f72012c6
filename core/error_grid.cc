#include "core/error_grid.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/error_runs.h"
#include "core/error_steps.h"
#include "core/io/fault_guard.h"
#include "core/quant/decode_simd.h"
#include "core/util/status_macros.h"

namespace tensormorph {
namespace {

// Elements decoded at once: a quarter of a million, so that the decoded
// values, the source and the steps of a batch stay in the CPU's caches.
constexpr int64_t kBatchElements = int64_t{1} << 18;

}  // namespace

int64_t ErrorGridBytes(const LogicalTensor& t) {
  auto view = ViewOf(t, {});
  if (!view.ok()) return 0;
  const int64_t n = view->rows * view->cols;  // <= num_elements
  const int64_t each = t.encoding->PlainFloatSteps() != nullptr ? 4 : 8;
  return n > std::numeric_limits<int64_t>::max() / each
             ? std::numeric_limits<int64_t>::max()
             : n * each;
}

absl::StatusOr<ErrorGrid> ComputeErrorGrid(const LogicalTensor& t,
                                           const LogicalTensor& ref,
                                           const ErrorGridOptions& o) {
  TM_RETURN_IF_ERROR(CheckReference(t, &ref, o.ref_rows));
  ErrorGrid g;
  TM_ASSIGN_OR_RETURN(g.view, ViewOf(t, o.leading));
  if (t.num_elements == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t.name, "' is empty: it has no errors"));
  }
  const int64_t cols = g.view.cols;
  // Elements of a batch whose error is not a float32, and those errors:
  // reserved whole, so that nothing allocates under GuardedRead (a fault
  // unwinds it without destructors), and put in `others` after it.
  std::vector<int64_t> inexact;
  std::vector<double> inexact_errors;
  const FloatStepTable* const float_steps = t.encoding->PlainFloatSteps();
  // Not zero-filled: every element is written below.
  if (float_steps != nullptr) {
    g.f32.reset(new float[static_cast<size_t>(g.size())]);
  } else {
    g.f64.reset(new double[static_cast<size_t>(g.size())]);
  }
  std::optional<PlainFloatErrors> plain;
  if (float_steps != nullptr) plain.emplace(*float_steps, ActiveDecodeSimd());
  // A float32 source without a row map is read where it is mapped (the
  // pass then runs under GuardedRead, as a decode would), not copied.
  const float* const in_place =
      o.ref_rows.empty() ? ref.encoding->StoredF32() : nullptr;
  const int64_t batch_rows = std::max<int64_t>(1, kBatchElements / cols);
  const size_t buf =
      static_cast<size_t>(std::min(batch_rows, g.view.rows) * cols);
  std::vector<float> v(float_steps != nullptr ? buf : 0);
  std::vector<ElementQuant> q(float_steps != nullptr ? 0 : buf);
  std::vector<float> x(in_place != nullptr ? 0 : buf);
  inexact.reserve(buf);
  inexact_errors.reserve(buf);
  for (int64_t r = 0; r < g.view.rows; r += batch_rows) {
    if (o.cancelled && o.cancelled()) {
      return absl::CancelledError(absl::StrCat("error grid of '", t.name,
                                               "' cancelled at row ", r, " of ",
                                               g.view.rows));
    }
    const int64_t count = std::min(batch_rows, g.view.rows - r) * cols;
    const int64_t first = g.view.base + r * cols;
    const int64_t at = r * cols;
    inexact.clear();
    inexact_errors.clear();
    TM_RETURN_IF_ERROR(GuardedRead([&]() -> absl::Status {
      const float* xs = in_place != nullptr ? in_place + first : x.data();
      if (in_place == nullptr) {
        TM_RETURN_IF_ERROR(
            DecodeMappedRows(ref, o.ref_rows, first, count, x.data()));
      }
      if (float_steps != nullptr) {
        TM_RETURN_IF_ERROR(t.encoding->Decode(first, count, v.data()));
        plain->Store(xs, v.data(), count, g.f32.get() + at, &inexact);
        for (const int64_t k : inexact) {
          inexact_errors.push_back(
              PlainFloatErrorSteps(xs[k], v[k], *float_steps));
        }
        return absl::OkStatus();
      }
      TM_RETURN_IF_ERROR(t.encoding->DecodeDetailed(first, count, q.data()));
      double* const out = g.f64.get() + at;
      for (int64_t k = 0; k < count; ++k) {
        out[k] = ElementErrorSteps(xs[k], q[k].value, q[k].step_below,
                                   q[k].step_above);
      }
      return absl::OkStatus();
    }));
    for (size_t i = 0; i < inexact.size(); ++i)
      g.others[at + inexact[i]] = inexact_errors[i];
  }
  return g;
}

}  // namespace tensormorph
