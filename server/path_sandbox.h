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
#include "core/io/root_backing.h"

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
  // What a request's path names, unless the caller says otherwise.
  static constexpr absl::string_view kCheckpointNoun = "checkpoint";

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
  //
  // `backings` are "ROOT=URL" (tensormorphd --backing): the local root ROOT,
  // spelled as in `roots` (either spelling of it), is backed by the storage
  // URL prefix URL (root_backing.h). A request beneath it that the disk
  // lacks resolves, spelled as a local path, to what the backing holds at
  // the path relative to the root; the checkpoint's files are then each read
  // from the disk when there, else from the backing (OpenOptions::backings).
  // Errors: INVALID_ARGUMENT naming a root that is missing or not a
  // directory, or when no root is given, or when the kernel cannot resolve
  // beneath a directory (no openat2); a remote root without `remote`; a
  // backing not of the form ROOT=URL, of a root not given (or a remote
  // one), whose URL RootBackings::Create refuses, or a second one of a
  // root; backings without `remote`.
  static absl::StatusOr<PathSandbox> Create(
      const std::vector<std::string>& roots,
      std::shared_ptr<const RemoteFiles> remote = nullptr,
      const std::vector<std::string>& backings = {});

  // The URL prefix of each "ROOT=URL" backing, ending in '/', for
  // RemoteFilesOptions::roots (the prefixes RemoteFiles may open).
  // Errors: INVALID_ARGUMENT for one not of the form ROOT=URL.
  static absl::StatusOr<std::vector<std::string>> BackingPrefixes(
      const std::vector<std::string>& backings);

  // Any local path, relative ones against `base_dir` (embedded mode), and
  // any URL through `remote` (null: none).
  static PathSandbox Unrestricted(
      const std::string& base_dir,
      std::shared_ptr<const RemoteFiles> remote = nullptr);

  // Resolves `requested` (relative to a root, or absolute under either
  // spelling of one) to a canonical path inside a resolved root, following
  // `..` and symlinks that stay beneath the root. Only regular files and
  // directories are served. `noun` says in every message what the path
  // was to name ("checkpoint", "importance matrix"), so an error about a
  // file that is no checkpoint does not call it one.
  // Errors: INVALID_ARGUMENT (empty path, a NUL byte, longer than PATH_MAX;
  // a device, FIFO or socket); PERMISSION_DENIED OUTSIDE_ROOTS {path}
  // (lexically outside every root, or leading out of its root); NOT_FOUND
  // (no such file under any root): CHECKPOINT_NOT_FOUND {checkpoint} for
  // kCheckpointNoun, else NOT_FOUND {path}.
  absl::StatusOr<std::string> Resolve(
      absl::string_view requested,
      absl::string_view noun = kCheckpointNoun) const;

  // What Resolve found, with the stat(2) of it taken as it was resolved (a
  // caller that checks the file's identity need not stat it again).
  struct Resolved {
    std::string path;
    struct stat st;
  };
  // As Resolve (same errors).
  absl::StatusOr<Resolved> ResolveAndStat(
      absl::string_view requested,
      absl::string_view noun = kCheckpointNoun) const;

  // Checks that an already-canonical path lies inside a resolved root.
  // Errors: PERMISSION_DENIED.
  absl::Status CheckInside(const std::string& canonical) const;

  // The roots as given (what users type and see): the local ones.
  std::vector<std::string> roots() const;
  // The storage URL roots (--root s3://...), each ending in '/', after the
  // local ones in ListCheckpoints' order.
  const std::vector<std::string>& remote_roots() const { return remote_roots_; }
  // "given (resolved: real), ...": the form errors and logs show.
  std::string DescribeRoots() const;
  bool unrestricted() const { return unrestricted_; }
  // What every file of a checkpoint served from here is opened through.
  const std::shared_ptr<const FileAccess>& access() const { return access_; }
  // What URLs are opened through (null when none may be).
  const std::shared_ptr<const RemoteFiles>& remote() const { return remote_; }
  // The backed roots, in their resolved spellings (null when none).
  const std::shared_ptr<const RootBackings>& backings() const {
    return backings_;
  }
  // Whether a file of a checkpoint at `path` (as Resolve gives it) may be
  // read from a backing: it lies beneath a backed root.
  bool Backed(const std::string& path) const {
    return backings_ != nullptr && backings_->UrlOf(path).has_value();
  }

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
  absl::StatusOr<Resolved> ResolveUrl(absl::string_view url,
                                      absl::string_view noun) const;
  // A relative request beneath each remote root in turn; NOT_FOUND when
  // none holds it.
  absl::StatusOr<Resolved> ResolveBeneathRemoteRoots(
      absl::string_view requested, absl::string_view noun) const;
  // `beneath` (a local path the disk lacks) as its backing holds it, keeping
  // the local spelling; NOT_FOUND when it is backed by none, or the backing
  // lacks it too.
  absl::StatusOr<Resolved> ResolveInBacking(const std::string& beneath) const;
  // Parses `backings` (ROOT=URL) against roots_ into backings_.
  absl::Status SetBackings(const std::vector<std::string>& backings);

  std::vector<Root> roots_;
  std::vector<std::string> remote_roots_;  // each ending in '/'
  std::shared_ptr<const FileAccess> access_;
  std::shared_ptr<const RemoteFiles> remote_;
  std::shared_ptr<const RootBackings> backings_;
  bool unrestricted_ = false;
  std::string base_dir_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_PATH_SANDBOX_H_
