#include "core/io/object_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/io/hf_hub.h"
#include "core/io/http_object.h"
#include "core/io/local_object.h"
#include "core/io/s3_store.h"

namespace tensormorph {

ObjectStore::ObjectStore(StorageOptions options)
    : options_(std::move(options)),
      http_(std::make_shared<HttpClient>(options_.http)),
      aws_(absl::UnknownError("unread")),
      hub_(absl::UnknownError("unread")) {}

absl::StatusOr<std::shared_ptr<const ObjectStore>> ObjectStore::Create(
    StorageOptions options) {
  auto store =
      std::shared_ptr<ObjectStore>(new ObjectStore(std::move(options)));
  if (store->options_.cache) {
    absl::StatusOr<std::shared_ptr<BlockCache>> cache =
        BlockCache::Create(*store->options_.cache);
    if (!cache.ok()) return cache.status();
    store->cache_ = *std::move(cache);
  }
  return std::shared_ptr<const ObjectStore>(std::move(store));
}

absl::StatusOr<AwsSettings> ObjectStore::Aws() const {
  std::call_once(aws_once_, [&] { aws_ = LoadAwsSettings(options_.env); });
  return aws_;
}

absl::StatusOr<HubSettings> ObjectStore::Hub() const {
  std::call_once(hub_once_, [&] { hub_ = LoadHubSettings(options_.env); });
  return hub_;
}

std::shared_ptr<const ObjectReader> ObjectStore::Cached(
    std::shared_ptr<const ObjectReader> reader) const {
  return cache_ ? cache_->Wrap(std::move(reader)) : std::move(reader);
}

absl::StatusOr<std::shared_ptr<const ObjectReader>> ObjectStore::Open(
    absl::string_view text) const {
  absl::StatusOr<ObjectUrl> url = ParseObjectUrl(text);
  if (!url.ok()) return url.status();
  switch (url->scheme) {
    case UrlScheme::kLocal: {
      auto local = LocalObjectReader::Open(url->path, *options_.access);
      if (!local.ok()) return local.status();
      return std::shared_ptr<const ObjectReader>(*std::move(local));
    }
    case UrlScheme::kHttp:
    case UrlScheme::kHttps: {
      HttpSource source;
      source.url = url->http_url;
      source.display = url->display;
      auto r =
          HttpObjectReader::Open(http_, std::move(source), options_.head_bytes);
      if (!r.ok()) return r.status();
      return Cached(*std::move(r));
    }
    case UrlScheme::kS3: {
      if (url->key.empty() || url->key.back() == '/') {
        return absl::InvalidArgumentError(absl::StrCat(
            "storage URL '", url->display, "': names a prefix, not an object"));
      }
      absl::StatusOr<AwsSettings> aws = Aws();
      if (!aws.ok()) return aws.status();
      auto r = S3Client(http_, *aws)
                   .Open(url->bucket, url->key, options_.head_bytes);
      if (!r.ok()) return r.status();
      return Cached(*std::move(r));
    }
    case UrlScheme::kHf: {
      if (url->repo_path.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("storage URL '", url->display,
                         "': names a repository, not a file"));
      }
      absl::StatusOr<HubSettings> hub = Hub();
      if (!hub.ok()) return hub.status();
      auto r = HttpObjectReader::Open(http_, HubSource(*hub, *url),
                                      options_.head_bytes);
      if (!r.ok()) return r.status();
      return Cached(*std::move(r));
    }
  }
  return absl::InternalError("unhandled URL scheme");
}

absl::StatusOr<std::vector<ObjectInfo>> ObjectStore::List(
    absl::string_view text) const {
  absl::StatusOr<ObjectUrl> url = ParseObjectUrl(text);
  if (!url.ok()) return url.status();
  std::vector<ObjectInfo> out;
  switch (url->scheme) {
    case UrlScheme::kLocal: {
      auto names = options_.access->ListDirectory(url->path);
      if (!names.ok()) return names.status();
      std::sort(names->begin(), names->end());
      for (const std::string& name : *names) {
        const std::string path = absl::StrCat(url->path, "/", name);
        absl::StatusOr<FileIdentity> id = StatFile(path, *options_.access);
        if (!id.ok()) continue;  // a directory or a special file
        out.push_back({path, id->size});
      }
      return out;
    }
    case UrlScheme::kS3: {
      absl::StatusOr<AwsSettings> aws = Aws();
      if (!aws.ok()) return aws.status();
      auto listed = S3Client(http_, *aws).List(url->bucket, url->key);
      if (!listed.ok()) return listed.status();
      for (const S3ObjectInfo& o : *listed) {
        out.push_back({absl::StrCat("s3://", url->bucket, "/", o.key), o.size});
      }
      return out;
    }
    default:
      return absl::UnimplementedError(absl::StrCat(
          "storage URL '", url->display,
          "': listing is for s3:// prefixes and local directories"));
  }
}

}  // namespace tensormorph
