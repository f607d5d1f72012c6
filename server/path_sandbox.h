// Maps the checkpoint paths clients send to files inside the server's roots.
#ifndef TENSORMORPH_SERVER_PATH_SANDBOX_H_
#define TENSORMORPH_SERVER_PATH_SANDBOX_H_

#include <sys/stat.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/io/file_access.h"
#include "core/io/remote_files.h"

namespace tensormorph {

// Each root is kept in two spellings: as given (made absolute and lexically
// normalised, symlinks kept: `/models`) and as resolved (realpath:
// `/nvme/models`). A request may be spelled under either. Each root is
// opened once, at Create, as a directory fd (access()), and every path is
// resolved beneath that fd in one kernel call (FileAccess::Beneath: openat2
// with RESOLVE_BENEATH), so neither `..`, nor a symlink, nor a directory
// swapped for a symlink between two steps can lead out of a root: there is
// no second step. Paths with a NUL byte are refused before any lookup.
// Thread safety: immutable after creation.
class PathSandbox {
 public:
  struct Root {
    std::string given;     // absolute, normalised, symlinks kept
    std::string resolved;  // realpath of `given`
  };

  // Roots must be existing directories; relative ones are taken against the
  // working directory. A root that is a storage URL (s3://bucket/prefix/,
  // https://host/dir/, hf://org/repo/) is a remote root, served through
  // `remote` as a directory is: a URL request must lie beneath one (no `.`
  // or `..` segments), and a relative path not found beneath a local root
  // is looked for beneath each remote one.
  // Errors: INVALID_ARGUMENT naming a root that is missing or not a
  // directory, or when no root is given, or when the kernel cannot resolve
  // beneath a directory (no openat2); a remote root without `remote`.
  static absl::StatusOr<PathSandbox> Create(
      const std::vector<std::string>& roots,
      std::shared_ptr<const RemoteFiles> remote = nullptr);

  // Any local path, relative ones against `base_dir` (embedded mode), and
  // any URL through `remote` (null: none).
  static PathSandbox Unrestricted(
      const std::string& base_dir,
      std::shared_ptr<const RemoteFiles> remote = nullptr);

  // Resolves `requested` (relative to a root, or absolute under either
  // spelling of one) to a canonical path inside a resolved root, following
  // `..` and symlinks that stay beneath the root. Only regular files and
  // directories are served.
  // Errors: INVALID_ARGUMENT (empty path, a NUL byte, longer than PATH_MAX;
  // a device, FIFO or socket); PERMISSION_DENIED (lexically outside every
  // root, or leading out of its root); NOT_FOUND (no such file under any
  // root).
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
  // What every file of a checkpoint served from here is opened through.
  const std::shared_ptr<const FileAccess>& access() const { return access_; }
  // What URLs are opened through (null when none may be).
  const std::shared_ptr<const RemoteFiles>& remote() const { return remote_; }

 private:
  PathSandbox() = default;
  // Whether `path` (absolute, normalised) lies in a root's resolved spelling,
  // or with `given_too` in its given one as well.
  bool Inside(const std::string& path, bool given_too) const;
  // `path` (absolute, normalised) spelled under the resolved spelling of the
  // root it lies in (either spelling), which access() opens beneath; empty
  // when it lies in none.
  std::string InResolvedSpelling(const std::string& path) const;
  // A URL request: beneath a remote root (or any, unrestricted), stat'ed.
  absl::StatusOr<Resolved> ResolveUrl(absl::string_view url) const;
  // A relative request beneath each remote root in turn; NOT_FOUND when
  // none holds it.
  absl::StatusOr<Resolved> ResolveBeneathRemoteRoots(
      absl::string_view requested) const;

  std::vector<Root> roots_;
  std::vector<std::string> remote_roots_;  // each ending in '/'
  std::shared_ptr<const FileAccess> access_;
  std::shared_ptr<const RemoteFiles> remote_;
  bool unrestricted_ = false;
  std::string base_dir_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_PATH_SANDBOX_H_
