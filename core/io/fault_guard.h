// Turns a SIGBUS raised while reading a memory-mapped file (the file was
// truncated or replaced under the mapping) into a status instead of a crash.
#ifndef TENSORMORPH_CORE_IO_FAULT_GUARD_H_
#define TENSORMORPH_CORE_IO_FAULT_GUARD_H_

#include <functional>

#include "absl/status/status.h"

namespace tensormorph {

// Installs the process-wide SIGBUS handler (idempotent). Faults outside a
// guarded read keep their default action.
void InstallMappedFileFaultHandler();

// Runs `read`, which may touch mapped file memory. When it faults, returns
// FAILED_PRECONDITION instead of `read`'s status.
// REQUIRES: `read` holds no resources that need destructors across the
// faulting access (a fault unwinds with siglongjmp): pass preallocated
// buffers in, keep it to the decode call itself.
// Reads of a remote mirror's bytes (remote_mirror.h) fetch them as they
// fault; when a fetch fails, the read ends with the fetch's status instead
// (ABORTED: the object was replaced; UNAVAILABLE, PERMISSION_DENIED...).
absl::Status GuardedRead(const std::function<absl::Status()>& read);

// demand_paging.cc: ends the GuardedRead running on this thread with
// `*failure` (taking ownership). Returns only when this thread runs no
// GuardedRead (the caller then aborts).
void EndGuardedRead(absl::Status* failure);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_FAULT_GUARD_H_
