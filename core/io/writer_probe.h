// Whether another process holds a file open for writing now.
#ifndef TENSORMORPH_CORE_IO_WRITER_PROBE_H_
#define TENSORMORPH_CORE_IO_WRITER_PROBE_H_

#include <string>

#include "absl/status/status.h"
#include "core/io/file_access.h"

namespace tensormorph {

// Why a reader needs this beside the file's identity (mapped_file.h): the
// kernel stamps a write's ctime when the write begins, before it copies the
// bytes. An identity taken during that copy already has the new ctime, so
// a read then sees bytes still arriving while the identity after it is
// unchanged. A writer in the middle of a write holds the file open for
// writing; so a reader that takes the identity, then finds no writer, then
// reads, and compares the identity after, has seen one version of the file:
// a write that began before the identity was taken had finished by the
// probe, and one that began after it changed the ctime.
//
// The probe takes a read lease on `path` (opened through `access`) and
// drops it at once: the kernel grants one only while no process holds the
// file open for writing (or mapped shared and writable). The lease-break
// signal is set to SIGURG, whose default action is to ignore it, so a writer
// opening in the microseconds the lease is held delays its open by those
// microseconds and sends nothing that could end this process.
//
// Errors: ABORTED FILE_CHANGED_DURING_READ {file} naming the file when a
// writer holds it open. OK when no
// writer does, and also where the kernel gives no lease to this process (it
// neither owns the file nor has CAP_LEASE, or leases are disabled): the
// identity check alone then stands, and `*probed` (when given) says false.
absl::Status CheckNoWriters(const FileAccess& access, const std::string& path,
                            bool* probed = nullptr);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_WRITER_PROBE_H_
