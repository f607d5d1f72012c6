#include "core/format/checkpoint_files.h"

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

absl::StatusOr<struct stat> CheckpointFiles::Stat(
    const std::string& path) const {
  if (!RemoteFiles::IsUrl(path)) return access_->Stat(path);
  absl::StatusOr<const RemoteFiles*> r = Remote(path);
  if (!r.ok()) return r.status();
  return (*r)->Stat(path);
}

absl::StatusOr<std::vector<std::string>> CheckpointFiles::ListDirectory(
    const std::string& path) const {
  if (!RemoteFiles::IsUrl(path)) return access_->ListDirectory(path);
  absl::StatusOr<const RemoteFiles*> r = Remote(path);
  if (!r.ok()) return r.status();
  return (*r)->ListDirectory(path);
}

absl::StatusOr<std::shared_ptr<const MappedFile>> CheckpointFiles::Map(
    const std::string& path) const {
  if (!RemoteFiles::IsUrl(path)) return MappedFile::Open(path, *access_);
  absl::StatusOr<const RemoteFiles*> r = Remote(path);
  if (!r.ok()) return r.status();
  return (*r)->Map(path);
}

absl::StatusOr<FileIdentity> CheckpointFiles::Identity(
    const std::string& path) const {
  if (!RemoteFiles::IsUrl(path)) return StatFile(path, *access_);
  absl::StatusOr<std::shared_ptr<const MappedFile>> m = Map(path);
  if (!m.ok()) return m.status();
  return (*m)->identity();
}

absl::StatusOr<std::string> CheckpointFiles::ReadWhole(
    const std::string& path, uint64_t max_bytes) const {
  if (!RemoteFiles::IsUrl(path)) {
    return ReadWholeFile(path, max_bytes, *access_);
  }
  absl::StatusOr<const RemoteFiles*> r = Remote(path);
  if (!r.ok()) return r.status();
  return (*r)->ReadWhole(path, max_bytes);
}

void CheckpointFiles::Prefetch(const std::vector<std::string>& paths) const {
  if (remote_ == nullptr) return;
  std::vector<std::string> urls;
  for (const std::string& p : paths) {
    if (RemoteFiles::IsUrl(p)) urls.push_back(p);
  }
  // The first block holds a safetensors length and a header within it.
  if (!urls.empty()) remote_->Prefetch(urls, RemoteMirror::kBlockBytes);
}

}  // namespace tensormorph
