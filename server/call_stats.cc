#include "server/call_stats.h"

#include <algorithm>

#include "absl/strings/ascii.h"

namespace tensormorph {
namespace {

constexpr size_t kMaxMethodNameLength = 128;

// What protoc accepts as a method name.
bool IsIdentifier(absl::string_view s) {
  if (s.empty() || s.size() > kMaxMethodNameLength) return false;
  if (absl::ascii_isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

}  // namespace

void CallStats::Method::Record(grpc::StatusCode code, absl::Duration elapsed) {
  int c = static_cast<int>(code);
  if (c < 0 || c >= kNumCodes) c = grpc::StatusCode::UNKNOWN;
  if (elapsed < absl::ZeroDuration()) elapsed = absl::ZeroDuration();
  const double seconds = absl::ToDoubleSeconds(elapsed);
  // The first bucket whose bound is >= seconds (Prometheus buckets are
  // "less than or equal"); past them all, the +Inf one.
  const size_t bucket = std::lower_bound(kDurationBounds.begin(),
                                         kDurationBounds.end(), seconds) -
                        kDurationBounds.begin();
  calls_[c].fetch_add(1, std::memory_order_relaxed);
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  // int64 nanoseconds hold ~292 years of summed call time.
  sum_nanos_.fetch_add(absl::ToInt64Nanoseconds(elapsed),
                       std::memory_order_relaxed);
}

CallStats::Method* CallStats::Find(absl::string_view name) const {
  const size_t n = size_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) {
    Method* m = entries_[i].load(std::memory_order_relaxed);
    if (m->name() == name) return m;
  }
  return nullptr;
}

CallStats::Method* CallStats::ForMethod(absl::string_view method) {
  absl::string_view key = IsIdentifier(method) ? method : kOtherMethod;
  if (Method* m = Find(key)) return m;
  absl::MutexLock lock(&add_mu_);
  if (Method* m = Find(key)) return m;
  // One slot past kMaxMethods is kept for kOtherMethod.
  const bool other_kept = Find(kOtherMethod) != nullptr;
  if (key != kOtherMethod && owned_.size() - other_kept >= kMaxMethods) {
    key = kOtherMethod;
    if (other_kept) return Find(kOtherMethod);
  }
  owned_.push_back(std::make_unique<Method>(std::string(key)));
  Method* added = owned_.back().get();
  const size_t n = size_.load(std::memory_order_relaxed);
  entries_[n].store(added, std::memory_order_relaxed);
  size_.store(n + 1, std::memory_order_release);
  return added;
}

std::vector<CallStats::MethodSnapshot> CallStats::Snapshot() const {
  std::vector<MethodSnapshot> out;
  const size_t n = size_.load(std::memory_order_acquire);
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const Method& m = *entries_[i].load(std::memory_order_relaxed);
    MethodSnapshot s;
    s.method = m.name();
    for (int c = 0; c < kNumCodes; ++c) {
      s.calls[c] = m.calls_[c].load(std::memory_order_relaxed);
    }
    int64_t cumulative = 0;
    for (size_t b = 0; b < m.buckets_.size(); ++b) {
      cumulative += m.buckets_[b].load(std::memory_order_relaxed);
      s.cumulative_buckets[b] = cumulative;
    }
    s.sum_seconds =
        static_cast<double>(m.sum_nanos_.load(std::memory_order_relaxed)) *
        1e-9;
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(),
            [](const MethodSnapshot& a, const MethodSnapshot& b) {
              return a.method < b.method;
            });
  return out;
}

absl::string_view CallStats::CodeName(int code) {
  static constexpr std::array<absl::string_view, kNumCodes> kNames = {
      "OK",
      "CANCELLED",
      "UNKNOWN",
      "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED",
      "NOT_FOUND",
      "ALREADY_EXISTS",
      "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION",
      "ABORTED",
      "OUT_OF_RANGE",
      "UNIMPLEMENTED",
      "INTERNAL",
      "UNAVAILABLE",
      "DATA_LOSS",
      "UNAUTHENTICATED",
  };
  if (code < 0 || code >= kNumCodes) return "UNKNOWN";
  return kNames[code];
}

}  // namespace tensormorph
