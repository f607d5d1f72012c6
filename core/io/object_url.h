// Where an object lives, parsed once: the one place that reads a storage URL
// (a plain path, file://, http://, https://, s3://bucket/key,
// hf://org/repo[@revision]/path) and the one place that makes it safe to
// print.
#ifndef TENSORMORPH_CORE_IO_OBJECT_URL_H_
#define TENSORMORPH_CORE_IO_OBJECT_URL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensormorph {

enum class UrlScheme { kLocal, kHttp, kHttps, kS3, kHf };

// A parsed storage URL. Which fields are set depends on `scheme`; the rest
// stay empty.
struct ObjectUrl {
  UrlScheme scheme = UrlScheme::kLocal;
  // kLocal: the path (a file:// URL's path, or the text as given).
  std::string path;
  // kHttp, kHttps: the URL as given (it may carry a presigned query string:
  // print `display` instead).
  std::string http_url;
  // kS3: the bucket, and the key without the leading '/' (empty for the
  // bucket itself; a key ending in '/' names a prefix).
  std::string bucket;
  std::string key;
  // kHf: "org/repo", the revision ("main" when none is given; '/' inside a
  // revision is written %2F, as in the Hub's own URLs) and the path in the
  // repository (empty for the repository itself).
  std::string repo;
  std::string revision;
  std::string repo_path;
  // What messages and logs name: the text without user information, query
  // string or fragment, so a presigned URL's signature never reaches them.
  std::string display;
};

// Parses `text`. Anything without "://" is a local path; file:// URLs must
// be absolute ("file:///x").
// Errors: INVALID_ARGUMENT naming the rule and the displayable text: empty;
// a NUL or control byte; an unknown scheme; an http(s) URL without a host,
// with credentials in it ("user:pass@"), or with whitespace; an s3 bucket
// that is not 3-63 of [a-z0-9.-] beginning and ending alphanumeric; an s3
// URL with a query string; an hf URL without org/repo, with a name outside
// [A-Za-z0-9._-] or one that is "." or "..", an empty '@' revision, or a
// path with empty, "." or ".." segments, a backslash, '?' or '#'.
absl::StatusOr<ObjectUrl> ParseObjectUrl(absl::string_view text);

// `url` without user information, query string and fragment: what may be
// printed of any URL (presigned URLs carry their signature in the query).
std::string RedactUrl(absl::string_view url);

// Percent-encodes everything but RFC 3986's unreserved characters
// (A-Z a-z 0-9 - . _ ~), and '/' too when `keep_slash` (paths). This is
// also SigV4's canonical encoding, so a URL built with it is signed as sent.
std::string PercentEncode(absl::string_view s, bool keep_slash);

// "scheme://host[:port]" of an absolute http(s) URL, lowercased; empty when
// `url` is none. Credentials are sent to one origin only (hf_hub.h).
std::string OriginOf(absl::string_view url);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_OBJECT_URL_H_
