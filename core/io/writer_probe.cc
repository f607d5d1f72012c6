#include "core/io/writer_probe.h"

#include <fcntl.h>
#include <signal.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "core/util/error_reason.h"

namespace tensormorph {

absl::Status CheckNoWriters(const FileAccess& access, const std::string& path,
                            bool* probed) {
  if (probed != nullptr) *probed = false;
  // A lease needs a descriptor opened read-only (not O_PATH).
  absl::StatusOr<UniqueFd> fd = access.Open(path, O_RDONLY | O_NONBLOCK);
  if (!fd.ok()) return fd.status();
  if (::fcntl(fd->get(), F_SETSIG, SIGURG) != 0) return absl::OkStatus();
  if (::fcntl(fd->get(), F_SETLEASE, F_RDLCK) != 0) {
    if (errno == EAGAIN) {
      return WithReason(
          absl::AbortedError(absl::StrCat(
              "file '", path,
              "' is open for writing by another process: its bytes may be "
              "changing under the read; read it again once the writer is "
              "done")),
          ErrorReason::kFileChangedDuringRead, {{"file", path}});
    }
    return absl::OkStatus();  // no lease for this process: not probed
  }
  ::fcntl(fd->get(), F_SETLEASE, F_UNLCK);
  if (probed != nullptr) *probed = true;
  return absl::OkStatus();
}

}  // namespace tensormorph
