// Maps the checkpoint paths clients send to files inside the server's roots.
#ifndef TENSORMORPH_SERVER_PATH_SANDBOX_H_
#define TENSORMORPH_SERVER_PATH_SANDBOX_H_

#include <sys/stat.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensormorph {

// Each root is kept in two spellings: as given (made absolute and lexically
// normalised, symlinks kept: `/models`) and as resolved (realpath:
// `/nvme/models`). A request may be spelled under either; what decides is
// where it resolves: the realpath of every request must lie inside a
// resolved root, so `..` and symlinks cannot lead out of the roots whatever
// the spelling.
// Thread safety: immutable after creation.
class PathSandbox {
 public:
  struct Root {
    std::string given;     // absolute, normalised, symlinks kept
    std::string resolved;  // realpath of `given`
  };

  // Roots must be existing directories; relative ones are taken against the
  // working directory.
  // Errors: INVALID_ARGUMENT naming a root that is missing or not a
  // directory, or when no root is given.
  static absl::StatusOr<PathSandbox> Create(
      const std::vector<std::string>& roots);

  // Any local path, relative ones against `base_dir` (embedded mode).
  static PathSandbox Unrestricted(const std::string& base_dir);

  // Resolves `requested` (relative to a root, or absolute under either
  // spelling of one) to a canonical path inside a resolved root, following
  // `..` and symlinks. Only regular files and directories are served.
  // Errors: INVALID_ARGUMENT (empty path; a device, FIFO or socket);
  // PERMISSION_DENIED (lexically outside every root, or resolving outside
  // every resolved root); NOT_FOUND (no such file under any root).
  absl::StatusOr<std::string> Resolve(absl::string_view requested) const;

  // What Resolve found, with the stat(2) of it taken as it was resolved (a
  // caller that checks the file's identity need not stat it again).
  struct Resolved {
    std::string path;
    struct stat st;
  };
  // As Resolve (same errors).
  absl::StatusOr<Resolved> ResolveAndStat(absl::string_view requested) const;

  // Checks that an already-canonical path lies inside a resolved root.
  // Errors: PERMISSION_DENIED.
  absl::Status CheckInside(const std::string& canonical) const;

  // The roots as given (what users type and see).
  std::vector<std::string> roots() const;
  // "given (resolved: real), ...": the form errors and logs show.
  std::string DescribeRoots() const;
  bool unrestricted() const { return unrestricted_; }

 private:
  PathSandbox() = default;
  // Whether `path` (absolute, normalised) lies in a root's resolved spelling,
  // or with `given_too` in its given one as well.
  bool Inside(const std::string& path, bool given_too) const;

  std::vector<Root> roots_;
  bool unrestricted_ = false;
  std::string base_dir_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_PATH_SANDBOX_H_
