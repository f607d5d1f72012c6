// Where core may open files, and how: every open, stat and directory listing
// of a checkpoint's files (mapped files, shards, index, configs) goes through
// one FileAccess.
#ifndef TENSORMORPH_CORE_IO_FILE_ACCESS_H_
#define TENSORMORPH_CORE_IO_FILE_ACCESS_H_

#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/io/unique_fd.h"

namespace tensormorph {

// Anywhere(): any path, as open(2) resolves it (the CLI's embedded mode,
// tools, tests).
//
// Beneath(roots): only files beneath root directories that were opened once,
// as directory fds, when the FileAccess was made. A path names its root by
// its prefix (the root's canonical spelling); the rest is resolved beneath
// that root's fd in one openat2(2) call with RESOLVE_BENEATH |
// RESOLVE_NO_MAGICLINKS. A symlink is followed only while it stays beneath
// the root, and since the open is the check, no rename or symlink swap
// between a check and an open can lead outside: a file outside the roots is
// never opened, so none of its bytes can reach a reply or an error. Callers
// then read through the fd obtained (a mapping, read(2)), never by the name
// again. An absolute symlink, which RESOLVE_BENEATH refuses even where it
// points inside the root, is resolved by realpath(3) (which reads link
// targets, never file contents) and the result opened beneath the root with
// RESOLVE_NO_SYMLINKS: whatever a swap does meanwhile, what opens lies
// beneath the root. A root directory renamed away keeps being served through
// its fd.
//
// Thread safety: immutable after creation; every method is thread-safe.
class FileAccess {
 public:
  static std::shared_ptr<const FileAccess> Anywhere();

  // `roots` are existing directories, given as absolute canonical paths
  // (realpath(3) of what the operator named).
  // Errors: INVALID_ARGUMENT naming a root that is not absolute, not
  // canonical, or not an openable directory.
  static absl::StatusOr<std::shared_ptr<const FileAccess>> Beneath(
      const std::vector<std::string>& roots);

  ~FileAccess();
  FileAccess(const FileAccess&) = delete;
  FileAccess& operator=(const FileAccess&) = delete;

  // Opens `path` with open(2) `flags` (O_CLOEXEC is added; O_CREAT and
  // writing are refused: core only reads).
  // Errors: INVALID_ARGUMENT (empty, a NUL byte, longer than PATH_MAX, or
  // relative where restricted; flags that write); PERMISSION_DENIED (not
  // beneath any root, leading out of its root through a symlink or `..`, a
  // magic link, or unreadable); NOT_FOUND (no such file, or a path component
  // that is not a directory); INTERNAL (other errors, with errno's text).
  absl::StatusOr<UniqueFd> Open(absl::string_view path, int flags) const;

  // stat(2) of what `path` names, following symlinks as Open does.
  // Errors: those of Open.
  absl::StatusOr<struct stat> Stat(absl::string_view path) const;

  // The entries of directory `path` (without "." and ".."), in readdir's
  // order, read through a descriptor opened as Open opens.
  // Errors: those of Open; NOT_FOUND when `path` is no directory.
  absl::StatusOr<std::vector<std::string>> ListDirectory(
      absl::string_view path) const;

  // The canonical path of what `fd` (from Open) names now, as the kernel
  // knows it. Errors: INTERNAL when /proc cannot say.
  static absl::StatusOr<std::string> PathOf(int fd);

  bool restricted() const { return !roots_.empty(); }
  // The roots' canonical paths (empty when unrestricted).
  std::vector<std::string> roots() const;

 private:
  struct Root {
    std::string path;  // canonical, absolute
    UniqueFd fd;       // O_PATH | O_DIRECTORY, held for the object's life
  };
  FileAccess() = default;
  // The root `path` lies under (longest match), and `path` relative to it
  // ("." for the root itself); null when under none.
  const Root* RootOf(absl::string_view path, std::string* relative) const;
  absl::StatusOr<UniqueFd> OpenBeneath(const Root& root,
                                       const std::string& relative,
                                       absl::string_view path, int flags) const;

  std::vector<Root> roots_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_FILE_ACCESS_H_
