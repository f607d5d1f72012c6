// Every call the server ended, by method and final status, and how long each
// took: what /metrics reports as tensormorph_calls_total and
// tensormorph_call_duration_seconds (server/prometheus.h). The call metrics
// interceptor (server/call_metrics_interceptor.h) records into it.
#ifndef TENSORMORPH_SERVER_CALL_STATS_H_
#define TENSORMORPH_SERVER_CALL_STATS_H_

#include <grpcpp/support/status.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tensormorph {

// Thread safety: all methods are thread-safe. Recording a call takes no lock
// (relaxed atomics of its method's entry); only the first call of a method
// name takes the registry's lock, to add its entry.
class CallStats {
 public:
  // Upper bounds (seconds) of the duration histogram's buckets, from a
  // cached unary call (~100 us) to a long stream (60 s); past the last one a
  // call lands in the +Inf bucket.
  static constexpr std::array<double, 18> kDurationBounds = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
      0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
  // grpc::StatusCode runs 0 (OK) to 16 (UNAUTHENTICATED).
  static constexpr int kNumCodes = 17;
  // Distinct method names kept apart. A client may call any name (gRPC
  // answers an unknown one UNIMPLEMENTED, through the interceptors too), so
  // names past this bound, and names that are not proto identifiers, are
  // counted together under kOtherMethod: the series stay few and their label
  // values printable.
  static constexpr size_t kMaxMethods = 64;
  static constexpr absl::string_view kOtherMethod = "(other)";

  // One method's counts. Stable address for the life of the CallStats.
  class Method {
   public:
    explicit Method(std::string name) : name_(std::move(name)) {}
    const std::string& name() const { return name_; }
    // Counts one call that ended with `code` after `elapsed` (a code outside
    // 0..16 counts as UNKNOWN, a negative duration as zero).
    void Record(grpc::StatusCode code, absl::Duration elapsed);

   private:
    friend class CallStats;
    const std::string name_;
    std::array<std::atomic<int64_t>, kNumCodes> calls_{};
    // Not cumulative: buckets_[i] counts calls in (bound[i-1], bound[i]];
    // the last one those past every bound.
    std::array<std::atomic<int64_t>, kDurationBounds.size() + 1> buckets_{};
    std::atomic<int64_t> sum_nanos_{0};
  };

  // What one method has counted, read at one time (each number is read
  // atomically, not all of them together: a call ending during the read may
  // be in one and not yet in another).
  struct MethodSnapshot {
    std::string method;
    std::array<int64_t, kNumCodes> calls{};  // by grpc::StatusCode
    // Cumulative: bucket i counts calls of at most kDurationBounds[i]; the
    // last one (+Inf) counts them all and is the histogram's count.
    std::array<int64_t, kDurationBounds.size() + 1> cumulative_buckets{};
    double sum_seconds = 0;
  };

  CallStats() = default;
  CallStats(const CallStats&) = delete;
  CallStats& operator=(const CallStats&) = delete;

  // The entry of `method` (a short method name: "ReadSlice"), added on its
  // first use; kOtherMethod's when `method` is not an identifier
  // ([A-Za-z_][A-Za-z0-9_]*, at most 128 characters) or kMaxMethods names
  // are already kept. Never null; valid as long as this CallStats.
  // Cost: a scan of the names kept, without a lock once the name is known.
  Method* ForMethod(absl::string_view method);

  // Every method called at least once, by name.
  std::vector<MethodSnapshot> Snapshot() const;

  // The status code's name as gRPC spells it ("NOT_FOUND"); "UNKNOWN" for a
  // value outside 0..16.
  static absl::string_view CodeName(int code);

 private:
  Method* Find(absl::string_view name) const;

  // Append-only: entries_[0, size_) are set and never change, so readers
  // need no lock (size_ is stored with release after the entry).
  std::array<std::atomic<Method*>, kMaxMethods + 1> entries_{};
  std::atomic<size_t> size_{0};
  absl::Mutex add_mu_;  // serializes additions
  std::vector<std::unique_ptr<Method>> owned_ ABSL_GUARDED_BY(add_mu_);
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_CALL_STATS_H_
