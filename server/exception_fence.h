// The exception fence: no exception leaves a handler, reactor or worker
// task. Core returns statuses and parses untrusted input without throwing;
// this is the defence in depth behind that, so that a bug (or an allocation
// failure) ends one call with INTERNAL instead of terminating the server and
// every other user's calls with it.
#ifndef TENSORMORPH_SERVER_EXCEPTION_FENCE_H_
#define TENSORMORPH_SERVER_EXCEPTION_FENCE_H_

#include <exception>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tensormorph {

// Where fenced work runs: named in the status and the log line. The views
// must outlive the Fenced call.
struct FenceSite {
  FenceSite(absl::string_view call, absl::string_view checkpoint = {},
            absl::string_view tensor = {})
      : call(call), checkpoint(checkpoint), tensor(tensor) {}
  absl::string_view call;        // "GetCheckpoint", "Checkpoint::Open"
  absl::string_view checkpoint;  // empty when not known
  absl::string_view tensor;      // empty when not known
};

namespace fence_internal {

// INTERNAL naming the site and the exception being handled (its type and
// what()); logged at error level with the site. Call only inside a catch.
absl::Status CurrentExceptionStatus(const FenceSite& site);

template <typename R>
using Result = std::conditional_t<std::is_void_v<R>, absl::Status, R>;

}  // namespace fence_internal

// Runs f() and returns what it returns; an exception that leaves f becomes
// INTERNAL (logged). f returns absl::Status, absl::StatusOr<T>, or void
// (then OK when it returns).
// Thread safety: as f's.
template <typename F>
fence_internal::Result<std::invoke_result_t<F&>> Fenced(const FenceSite& site,
                                                        F&& f) {
  using R = std::invoke_result_t<F&>;
  try {
    if constexpr (std::is_void_v<R>) {
      f();
      return absl::OkStatus();
    } else {
      return f();
    }
  } catch (...) {
    return fence_internal::CurrentExceptionStatus(site);
  }
}

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_EXCEPTION_FENCE_H_
