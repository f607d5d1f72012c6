#include "server/path_sandbox.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tensormorph {
namespace {

absl::StatusOr<std::string> RealPath(const std::string& p) {
  char buf[PATH_MAX];
  if (::realpath(p.c_str(), buf) == nullptr) {
    return absl::NotFoundError(absl::StrCat("'", p, "' does not exist"));
  }
  return std::string(buf);
}

// The realpath of `lexical` (absolute, normalised) and its stat, in one
// walk of the path when no component is a symlink: openat2 with
// RESOLVE_NO_SYMLINKS then opens exactly the file realpath would name,
// `lexical` itself. 3 syscalls instead of realpath's readlink per component
// and a stat (each call resolves afresh: issue 20's one-scalar latency).
// False when the kernel refuses (a symlink on the way, no such file, no
// openat2 here or under seccomp): the caller then takes realpath's way,
// which gives every answer and error as before.
bool ResolveWithoutSymlinks(const std::string& lexical, struct stat* st) {
  struct open_how how = {};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS;
  const long fd =
      ::syscall(SYS_openat2, AT_FDCWD, lexical.c_str(), &how, sizeof(how));
  if (fd < 0) return false;
  const bool ok = ::fstat(static_cast<int>(fd), st) == 0;
  ::close(static_cast<int>(fd));
  return ok;
}

// Collapses "." and ".." without touching the disk, so that a path which
// lexically leaves every root is refused before anything is looked up.
std::string Normalize(const std::string& absolute) {
  std::vector<std::string> parts;
  for (absl::string_view part :
       absl::StrSplit(absolute, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.emplace_back(part);
  }
  return absl::StrCat("/", absl::StrJoin(parts, "/"));
}

bool Under(const std::string& path, const std::string& root) {
  return root == "/" || path == root ||
         (path.size() > root.size() &&
          path.compare(0, root.size(), root) == 0 && path[root.size()] == '/');
}

std::string JoinPath(const std::string& dir, absl::string_view rel) {
  return dir == "/" ? absl::StrCat("/", rel) : absl::StrCat(dir, "/", rel);
}

std::string WorkingDirectory() {
  char buf[PATH_MAX];
  return ::getcwd(buf, sizeof(buf)) != nullptr ? std::string(buf) : "/";
}

}  // namespace

absl::StatusOr<PathSandbox> PathSandbox::Create(
    const std::vector<std::string>& roots) {
  if (roots.empty()) {
    return absl::InvalidArgumentError(
        "no --root given: name at least one directory to serve");
  }
  PathSandbox s;
  for (const std::string& r : roots) {
    auto real = r.empty() ? absl::NotFoundError("empty") : RealPath(r);
    struct stat st;
    if (!real.ok() || ::stat(real->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("root '", r, "' is not an existing directory"));
    }
    const std::string given =
        Normalize(r.front() == '/' ? r : JoinPath(WorkingDirectory(), r));
    s.roots_.push_back(Root{given, *real});
  }
  return s;
}

PathSandbox PathSandbox::Unrestricted(const std::string& base_dir) {
  PathSandbox s;
  s.unrestricted_ = true;
  s.base_dir_ = base_dir;
  s.roots_ = {Root{"/", "/"}};
  return s;
}

std::vector<std::string> PathSandbox::roots() const {
  std::vector<std::string> out;
  for (const Root& r : roots_) out.push_back(r.given);
  return out;
}

std::string PathSandbox::DescribeRoots() const {
  return absl::StrJoin(roots_, ", ", [](std::string* out, const Root& r) {
    absl::StrAppend(out, r.given);
    if (r.resolved != r.given)
      absl::StrAppend(out, " (resolved: ", r.resolved, ")");
  });
}

bool PathSandbox::Inside(const std::string& path, bool given_too) const {
  if (unrestricted_) return true;
  for (const Root& root : roots_) {
    if (Under(path, root.resolved) || (given_too && Under(path, root.given))) {
      return true;
    }
  }
  return false;
}

absl::Status PathSandbox::CheckInside(const std::string& canonical) const {
  if (Inside(canonical, /*given_too=*/false)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("'", canonical, "' is outside the server's roots (",
                   DescribeRoots(), ")"));
}

absl::StatusOr<std::string> PathSandbox::Resolve(
    absl::string_view requested) const {
  auto resolved = ResolveAndStat(requested);
  if (!resolved.ok()) return resolved.status();
  return std::move(resolved->path);
}

absl::StatusOr<PathSandbox::Resolved> PathSandbox::ResolveAndStat(
    absl::string_view requested) const {
  if (requested.empty()) {
    return absl::InvalidArgumentError("checkpoint path is empty");
  }
  std::vector<std::string> candidates;
  if (requested.front() == '/') {
    candidates.push_back(std::string(requested));
  } else if (unrestricted_) {
    candidates.push_back(JoinPath(base_dir_, requested));
  } else {
    for (const Root& root : roots_) {
      candidates.push_back(JoinPath(root.resolved, requested));
    }
  }
  bool any_inside = false;
  for (const std::string& candidate : candidates) {
    // Lexically inside either spelling of a root admits the request to the
    // disk; only its realpath inside a resolved root serves it.
    const std::string lexical = Normalize(candidate);
    if (!Inside(lexical, /*given_too=*/true)) continue;
    any_inside = true;
    auto escaped = [&](const std::string& real) {
      return absl::PermissionDeniedError(
          absl::StrCat("checkpoint '", requested, "' resolves to '", real,
                       "', outside the server's roots (", DescribeRoots(),
                       "): symlinks may not lead out of a root"));
    };
    Resolved out;
    if (ResolveWithoutSymlinks(lexical, &out.st)) {
      // No symlink on the way: the path is its own realpath, yet may lie
      // only in a root's given spelling (one that named a symlink when the
      // server started, since replaced by a directory).
      out.path = lexical;
      if (!Inside(out.path, /*given_too=*/false)) return escaped(out.path);
    } else {
      auto real = RealPath(lexical);
      if (!real.ok()) continue;
      if (!Inside(*real, /*given_too=*/false)) return escaped(*real);
      if (::stat(real->c_str(), &out.st) != 0) continue;
      out.path = *std::move(real);
    }
    if (!S_ISREG(out.st.st_mode) && !S_ISDIR(out.st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint '", requested,
          "' is not a regular file or directory (a device, FIFO or socket)"));
    }
    return out;
  }
  if (!any_inside) {
    return absl::PermissionDeniedError(absl::StrCat(
        "checkpoint '", requested, "' is outside the server's roots (",
        DescribeRoots(), ")"));
  }
  return absl::NotFoundError(absl::StrCat(
      "checkpoint '", requested, "' not found",
      unrestricted_
          ? std::string()
          : absl::StrCat(" under the server's roots (", DescribeRoots(), ")")));
}

}  // namespace tensormorph
