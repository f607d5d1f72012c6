// Maps the checkpoint paths clients send to files inside the server's roots.
#ifndef TENSORMORPH_SERVER_PATH_SANDBOX_H_
#define TENSORMORPH_SERVER_PATH_SANDBOX_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensormorph {

// Thread safety: immutable after creation.
class PathSandbox {
 public:
  // Roots must be existing directories; they are canonicalised (realpath).
  // Errors: INVALID_ARGUMENT naming a root that is missing or not a
  // directory, or when no root is given.
  static absl::StatusOr<PathSandbox> Create(
      const std::vector<std::string>& roots);

  // Any local path, relative ones against `base_dir` (embedded mode).
  static PathSandbox Unrestricted(const std::string& base_dir);

  // Resolves `requested` (relative to a root, or absolute inside one) to a
  // canonical path, following `..` and symlinks. Only regular files and
  // directories are served.
  // Errors: INVALID_ARGUMENT (empty path; a device, FIFO or socket);
  // PERMISSION_DENIED (resolves outside every root); NOT_FOUND (no such
  // file under any root).
  absl::StatusOr<std::string> Resolve(absl::string_view requested) const;

  // Checks that an already-canonical path lies inside a root.
  // Errors: PERMISSION_DENIED.
  absl::Status CheckInside(const std::string& canonical) const;

  const std::vector<std::string>& roots() const { return roots_; }
  bool unrestricted() const { return unrestricted_; }

 private:
  PathSandbox() = default;
  bool Inside(const std::string& canonical) const;

  std::vector<std::string> roots_;
  bool unrestricted_ = false;
  std::string base_dir_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_PATH_SANDBOX_H_
