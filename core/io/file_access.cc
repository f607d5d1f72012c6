#include "core/io/file_access.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/io/errno_status.h"
#include "core/util/error_reason.h"

namespace tensormorph {
namespace {

bool Under(absl::string_view path, absl::string_view root) {
  if (root == "/") return !path.empty() && path.front() == '/';
  return path == root ||
         (path.size() > root.size() && path.substr(0, root.size()) == root &&
          path[root.size()] == '/');
}

std::string RelativeTo(absl::string_view path, absl::string_view root) {
  if (path == root) return ".";
  absl::string_view rest = path.substr(root == "/" ? 1 : root.size() + 1);
  while (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
  return rest.empty() ? "." : std::string(rest);
}

// openat2(2), retried while the kernel asks to (EAGAIN: a rename raced a
// `..` in the walk) or a signal interrupts it.
int OpenAt2(int dirfd, const std::string& relative, int flags,
            uint64_t resolve) {
  struct open_how how = {};
  how.flags = static_cast<uint64_t>(flags);
  how.resolve = resolve;
  for (int attempt = 0;; ++attempt) {
    const long fd =
        ::syscall(SYS_openat2, dirfd, relative.c_str(), &how, sizeof(how));
    if (fd >= 0) return static_cast<int>(fd);
    if ((errno != EAGAIN && errno != EINTR) || attempt == 16) return -1;
  }
}

absl::Status Validate(absl::string_view path, int flags) {
  if (path.empty()) return absl::InvalidArgumentError("empty path");
  // The kernel reads a path up to its first NUL: "a\0/../b" would name "a".
  if (path.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("path '", absl::CHexEscape(path),
                     "' holds a NUL byte, which the OS would cut it at"));
  }
  if (path.size() >= PATH_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        "path of ", path.size(), " bytes is longer than PATH_MAX ", PATH_MAX));
  }
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("open '", path, "': core opens files read-only"));
  }
  return absl::OkStatus();
}

}  // namespace

std::shared_ptr<const FileAccess> FileAccess::Anywhere() {
  static const std::shared_ptr<const FileAccess> anywhere(new FileAccess());
  return anywhere;
}

absl::StatusOr<std::shared_ptr<const FileAccess>> FileAccess::Beneath(
    const std::vector<std::string>& roots) {
  std::shared_ptr<FileAccess> access(new FileAccess());
  for (const std::string& r : roots) {
    auto refuse = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("root '", r, "' ", why));
    };
    if (r.empty() || r.front() != '/') return refuse("is not absolute");
    if (r.find('\0') != std::string::npos) return refuse("holds a NUL byte");
    UniqueFd fd(::open(r.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!fd.valid()) {
      return refuse(absl::StrCat("cannot be opened as a directory: ",
                                 std::strerror(errno)));
    }
    absl::StatusOr<std::string> real = PathOf(fd.get());
    if (!real.ok() || *real != r) {
      return refuse("is not canonical (give its realpath)");
    }
    // Refuse to start rather than serve without the guarantee: openat2 is
    // Linux 5.6+, and a seccomp profile may hide it.
    UniqueFd probe(OpenAt2(fd.get(), ".", O_PATH | O_CLOEXEC,
                           RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS));
    if (!probe.valid()) {
      return refuse(absl::StrCat(
          "cannot be served: openat2(2) failed (", std::strerror(errno),
          "); Linux 5.6 or later is needed, and a seccomp profile that "
          "allows openat2"));
    }
    access->roots_.push_back(Root{r, std::move(fd)});
  }
  return std::shared_ptr<const FileAccess>(std::move(access));
}

FileAccess::~FileAccess() = default;

std::vector<std::string> FileAccess::roots() const {
  std::vector<std::string> out;
  for (const Root& r : roots_) out.push_back(r.path);
  return out;
}

const FileAccess::Root* FileAccess::RootOf(absl::string_view path,
                                           std::string* relative) const {
  const Root* best = nullptr;
  for (const Root& r : roots_) {
    if (Under(path, r.path) &&
        (best == nullptr || r.path.size() > best->path.size())) {
      best = &r;
    }
  }
  if (best != nullptr) *relative = RelativeTo(path, best->path);
  return best;
}

