#include "core/io/demand_paging.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/io/fault_guard.h"
#include "core/io/remote_mirror.h"

namespace tensormorph {
namespace {

// Read by the signal handler without locks: a slot is published by storing
// `end` last and retired by clearing `end` first.
struct Slot {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<const RemoteMirror*> mirror{nullptr};
};
Slot g_slots[kMaxMirrors];
std::atomic<int> g_slots_used{0};  // slots [0, used) may be live
std::mutex g_register_mu;          // writers of slots

// One fault waiting for its block. Lives in the faulting thread's TLS, which
// is constant-initialized (no TLS constructor runs in the handler).
struct Request {
  const RemoteMirror* mirror;
  uint64_t offset;
  std::atomic<uint32_t> state;  // 0 waiting, 1 fetched, 2 failed
  absl::Status* failure;        // state 2: the fetch's status (owned)
  Request* next;
};
__attribute__((tls_model("initial-exec"))) thread_local Request t_request;

std::atomic<Request*> g_pending{nullptr};  // pushed by handlers
int g_wake_fd = -1;                        // an eventfd the handler writes
struct sigaction g_previous;               // SIGSEGV's action before ours

void Futex(std::atomic<uint32_t>* word, int op, uint32_t value) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, nullptr,
          nullptr, 0);
}

void Complete(Request* r, absl::Status s) {
  if (!s.ok()) r->failure = new absl::Status(std::move(s));
  r->state.store(s.ok() ? 1 : 2, std::memory_order_release);
  Futex(&r->state, FUTEX_WAKE_PRIVATE, 1);
}

// Fetches run on a few threads: a fetch waits on the network, and faults of
// several readers (or of blocks of several objects) go out at once.
class Fetchers {
 public:
  static constexpr int kThreads = 8;
  void Start() {
    for (int i = 0; i < kThreads; ++i) std::thread([this] { Work(); }).detach();
    std::thread([this] { Dispatch(); }).detach();
  }

 private:
  void Dispatch() {
    for (;;) {
      uint64_t n;
      if (read(g_wake_fd, &n, sizeof n) != sizeof n && errno != EINTR) {
        continue;
      }
      Request* r = g_pending.exchange(nullptr, std::memory_order_acquire);
      std::lock_guard<std::mutex> l(mu_);
      for (; r != nullptr; r = r->next) queue_.push_back(r);
      ready_.notify_all();
    }
  }
  void Work() {
    for (;;) {
      Request* r;
      {
        std::unique_lock<std::mutex> l(mu_);
        ready_.wait(l, [&] { return !queue_.empty(); });
        r = queue_.front();
        queue_.pop_front();
      }
      Complete(r, r->mirror->OnFault(r->offset));
    }
  }
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<Request*> queue_;
};

void WriteStderr(const char* text) {
  ssize_t ignored = write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

// Not a mirror's page: do what would have happened without us.
void Chain(int sig, siginfo_t* info, void* context) {
  if (g_previous.sa_flags & SA_SIGINFO) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler == SIG_DFL || g_previous.sa_handler == SIG_IGN) {
    // Returning re-runs the faulting access, which now takes the default
    // action: the process ends as it would have.
    signal(sig, SIG_DFL);
    return;
  }
  g_previous.sa_handler(sig);
}

void OnSegv(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  const RemoteMirror* mirror = nullptr;
  uintptr_t begin = 0;
  if (info->si_code == SEGV_ACCERR) {
    const int used = g_slots_used.load(std::memory_order_acquire);
    for (int i = 0; i < used && mirror == nullptr; ++i) {
      const uintptr_t end = g_slots[i].end.load(std::memory_order_acquire);
      begin = g_slots[i].begin.load(std::memory_order_relaxed);
      if (address >= begin && address < end) {
        mirror = g_slots[i].mirror.load(std::memory_order_relaxed);
      }
    }
  }
  if (mirror == nullptr) {
    Chain(sig, info, context);
    errno = saved_errno;
    return;
  }
  Request* r = &t_request;
  r->mirror = mirror;
  r->offset = address - begin;
  r->failure = nullptr;
  r->state.store(0, std::memory_order_relaxed);
  r->next = g_pending.load(std::memory_order_relaxed);
  while (
      !g_pending.compare_exchange_weak(r->next, r, std::memory_order_release)) {
  }
  const uint64_t one = 1;
  ssize_t ignored = write(g_wake_fd, &one, sizeof one);
  (void)ignored;
  while (r->state.load(std::memory_order_acquire) == 0) {
    Futex(&r->state, FUTEX_WAIT_PRIVATE, 0);
  }
  if (r->state.load(std::memory_order_acquire) == 2) {
    EndGuardedRead(r->failure);  // returns only outside any GuardedRead
    WriteStderr(
        "tensormorph: a remote object's bytes could not be fetched for a read "
        "outside GuardedRead; aborting\n");
    abort();
  }
  errno = saved_errno;
}

void StartOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_wake_fd = eventfd(0, EFD_CLOEXEC);
    if (g_wake_fd < 0) {
      WriteStderr("tensormorph: eventfd failed; remote reads cannot work\n");
      abort();
    }
    (new Fetchers())->Start();  // lives as long as the process
    struct sigaction sa = {};
    sa.sa_sigaction = OnSegv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_previous);
  });
}

}  // namespace

absl::StatusOr<int> RegisterMirror(const RemoteMirror* mirror,
                                   const uint8_t* begin, uint64_t length) {
  StartOnce();
  std::lock_guard<std::mutex> l(g_register_mu);
  const int used = g_slots_used.load(std::memory_order_relaxed);
  int slot = -1;
  for (int i = 0; i < used && slot < 0; ++i) {
    if (g_slots[i].end.load(std::memory_order_relaxed) == 0) slot = i;
  }
  if (slot < 0) {
    if (used == kMaxMirrors) {
      return absl::ResourceExhaustedError(
          absl::StrCat("more than ", kMaxMirrors,
                       " remote files are open at once; close a checkpoint"));
    }
    slot = used;
  }
  Slot& s = g_slots[slot];
  s.mirror.store(mirror, std::memory_order_relaxed);
  s.begin.store(reinterpret_cast<uintptr_t>(begin), std::memory_order_relaxed);
  s.end.store(reinterpret_cast<uintptr_t>(begin) + length,
              std::memory_order_release);
  if (slot == used) g_slots_used.store(used + 1, std::memory_order_release);
  return slot;
}

void UnregisterMirror(int slot) {
  std::lock_guard<std::mutex> l(g_register_mu);
  g_slots[slot].end.store(0, std::memory_order_release);
}

}  // namespace tensormorph
