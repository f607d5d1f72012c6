// S3-compatible object stores: s3://bucket/key read by range with SigV4
// (signed by libcurl), and prefixes listed with ListObjectsV2.
#ifndef TENSORMORPH_CORE_IO_S3_STORE_H_
#define TENSORMORPH_CORE_IO_S3_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/io/aws_config.h"
#include "core/io/http_client.h"
#include "core/io/http_object.h"
#include "core/io/xml_document.h"

namespace tensormorph {

struct S3ObjectInfo {
  std::string key;
  uint64_t size = 0;
  std::string etag;
  std::string last_modified;
};

struct S3ListPage {
  std::vector<S3ObjectInfo> objects;
  bool truncated = false;
  std::string next_token;  // set when truncated
};

// One page of a ListObjectsV2 result document, checked: the root is
// ListBucketResult; every Contents has a non-empty Key and a decimal Size
// (at most 20 digits, no overflow); IsTruncated, when present, is "true" or
// "false"; a truncated page has a non-empty NextContinuationToken.
// Errors: DATA_LOSS naming `display` and the rule (and ParseXml's).
absl::StatusOr<S3ListPage> ParseListObjectsV2(absl::string_view display,
                                              absl::string_view xml);

// Addresses objects as the settings say: beneath a custom endpoint
// path-style (endpoint/bucket/key); else at AWS, virtual-hosted
// (https://bucket.s3.REGION.amazonaws.com/key), or path-style for a bucket
// with a '.' (TLS names cannot hold it). Requests are signed with SigV4 for
// service s3 in the region when there are credentials (with
// x-amz-security-token for a session token and x-amz-content-sha256 of the
// empty body), unsigned when there are none.
// Thread safety: immutable; thread-safe.
class S3Client {
 public:
  static constexpr int kMaxListPages = 100000;

  S3Client(std::shared_ptr<const HttpClient> http, AwsSettings settings);

  // The source of an object; its display is "s3://bucket/key".
  HttpSource SourceFor(const std::string& bucket, const std::string& key) const;

  // Errors: those of HttpObjectReader::Open.
  absl::StatusOr<std::shared_ptr<const HttpObjectReader>> Open(
      const std::string& bucket, const std::string& key,
      uint64_t head_bytes = HttpObjectReader::kDefaultHeadBytes) const;

  // Every object whose key begins with `prefix`, in the server's (key)
  // order, following continuation tokens. `page_size` is max-keys.
  // Errors: those of HttpClient::Get; DATA_LOSS for a malformed page, a
  // continuation token that repeats, or more than kMaxListPages pages.
  absl::StatusOr<std::vector<S3ObjectInfo>> List(const std::string& bucket,
                                                 const std::string& prefix,
                                                 int page_size = 1000) const;

  const AwsSettings& settings() const { return settings_; }
  // Requests and bytes of listings.
  const TransferCounters& list_counters() const { return list_counters_; }

 private:
  std::string BucketUrl(const std::string& bucket) const;  // ends in '/'
  std::vector<std::string> Headers() const;

  std::shared_ptr<const HttpClient> http_;
  AwsSettings settings_;
  std::shared_ptr<const SigV4Credentials> sigv4_;
  mutable TransferCounters list_counters_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_S3_STORE_H_