absl::StatusOr<UniqueFd> FileAccess::Open(absl::string_view path,
                                          int flags) const {
  if (absl::Status s = Validate(path, flags); !s.ok()) return s;
  flags |= O_CLOEXEC;
  const std::string p(path);
  if (!restricted()) {
    UniqueFd fd(::open(p.c_str(), flags));
    if (!fd.valid()) return ErrnoStatus(errno, "open", path);
    return fd;
  }
  std::string relative;
  const Root* root = p.front() == '/' ? RootOf(p, &relative) : nullptr;
  if (root == nullptr) {
    return WithReason(
        absl::PermissionDeniedError(absl::StrCat(
            "'", path, "' is not beneath any of the server's roots")),
        ErrorReason::kOutsideRoots, {{"path", std::string(path)}});
  }
  return OpenBeneath(*root, relative, path, flags);
}

absl::StatusOr<UniqueFd> FileAccess::OpenBeneath(const Root& root,
                                                 const std::string& relative,
                                                 absl::string_view path,
                                                 int flags) const {
  UniqueFd fd(OpenAt2(root.fd.get(), relative, flags,
                      RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS));
  if (fd.valid()) return fd;
  auto leads_out = [&] {
    return WithReason(
        absl::PermissionDeniedError(absl::StrCat(
            "'", path, "' leads out of the server's root '", root.path,
            "' (through a symlink or '..'): symlinks may not lead out of a "
            "root")),
        ErrorReason::kOutsideRoots, {{"path", std::string(path)}});
  };
  if (errno == ELOOP) return leads_out();  // a magic link, or a loop
  if (errno != EXDEV) return ErrnoStatus(errno, "open", path);
  // Leaving the root, or an absolute symlink, which RESOLVE_BENEATH refuses
  // even where it points inside: take realpath's answer, and open it with no
  // symlink followed at all, so a swap since cannot lead outside.
  char buf[PATH_MAX];
  if (::realpath(std::string(path).c_str(), buf) == nullptr) {
    return ErrnoStatus(errno, "open", path);
  }
  const absl::string_view real = buf;
  if (!Under(real, root.path)) return leads_out();
  fd = UniqueFd(OpenAt2(root.fd.get(), RelativeTo(real, root.path), flags,
                        RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS));
  if (fd.valid()) return fd;
  // ELOOP/EXDEV: a symlink appeared on the resolved path meanwhile.
  if (errno == ELOOP || errno == EXDEV) return leads_out();
  return ErrnoStatus(errno, "open", path);
}

absl::StatusOr<struct stat> FileAccess::Stat(absl::string_view path) const {
  struct stat st;
  if (!restricted()) {
    if (absl::Status s = Validate(path, O_RDONLY); !s.ok()) return s;
    if (::stat(std::string(path).c_str(), &st) != 0) {
      return ErrnoStatus(errno, "stat", path);
    }
    return st;
  }
  absl::StatusOr<UniqueFd> fd = Open(path, O_PATH);
  if (!fd.ok()) return fd.status();
  if (::fstat(fd->get(), &st) != 0) return ErrnoStatus(errno, "stat", path);
  return st;
}

absl::StatusOr<std::vector<std::string>> FileAccess::ListDirectory(
    absl::string_view path) const {
  absl::StatusOr<UniqueFd> fd = Open(path, O_RDONLY | O_DIRECTORY);
  if (!fd.ok()) return fd.status();
  DIR* d = ::fdopendir(fd->get());
  if (d == nullptr) return ErrnoStatus(errno, "list", path);
  fd->release();  // closedir closes it
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    const absl::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  ::closedir(d);
  return names;
}

absl::StatusOr<std::string> FileAccess::PathOf(int fd) {
  char buf[PATH_MAX];
  const std::string link = absl::StrCat("/proc/self/fd/", fd);
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf) - 1);
  if (n < 0) return ErrnoStatus(errno, "readlink", link);
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace tensormorph
