// Where a checkpoint's files are read from: local paths through a
// FileAccess (beneath a server's roots), URLs through RemoteFiles, and a
// local path beneath a backed root (root_backing.h) from its backing URL
// when the disk lacks it. The checkpoint opener asks one object for every
// stat, listing, mapping and small read, so a sharded checkpoint in an S3
// prefix or on the Hub, or with some shards on the disk and the rest in an
// object store, opens exactly as one in a directory.
#ifndef TENSORMORPH_CORE_FORMAT_CHECKPOINT_FILES_H_
#define TENSORMORPH_CORE_FORMAT_CHECKPOINT_FILES_H_

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/io/file_access.h"
#include "core/io/mapped_file.h"
#include "core/io/remote_files.h"
#include "core/io/root_backing.h"

namespace tensormorph {

// Thread safety: immutable; every method is thread-safe.
class CheckpointFiles {
 public:
  // `remote` may be null: URLs are then refused. `backings` may be null:
  // no local path is backed. A backing is read through `remote`.
  CheckpointFiles(std::shared_ptr<const FileAccess> access,
                  std::shared_ptr<const RemoteFiles> remote,
                  std::shared_ptr<const RootBackings> backings = nullptr)
      : access_(std::move(access)),
        remote_(std::move(remote)),
        backings_(std::move(backings)) {}

  // Each as FileAccess / MappedFile / StatFile / ReadWholeFile does for a
  // local path, and RemoteFiles for a URL. A local path beneath a backed
  // root that the disk lacks (NOT_FOUND, never a refusal) is answered for
  // its backing URL instead; the local file wins whenever it is there. A
  // backed directory lists the names of both, each once, sorted.
  // Errors: theirs (for a backed path that neither holds: the backing's
  // NOT_FOUND, naming the URL); INVALID_ARGUMENT for a URL without remote
  // storage.
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
  // Before a run of opens of `paths`: remote ones, and the backing URLs of
  // backed ones the disk lacks, are opened in parallel
  // (RemoteFiles::Prefetch).
  void Prefetch(const std::vector<std::string>& paths) const;

  // The URL backing local `path` (RootBackings::UrlOf); nullopt for a URL,
  // or a path beneath no backed root, or without backings.
  std::optional<std::string> BackingOf(const std::string& path) const;

  const FileAccess& access() const { return *access_; }
  const std::shared_ptr<const RootBackings>& backings() const {
    return backings_;
  }

 private:
  absl::StatusOr<const RemoteFiles*> Remote(const std::string& url) const;
  // `path` as a local read would have it, or else, when the disk lacks it
  // (`local` is NOT_FOUND) and a backing URL maps it, that URL: what a
  // method answers for. nullopt: answer `local`.
  template <typename T>
  std::optional<std::string> Fallback(const std::string& path,
                                      const absl::StatusOr<T>& local) const {
    if (local.ok() || !absl::IsNotFound(local.status())) return std::nullopt;
    return BackingOf(path);
  }

  std::shared_ptr<const FileAccess> access_;
  std::shared_ptr<const RemoteFiles> remote_;
  std::shared_ptr<const RootBackings> backings_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_FORMAT_CHECKPOINT_FILES_H_
