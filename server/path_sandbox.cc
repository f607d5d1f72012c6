#include "server/path_sandbox.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/io/object_url.h"
#include "core/util/error_reason.h"
#include "core/util/utf8.h"

namespace tensormorph {
namespace {

absl::StatusOr<std::string> RealPath(const std::string& p) {
  char buf[PATH_MAX];
  if (::realpath(p.c_str(), buf) == nullptr) {
    return absl::NotFoundError(absl::StrCat("'", p, "' does not exist"));
  }
  return std::string(buf);
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

// "ROOT=URL" split at the first '=' that a URL's "scheme://" follows (a
// root path may hold '=', and so may a URL after its scheme), else at the
// last '=' (what follows is then no URL, which the caller says).
absl::StatusOr<std::pair<std::string, std::string>> SplitBacking(
    const std::string& spec) {
  size_t eq = std::string::npos;
  for (size_t i = spec.find('='); i != std::string::npos;
       i = spec.find('=', i + 1)) {
    size_t k = i + 1;
    while (k < spec.size() &&
           (absl::ascii_isalnum(static_cast<unsigned char>(spec[k])) ||
            spec[k] == '+' || spec[k] == '.' || spec[k] == '-')) {
      ++k;
    }
    if (k > i + 1 && spec.compare(k, 3, "://") == 0) {
      eq = i;
      break;
    }
  }
  if (eq == std::string::npos) eq = spec.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backing '", RedactUrl(spec),
        "': expected ROOT=URL, a --root directory and the storage URL "
        "prefix that backs it (/data/ckpts=s3://bucket/prefix/)"));
  }
  return std::make_pair(spec.substr(0, eq), spec.substr(eq + 1));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> PathSandbox::BackingPrefixes(
    const std::vector<std::string>& backings) {
  std::vector<std::string> out;
  for (const std::string& spec : backings) {
    absl::StatusOr<std::pair<std::string, std::string>> b = SplitBacking(spec);
    if (!b.ok()) return b.status();
    if (!RemoteFiles::IsUrl(b->second)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "backing of '", b->first, "': '", b->second,
          "' is no storage URL (s3://bucket/prefix/, https://host/dir/, "
          "hf://org/repo/)"));
    }
    out.push_back(absl::EndsWith(b->second, "/")
                      ? b->second
                      : absl::StrCat(b->second, "/"));
  }
  return out;
}

absl::Status PathSandbox::SetBackings(
    const std::vector<std::string>& backings) {
  if (backings.empty()) return absl::OkStatus();
  if (remote_ == nullptr) {
    return absl::InvalidArgumentError(
        "a backing is read through remote storage, which is not enabled here");
  }
  std::vector<RootBacking> parsed;
  for (const std::string& spec : backings) {
    absl::StatusOr<std::pair<std::string, std::string>> b = SplitBacking(spec);
    if (!b.ok()) return b.status();
    const auto& [root, url] = *b;
    if (RemoteFiles::IsUrl(root)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "backing of '", RedactUrl(root),
          "': a remote root is read from its URL already; only a local --root "
          "directory may be backed"));
    }
    const std::string given = Normalize(
        root.front() == '/' ? root : JoinPath(WorkingDirectory(), root));
    const absl::StatusOr<std::string> real = RealPath(root);
    const Root* match = nullptr;
    for (const Root& r : roots_) {
      if (r.given == given || r.resolved == given ||
          (real.ok() && r.resolved == *real)) {
        match = &r;
      }
    }
    if (match == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "backing of '", root, "': it is not a --root (roots: ",
          DescribeRoots(), "); back a directory the server serves"));
    }
    parsed.push_back(RootBacking{match->resolved, url});
  }
  absl::StatusOr<std::shared_ptr<const RootBackings>> made =
      RootBackings::Create(std::move(parsed));
  if (!made.ok()) return made.status();
  backings_ = *std::move(made);
  return absl::OkStatus();
}

absl::StatusOr<PathSandbox> PathSandbox::Create(
    const std::vector<std::string>& roots,
    std::shared_ptr<const RemoteFiles> remote,
    const std::vector<std::string>& backings) {
  if (roots.empty()) {
    return absl::InvalidArgumentError(
        "no --root given: name at least one directory to serve");
  }
  PathSandbox s;
  s.remote_ = std::move(remote);
  for (const std::string& r : roots) {
    if (RemoteFiles::IsUrl(r)) {
      if (absl::StatusOr<ObjectUrl> url = ParseObjectUrl(r); !url.ok()) {
        return url.status();
      }
      if (s.remote_ == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("root '", RedactUrl(r),
                         "' is a storage URL, and remote storage "
                         "is not enabled here"));
      }
      s.remote_roots_.push_back(absl::EndsWith(r, "/") ? r
                                                       : absl::StrCat(r, "/"));
      continue;
    }
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
  if (absl::Status b = s.SetBackings(backings); !b.ok()) return b;
  std::vector<std::string> resolved;
  for (const Root& r : s.roots_) resolved.push_back(r.resolved);
  if (resolved.empty()) {
    // Remote roots only: Resolve admits no local path, so nothing is ever
    // opened through this.
    s.access_ = FileAccess::Anywhere();
    return s;
  }
  auto access = FileAccess::Beneath(resolved);
  if (!access.ok()) return access.status();
  s.access_ = *std::move(access);
  return s;
}

