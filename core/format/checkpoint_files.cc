#include "core/format/checkpoint_files.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/io/object_url.h"

namespace tensormorph {

absl::StatusOr<const RemoteFiles*> CheckpointFiles::Remote(
    const std::string& url) const {
  if (remote_ == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", RedactUrl(url),
                     "' is a storage URL, and remote storage is not enabled "
                     "here"));
  }
  return remote_.get();
}

std::optional<std::string> CheckpointFiles::BackingOf(
    const std::string& path) const {
  if (backings_ == nullptr || RemoteFiles::IsUrl(path)) return std::nullopt;
  return backings_->UrlOf(path);
}

absl::StatusOr<struct stat> CheckpointFiles::Stat(
    const std::string& path) const {
  if (!RemoteFiles::IsUrl(path)) {
    absl::StatusOr<struct stat> local = access_->Stat(path);
    std::optional<std::string> url = Fallback(path, local);
    return url ? Stat(*url) : local;
  }
  absl::StatusOr<const RemoteFiles*> r = Remote(path);
  if (!r.ok()) return r.status();
  return (*r)->Stat(path);
}

absl::StatusOr<std::vector<std::string>> CheckpointFiles::ListDirectory(
    const std::string& path) const {
  if (RemoteFiles::IsUrl(path)) {
    absl::StatusOr<const RemoteFiles*> r = Remote(path);
    if (!r.ok()) return r.status();
    return (*r)->ListDirectory(path);
  }
  absl::StatusOr<std::vector<std::string>> local = access_->ListDirectory(path);
  std::optional<std::string> url = BackingOf(path);
  if (!url || (!local.ok() && !absl::IsNotFound(local.status()))) return local;
  // A directory the disk holds part of (or none of): what either holds.
  absl::StatusOr<std::vector<std::string>> backed = ListDirectory(*url);
  if (!backed.ok() && (!absl::IsNotFound(backed.status()) || !local.ok())) {
    return local.ok() ? backed.status() : local.status();
  }
  std::vector<std::string> names =
      local.ok() ? *std::move(local) : std::vector<std::string>();
  if (backed.ok()) {
    for (std::string& name : *backed) {
      // An object key may hold such a segment; as a local name it would
      // step out of the directory.
      if (name.empty() || name == "." || name == "..") continue;
      names.push_back(std::move(name));
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

absl::StatusOr<std::shared_ptr<const MappedFile>> CheckpointFiles::Map(
    const std::string& path) const {
  if (!RemoteFiles::IsUrl(path)) {
    absl::StatusOr<std::shared_ptr<const MappedFile>> local =
        MappedFile::Open(path, *access_);
    std::optional<std::string> url = Fallback(path, local);
    return url ? Map(*url) : local;
  }
  absl::StatusOr<const RemoteFiles*> r = Remote(path);
  if (!r.ok()) return r.status();
  return (*r)->Map(path);
}

absl::StatusOr<FileIdentity> CheckpointFiles::Identity(
    const std::string& path) const {
  if (!RemoteFiles::IsUrl(path)) {
    absl::StatusOr<FileIdentity> local = StatFile(path, *access_);
    std::optional<std::string> url = Fallback(path, local);
    return url ? Identity(*url) : local;
  }
  absl::StatusOr<std::shared_ptr<const MappedFile>> m = Map(path);
  if (!m.ok()) return m.status();
  return (*m)->identity();
}

absl::StatusOr<std::string> CheckpointFiles::ReadWhole(
    const std::string& path, uint64_t max_bytes) const {
  if (!RemoteFiles::IsUrl(path)) {
    absl::StatusOr<std::string> local =
        ReadWholeFile(path, max_bytes, *access_);
    std::optional<std::string> url = Fallback(path, local);
    return url ? ReadWhole(*url, max_bytes) : local;
  }
  absl::StatusOr<const RemoteFiles*> r = Remote(path);
  if (!r.ok()) return r.status();
  return (*r)->ReadWhole(path, max_bytes);
}

void CheckpointFiles::Prefetch(const std::vector<std::string>& paths) const {
  if (remote_ == nullptr) return;
  std::vector<std::string> urls;
  for (const std::string& p : paths) {
    if (RemoteFiles::IsUrl(p)) {
      urls.push_back(p);
    } else if (std::optional<std::string> url = BackingOf(p)) {
      // One stat: a file on the disk costs no request.
      if (absl::IsNotFound(access_->Stat(p).status())) {
        urls.push_back(*std::move(url));
      }
    }
  }
  // The first block holds a safetensors length and a header within it.
  if (!urls.empty()) remote_->Prefetch(urls, RemoteMirror::kBlockBytes);
}

}  // namespace tensormorph
