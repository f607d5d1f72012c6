// The one mapping of an errno from a file operation to a Status.
#ifndef TENSORMORPH_CORE_IO_ERRNO_STATUS_H_
#define TENSORMORPH_CORE_IO_ERRNO_STATUS_H_

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tensormorph {

// "`what` 'PATH': strerror" with the code a caller can act on: NOT_FOUND
// (no such file, or a component that is no directory), PERMISSION_DENIED,
// INVALID_ARGUMENT (a name too long, a socket or a device without a
// driver), INTERNAL for the rest.
inline absl::Status ErrnoStatus(int err, absl::string_view what,
                                absl::string_view path) {
  const std::string msg =
      absl::StrCat(what, " '", path, "': ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    case ENAMETOOLONG:
    case ENXIO:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_ERRNO_STATUS_H_
