// Where a checkpoint's files are read from: local paths through a
// FileAccess (beneath a server's roots), URLs through RemoteFiles. The
// checkpoint opener asks one object for every stat, listing, mapping and
// small read, so a sharded checkpoint in an S3 prefix or on the Hub opens
// exactly as one in a directory.
#ifndef TENSORMORPH_CORE_FORMAT_CHECKPOINT_FILES_H_
#define TENSORMORPH_CORE_FORMAT_CHECKPOINT_FILES_H_

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/io/file_access.h"
#include "core/io/mapped_file.h"
#include "core/io/remote_files.h"

namespace tensormorph {

// Thread safety: immutable; every method is thread-safe.
class CheckpointFiles {
 public:
  // `remote` may be null: URLs are then refused.
  CheckpointFiles(std::shared_ptr<const FileAccess> access,
                  std::shared_ptr<const RemoteFiles> remote)
      : access_(std::move(access)), remote_(std::move(remote)) {}

  // Each as FileAccess / MappedFile / StatFile / ReadWholeFile does for a
  // local path, and RemoteFiles for a URL.
  // Errors: theirs; INVALID_ARGUMENT for a URL without remote storage.
  absl::StatusOr<struct stat> Stat(const std::string& path) const;
  absl::StatusOr<std::vector<std::string>> ListDirectory(
      const std::string& path) const;
  absl::StatusOr<std::shared_ptr<const MappedFile>> Map(
      const std::string& path) const;
  // A URL's identity is its size (its version is held by conditional
  // reads: MappedFile::remote()).
  absl::StatusOr<FileIdentity> Identity(const std::string& path) const;
  absl::StatusOr<std::string> ReadWhole(const std::string& path,
                                        uint64_t max_bytes) const;
  // Before a run of opens of `paths`: remote ones are opened in parallel
  // (RemoteFiles::Prefetch). Nothing for local paths.
  void Prefetch(const std::vector<std::string>& paths) const;

  const FileAccess& access() const { return *access_; }

 private:
  absl::StatusOr<const RemoteFiles*> Remote(const std::string& url) const;

  std::shared_ptr<const FileAccess> access_;
  std::shared_ptr<const RemoteFiles> remote_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_FORMAT_CHECKPOINT_FILES_H_
