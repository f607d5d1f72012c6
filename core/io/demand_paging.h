// Demand paging for remote mirrors (remote_mirror.h), in user space: a read
// of a mirror's page that is not fetched yet raises SIGSEGV; the handler
// hands the fault to a fetching thread, waits for the block to be made
// readable, and returns, so the read runs again and succeeds. The reader
// never knows. (userfaultfd would do the same in the kernel, but it is
// refused to unprivileged processes and by container runtimes' default
// seccomp profiles, where servers of this kind run.)
//
// When the fetch fails (the object was replaced: ABORTED; the storage is
// unreachable after retries: UNAVAILABLE...), a read under GuardedRead
// (fault_guard.h) ends with that status. A read outside any GuardedRead
// cannot be resumed and aborts the process with a message naming the
// object: every read of checkpoint bytes is guarded by design.
//
// A SIGSEGV at any other address keeps its previous action (a crash, or a
// sanitizer's report).
#ifndef TENSORMORPH_CORE_IO_DEMAND_PAGING_H_
#define TENSORMORPH_CORE_IO_DEMAND_PAGING_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace tensormorph {

class RemoteMirror;

// The most mirrors registered at once (one per remote file open).
inline constexpr int kMaxMirrors = 16384;

// Faults in [begin, begin + length) go to mirror->OnFault(offset). Installs
// the handler and starts the fetching threads on first use.
// Errors: RESOURCE_EXHAUSTED when kMaxMirrors are registered.
absl::StatusOr<int> RegisterMirror(const RemoteMirror* mirror,
                                   const uint8_t* begin, uint64_t length);
// REQUIRES: no read of the range is running or will run.
void UnregisterMirror(int slot);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_DEMAND_PAGING_H_
