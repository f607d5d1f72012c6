// Files of checkpoints that live in remote storage (HTTP(S), S3, the Hub),
// seen the way a checkpoint opener sees local files: stat, list, map, read
// whole. A mapped remote file is a RemoteMirror, so the format readers
// parse headers and decoders read values through one span, as for a local
// mapping, and only the bytes they touch are fetched.
#ifndef TENSORMORPH_CORE_IO_REMOTE_FILES_H_
#define TENSORMORPH_CORE_IO_REMOTE_FILES_H_

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/io/mapped_file.h"
#include "core/io/object_store.h"
#include "core/io/remote_mirror.h"

namespace tensormorph {

struct RemoteFilesOptions {
  StorageOptions storage;
  // The RAM that fetched bytes of every remote file may hold at once
  // (MirrorBudget).
  uint64_t budget_bytes = uint64_t{1} << 30;
  // URL prefixes that may be opened (a server's remote roots), each ending
  // in '/'. Empty: any URL.
  std::vector<std::string> roots;
  // Objects opened at once by Prefetch.
  int parallel_opens = 16;
};

// Thread safety: thread-safe.
class RemoteFiles {
 public:
  // Errors: those of ObjectStore::Create and MirrorBudget::Create;
  // INVALID_ARGUMENT for a root that is no URL or does not end in '/'.
  static absl::StatusOr<std::shared_ptr<const RemoteFiles>> Create(
      RemoteFilesOptions options);

  // Whether `path` is a URL ("scheme://..."), which a RemoteFiles opens,
  // rather than a local path.
  static bool IsUrl(absl::string_view path);

  // S_IFREG with st_size for an object; S_IFDIR for a directory: a URL
  // ending in '/', an S3 prefix that has keys beneath it, a Hub repository
  // (hf://org/repo). Nothing else of the struct is meaningful.
  // Errors: PERMISSION_DENIED outside the roots; NOT_FOUND; those of
  // ObjectStore::Open.
  absl::StatusOr<struct stat> Stat(absl::string_view url) const;

  // The names directly beneath a directory URL. S3 lists its prefix. HTTP
  // and the Hub have no listing (the Hub's API is not read): the names a
  // loader tries (the safetensors index, model.safetensors, the configs)
  // are probed, each an open of its own.
  // Errors: as Stat's.
  absl::StatusOr<std::vector<std::string>> ListDirectory(
      absl::string_view url) const;

  // The object mirrored: bytes fetched as they are read.
  // Errors: as Stat's; INVALID_ARGUMENT for a directory.
  absl::StatusOr<std::shared_ptr<const MappedFile>> Map(
      absl::string_view url) const;

  // All of a small object (an index, a config).
  // Errors: as Map's; DATA_LOSS when over `max_bytes`, naming both.
  absl::StatusOr<std::string> ReadWhole(absl::string_view url,
                                        uint64_t max_bytes) const;

  // Opens `urls` on parallel_opens threads and fetches each one's first
  // `head_bytes`, so that the Stat and Map that follow for each cost no
  // further request (a listing of hundreds of shards waits for one round
  // trip per parallel_opens shards, not per shard). Errors are left for
  // those calls to report.
  void Prefetch(const std::vector<std::string>& urls,
                uint64_t head_bytes) const;

  const ObjectStore& store() const { return *store_; }
  const MirrorBudget& budget() const { return *budget_; }

 private:
  RemoteFiles(RemoteFilesOptions options,
              std::shared_ptr<const ObjectStore> store,
              std::shared_ptr<MirrorBudget> budget)
      : options_(std::move(options)),
        store_(std::move(store)),
        budget_(std::move(budget)) {}
  // PERMISSION_DENIED unless `url` lies beneath a root.
  absl::Status CheckBeneathRoots(absl::string_view url) const;
  absl::StatusOr<std::shared_ptr<const MappedFile>> MapUncached(
      absl::string_view url) const;

  RemoteFilesOptions options_;
  std::shared_ptr<const ObjectStore> store_;
  std::shared_ptr<MirrorBudget> budget_;
  // The files mapped (or found absent) in the last seconds, so that a
  // Stat, the Map after it and a Prefetch before them share one request.
  // Short-lived: a later open must see a replaced object's new version.
  static constexpr size_t kRecentFiles = 4096;
  static constexpr std::chrono::seconds kRecentFor{5};
  struct Recent {
    absl::StatusOr<std::shared_ptr<const MappedFile>> file;  // or NOT_FOUND
    std::chrono::steady_clock::time_point opened;
  };
  mutable std::mutex mu_;
  mutable absl::flat_hash_map<std::string, Recent> recent_;
  mutable std::deque<std::string> recent_order_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_REMOTE_FILES_H_
