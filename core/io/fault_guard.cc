#include "core/io/fault_guard.h"

#include <setjmp.h>
#include <signal.h>

#include <mutex>
#include <utility>

#include "core/util/error_reason.h"

namespace tensormorph {
namespace {

thread_local sigjmp_buf* g_guard = nullptr;
// EndGuardedRead's status, taken by the GuardedRead it ends.
thread_local absl::Status* g_failure = nullptr;

void OnSigbus(int sig, siginfo_t*, void*) {
  if (g_guard != nullptr) siglongjmp(*g_guard, 1);
  // Not inside a guarded read: the default action (terminate with a core).
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void InstallMappedFileFaultHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa = {};
    sa.sa_sigaction = OnSigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, nullptr);
  });
}

absl::Status GuardedRead(const std::function<absl::Status()>& read) {
  sigjmp_buf jump;
  sigjmp_buf* const outer = g_guard;
  if (const int how = sigsetjmp(jump, 1); how != 0) {
    g_guard = outer;
    if (how == 2) {
      absl::Status failure = std::move(*g_failure);
      delete g_failure;
      g_failure = nullptr;
      return failure;
    }
    // Which file is not known here (the mapping's owner names it).
    return WithReason(absl::FailedPreconditionError(
                          "a checkpoint file shrank or was replaced while "
                          "being read (SIGBUS on its mapping); "
                          "the next call reopens it"),
                      ErrorReason::kFileChanged);
  }
  g_guard = &jump;
  absl::Status s = read();
  g_guard = outer;
  return s;
}

void EndGuardedRead(absl::Status* failure) {
  if (g_guard == nullptr) return;  // the caller aborts: nothing to free
  g_failure = failure;
  siglongjmp(*g_guard, 2);
}

}  // namespace tensormorph
