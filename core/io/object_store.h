// The storage layer's entry point: opens an object by path or URL, from
// whichever storage holds it, as an ObjectReader (object_reader.h), like
// LevelDB's Env or a tensorstore kvstore.
#ifndef TENSORMORPH_CORE_IO_OBJECT_STORE_H_
#define TENSORMORPH_CORE_IO_OBJECT_STORE_H_

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/io/aws_config.h"
#include "core/io/block_cache.h"
#include "core/io/environment.h"
#include "core/io/file_access.h"
#include "core/io/hf_hub.h"
#include "core/io/http_client.h"
#include "core/io/object_reader.h"
#include "core/io/object_url.h"

namespace tensormorph {

struct StorageOptions {
  // With $SSL_CERT_FILE and $HTTP_PROXY of the process (see
  // HttpOptions::FromEnvironment).
  HttpOptions http = HttpOptions::FromEnvironment(ProcessEnvironment());
  // Remote objects are read through a block cache when set (local files
  // never are: they are mapped).
  std::optional<BlockCacheOptions> cache;
  // The first bytes fetched with the request that opens a remote object
  // (HttpObjectReader): a header within them costs no further request.
  uint64_t head_bytes = HttpObjectReader::kDefaultHeadBytes;
  // Where variables ($AWS_*, $HF_*, $HOME) are read; the process's
  // environment by default.
  EnvLookup env = ProcessEnvironment();
  // Where local paths may be opened.
  std::shared_ptr<const FileAccess> access = FileAccess::Anywhere();
};

struct ObjectInfo {
  std::string url;  // openable with Open
  uint64_t size = 0;
};

// Thread safety: thread-safe. Settings of a storage (AWS's, the Hub's) are
// read from the environment the first time that storage is used, so a
// malformed ~/.aws/config fails s3:// opens only.
class ObjectStore {
 public:
  // Errors: those of BlockCache::Create.
  static absl::StatusOr<std::shared_ptr<const ObjectStore>> Create(
      StorageOptions options);

  // Opens `url` (object_url.h's forms) and takes its size and identity.
  // Errors: ParseObjectUrl's INVALID_ARGUMENT; for local paths those of
  // MappedFile::Open (and of the FileAccess); for remote ones those of
  // HttpObjectReader::Open, LoadAwsSettings and LoadHubSettings; an s3 URL
  // without a key or an hf URL without a path is INVALID_ARGUMENT.
  absl::StatusOr<std::shared_ptr<const ObjectReader>> Open(
      absl::string_view url) const;

  // The objects beneath a prefix: an s3://bucket/prefix (every key that
  // begins with it), or a local directory (its regular files, sorted).
  // Errors: as Open's; UNIMPLEMENTED for http(s) and hf URLs (neither has
  // a listing protocol; the Hub's API is for later).
  absl::StatusOr<std::vector<ObjectInfo>> List(absl::string_view url) const;

  const std::shared_ptr<BlockCache>& cache() const { return cache_; }
  const std::shared_ptr<const HttpClient>& http() const { return http_; }

 private:
  explicit ObjectStore(StorageOptions options);
  absl::StatusOr<AwsSettings> Aws() const;
  absl::StatusOr<HubSettings> Hub() const;
  std::shared_ptr<const ObjectReader> Cached(
      std::shared_ptr<const ObjectReader> reader) const;

  StorageOptions options_;
  std::shared_ptr<const HttpClient> http_;
  std::shared_ptr<BlockCache> cache_;
  mutable std::once_flag aws_once_;
  mutable absl::StatusOr<AwsSettings> aws_;
  mutable std::once_flag hub_once_;
  mutable absl::StatusOr<HubSettings> hub_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_OBJECT_STORE_H_