PathSandbox PathSandbox::Unrestricted(
    const std::string& base_dir, std::shared_ptr<const RemoteFiles> remote) {
  PathSandbox s;
  s.remote_ = std::move(remote);
  s.unrestricted_ = true;
  s.base_dir_ = base_dir;
  s.roots_ = {Root{"/", "/"}};
  s.access_ = FileAccess::Anywhere();
  return s;
}

std::vector<std::string> PathSandbox::roots() const {
  std::vector<std::string> out;
  for (const Root& r : roots_) out.push_back(r.given);
  return out;
}

std::string PathSandbox::DescribeRoots() const {
  std::string out =
      absl::StrJoin(roots_, ", ", [](std::string* out, const Root& r) {
        absl::StrAppend(out, r.given);
        if (r.resolved != r.given)
          absl::StrAppend(out, " (resolved: ", r.resolved, ")");
      });
  for (const std::string& r : remote_roots_) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", RedactUrl(r));
  }
  return out;
}

namespace {

// A URL path segment "." or ".." (which HTTP servers and S3 keys treat
// differently): a request holding one is refused rather than interpreted.
bool HasDotSegment(absl::string_view url) {
  const size_t scheme = url.find("://");
  absl::string_view path =
      scheme == absl::string_view::npos ? url : url.substr(scheme + 3);
  for (absl::string_view seg : absl::StrSplit(path, '/')) {
    if (seg == "." || seg == "..") return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<PathSandbox::Resolved> PathSandbox::ResolveUrl(
    absl::string_view url, absl::string_view noun) const {
  if (remote_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(noun, " '", RedactUrl(url),
                     "' is a storage URL, and remote storage is not enabled "
                     "here"));
  }
  bool inside = unrestricted_;
  for (const std::string& root : remote_roots_) {
    inside =
        inside || absl::StartsWith(url, root) || absl::StrCat(url, "/") == root;
  }
  if (!inside || HasDotSegment(url)) {
    return WithReason(
        absl::PermissionDeniedError(absl::StrCat(
            noun, " '", RedactUrl(url), "' is outside the server's roots (",
            DescribeRoots(), ")")),
        ErrorReason::kOutsideRoots, {{"path", RedactUrl(url)}});
  }
  absl::StatusOr<struct stat> st = remote_->Stat(std::string(url));
  if (!st.ok()) return st.status();
  return Resolved{std::string(url), *st};
}

absl::StatusOr<PathSandbox::Resolved> PathSandbox::ResolveBeneathRemoteRoots(
    absl::string_view requested, absl::string_view noun) const {
  if (HasDotSegment(requested)) {
    return WithReason(
        absl::PermissionDeniedError(absl::StrCat(
            noun, " '", requested, "' holds a '.' or '..' segment")),
        ErrorReason::kOutsideRoots, {{"path", std::string(requested)}});
  }
  for (const std::string& root : remote_roots_) {
    absl::StatusOr<Resolved> r =
        ResolveUrl(absl::StrCat(root, requested), noun);
    if (r.ok() || !absl::IsNotFound(r.status())) return r;
  }
  return absl::NotFoundError(absl::StrCat(noun, " '", requested,
                                          "' not found under the server's "
                                          "roots (",
                                          DescribeRoots(), ")"));
}

absl::StatusOr<PathSandbox::Resolved> PathSandbox::ResolveInBacking(
    const std::string& beneath) const {
  std::optional<std::string> url =
      backings_ == nullptr ? std::nullopt : backings_->UrlOf(beneath);
  if (!url) {
    return absl::NotFoundError(absl::StrCat("'", beneath, "' is not backed"));
  }
  absl::StatusOr<struct stat> st = remote_->Stat(*url);
  if (!st.ok()) return st.status();
  return Resolved{beneath, *st};
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

std::string PathSandbox::InResolvedSpelling(const std::string& path) const {
  if (unrestricted_) return path;
  for (const Root& root : roots_) {
    if (Under(path, root.resolved)) return path;
  }
  for (const Root& root : roots_) {
    if (Under(path, root.given)) {
      return root.given == "/" ? JoinPath(root.resolved, path.substr(1))
             : path.size() == root.given.size()
                 ? root.resolved
                 : JoinPath(root.resolved, path.substr(root.given.size() + 1));
    }
  }
  return "";
}

absl::Status PathSandbox::CheckInside(const std::string& canonical) const {
  if (Inside(canonical, /*given_too=*/false)) return absl::OkStatus();
  return WithReason(absl::PermissionDeniedError(absl::StrCat(
                        "'", canonical, "' is outside the server's roots (",
                        DescribeRoots(), ")")),
                    ErrorReason::kOutsideRoots, {{"path", canonical}});
}

absl::StatusOr<std::string> PathSandbox::Resolve(absl::string_view requested,
                                                 absl::string_view noun) const {
  auto resolved = ResolveAndStat(requested, noun);
  if (!resolved.ok()) return resolved.status();
  return std::move(resolved->path);
}

absl::StatusOr<PathSandbox::Resolved> PathSandbox::ResolveAndStat(
    absl::string_view requested, absl::string_view noun) const {
  if (requested.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(noun, " path is empty"));
  }
  // The OS would cut the path at a NUL ("a/..\0/etc" names "a/.."), so the
  // checks below and the open would disagree on what it names.
  if (requested.find('\0') != absl::string_view::npos ||
      requested.size() >= PATH_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        noun, " path '", absl::CHexEscape(requested.substr(0, 256)),
        "' holds a NUL byte or is longer than PATH_MAX (", PATH_MAX, ")"));
  }
  if (RemoteFiles::IsUrl(requested)) return ResolveUrl(requested, noun);
  // A local path is spelled as listings spell it (CheckpointEntry.path):
  // bytes that are not UTF-8 as \xHH, which an API string cannot carry
  // raw. Valid UTF-8 without `\x` or `\\` in it is its own spelling.
  const std::string raw = UnescapeUtf8(requested);
  if (raw.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        noun, " path '", requested.substr(0, 256), "' escapes a NUL byte"));
  }
  std::vector<std::string> candidates;
  if (raw.front() == '/') {
    candidates.push_back(raw);
  } else if (unrestricted_) {
    candidates.push_back(JoinPath(base_dir_, raw));
  } else {
    for (const Root& root : roots_) {
      candidates.push_back(JoinPath(root.resolved, raw));
    }
  }
  bool any_inside = false;
  // Candidates the disk lacks beneath a backed root: looked for in the
  // backing once no root's disk holds the request (local files win).
  std::vector<std::string> backed;
  for (const std::string& candidate : candidates) {
    // Lexically inside either spelling of a root admits the request to the
    // disk; what opens beneath the root's fd is what is served.
    const std::string lexical = Normalize(candidate);
    const std::string beneath = InResolvedSpelling(lexical);
    if (beneath.empty()) continue;
    any_inside = true;
    absl::StatusOr<UniqueFd> fd = access_->Open(beneath, O_PATH);
    if (absl::IsNotFound(fd.status())) {
      if (Backed(beneath)) backed.push_back(beneath);
      continue;
    }
    if (!fd.ok()) {
      return CopyReason(
          fd.status(),
          absl::Status(
              fd.status().code(),
              absl::StrCat(noun, " '", requested, "': ", fd.status().message(),
                           " (roots: ", DescribeRoots(), ")")));
    }
    Resolved out;
    if (::fstat(fd->get(), &out.st) != 0) continue;
    // The name the kernel has for what was opened: canonical, and inside
    // the root it was opened beneath.
    absl::StatusOr<std::string> real = FileAccess::PathOf(fd->get());
    if (!real.ok()) return real.status();
    out.path = *std::move(real);
    if (!Inside(out.path, /*given_too=*/false)) {
      // The root directory itself was moved since the server started.
      return WithReason(
          absl::PermissionDeniedError(absl::StrCat(
              noun, " '", requested, "' resolves outside the server's roots (",
              DescribeRoots(), "): was a root moved?")),
          ErrorReason::kOutsideRoots, {{"path", std::string(requested)}});
    }
    if (!S_ISREG(out.st.st_mode) && !S_ISDIR(out.st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          noun, " '", requested,
          "' is not a regular file or directory (a device, FIFO or socket)"));
    }
    return out;
  }
  for (const std::string& b : backed) {
    absl::StatusOr<Resolved> r = ResolveInBacking(b);
    if (r.ok() || !absl::IsNotFound(r.status())) return r;
  }
  if (!remote_roots_.empty() && requested.front() != '/') {
    return ResolveBeneathRemoteRoots(requested, noun);
  }
  if (!any_inside) {
    return WithReason(
        absl::PermissionDeniedError(absl::StrCat(
            noun, " '", requested, "' is outside the server's roots (",
            DescribeRoots(), ")")),
        ErrorReason::kOutsideRoots, {{"path", std::string(requested)}});
  }
  absl::Status missing = absl::NotFoundError(absl::StrCat(
      noun, " '", requested, "' not found",
      unrestricted_
          ? std::string()
          : absl::StrCat(" under the server's roots (", DescribeRoots(), ")")));
  // Only a checkpoint's absence is CHECKPOINT_NOT_FOUND; another file is
  // the generic NOT_FOUND naming its path.
  if (noun == kCheckpointNoun) {
    return WithReason(std::move(missing), ErrorReason::kCheckpointNotFound,
                      {{"checkpoint", std::string(requested)}});
  }
  return WithReason(std::move(missing), ErrorReason::kNotFound,
                    {{"path", std::string(requested)}});
}

}  // namespace tensormorph
