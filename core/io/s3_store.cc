#include "core/io/s3_store.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/io/object_url.h"

namespace tensormorph {
namespace {

// SHA-256 of the empty body: what a GET's payload hash is.
constexpr char kEmptyPayloadHash[] =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

absl::Status ListError(absl::string_view display, absl::string_view rule) {
  return absl::DataLossError(
      absl::StrCat("ListObjectsV2 of '", display, "': ", rule));
}

}  // namespace

absl::StatusOr<S3ListPage> ParseListObjectsV2(absl::string_view display,
                                              absl::string_view xml) {
  absl::StatusOr<XmlElement> root = ParseXml(xml);
  if (!root.ok()) return ListError(display, root.status().message());
  if (root->name != "ListBucketResult") {
    return ListError(display, absl::StrCat("root element <", root->name,
                                           ">, expected <ListBucketResult>"));
  }
  S3ListPage page;
  for (const XmlElement& c : root->children) {
    if (c.name != "Contents") continue;
    const XmlElement* key = c.Child("Key");
    const XmlElement* size = c.Child("Size");
    if (key == nullptr || key->text.empty()) {
      return ListError(display, "a Contents without a Key");
    }
    S3ObjectInfo info;
    info.key = key->text;
    absl::string_view digits =
        size == nullptr ? "" : absl::StripAsciiWhitespace(size->text);
    bool decimal = !digits.empty() && digits.size() <= 20;
    for (char d : digits) decimal = decimal && absl::ascii_isdigit(d);
    if (!decimal || !absl::SimpleAtoi(digits, &info.size)) {
      return ListError(display, absl::StrCat("Contents '", info.key,
                                             "': Size is no decimal uint64"));
    }
    if (const XmlElement* e = c.Child("ETag")) info.etag = e->text;
    if (const XmlElement* m = c.Child("LastModified"))
      info.last_modified = m->text;
    page.objects.push_back(std::move(info));
  }
  if (const XmlElement* t = root->Child("IsTruncated")) {
    absl::string_view v = absl::StripAsciiWhitespace(t->text);
    if (v != "true" && v != "false") {
      return ListError(display, "IsTruncated is neither true nor false");
    }
    page.truncated = v == "true";
  }
  if (page.truncated) {
    const XmlElement* next = root->Child("NextContinuationToken");
    if (next == nullptr || next->text.empty()) {
      return ListError(display, "truncated without a NextContinuationToken");
    }
    page.next_token = next->text;
  }
  return page;
}

S3Client::S3Client(std::shared_ptr<const HttpClient> http, AwsSettings settings)
    : http_(std::move(http)), settings_(std::move(settings)) {
  if (!settings_.access_key.empty()) {
    auto creds = std::make_shared<SigV4Credentials>();
    creds->provider = absl::StrCat("aws:amz:", settings_.region, ":s3");
    creds->access_key = settings_.access_key;
    creds->secret_key = settings_.secret_key;
    sigv4_ = std::move(creds);
  }
}

std::string S3Client::BucketUrl(const std::string& bucket) const {
  if (!settings_.endpoint.empty()) {
    return absl::StrCat(settings_.endpoint, "/", bucket, "/");
  }
  if (absl::StrContains(bucket, '.')) {
    return absl::StrCat("https://s3.", settings_.region, ".amazonaws.com/",
                        bucket, "/");
  }
  return absl::StrCat("https://", bucket, ".s3.", settings_.region,
                      ".amazonaws.com/");
}

std::vector<std::string> S3Client::Headers() const {
  std::vector<std::string> h = {
      absl::StrCat("x-amz-content-sha256: ", kEmptyPayloadHash)};
  if (!settings_.session_token.empty()) {
    h.push_back(
        absl::StrCat("x-amz-security-token: ", settings_.session_token));
  }
  return h;
}

HttpSource S3Client::SourceFor(const std::string& bucket,
                               const std::string& key) const {
  HttpSource source;
  source.url = absl::StrCat(BucketUrl(bucket), PercentEncode(key, true));
  source.display = absl::StrCat("s3://", bucket, "/", key);
  source.headers = Headers();
  source.sigv4 = sigv4_;
  // S3 answers a wrong region with 301: following it would re-sign for
  // another region's host with this one's scope.
  source.follow_redirects = false;
  return source;
}

absl::StatusOr<std::shared_ptr<const HttpObjectReader>> S3Client::Open(
    const std::string& bucket, const std::string& key,
    uint64_t head_bytes) const {
  return HttpObjectReader::Open(http_, SourceFor(bucket, key), head_bytes);
}

absl::StatusOr<std::vector<S3ObjectInfo>> S3Client::List(
    const std::string& bucket, const std::string& prefix, int page_size) const {
  const std::string display = absl::StrCat("s3://", bucket, "/", prefix);
  std::vector<S3ObjectInfo> all;
  absl::flat_hash_set<std::string> tokens_seen;
  std::string token;
  for (int page = 0; page < kMaxListPages; ++page) {
    // Parameters in SigV4's canonical (sorted) order, encoded as it
    // encodes them, so the URL sent is the URL signed.
    std::string query;
    if (!token.empty()) {
      absl::StrAppend(&query,
                      "continuation-token=", PercentEncode(token, false), "&");
    }
    absl::StrAppend(&query, "list-type=2&max-keys=", page_size,
                    "&prefix=", PercentEncode(prefix, false));
    HttpRequest req;
    req.url = absl::StrCat(BucketUrl(bucket), "?", query);
    req.display = display;
    req.headers = Headers();
    req.sigv4 = sigv4_.get();
    absl::StatusOr<HttpResponse> r = http_->Get(req, &list_counters_);
    if (!r.ok()) return r.status();
    if (r->status != 200)
      return HttpStatusToStatus(r->status, display, r->body);
    if (r->body_truncated) {
      return ListError(
          display, absl::StrCat("a page longer than ", req.max_body, " bytes"));
    }
    absl::StatusOr<S3ListPage> parsed = ParseListObjectsV2(display, r->body);
    if (!parsed.ok()) return parsed.status();
    for (S3ObjectInfo& o : parsed->objects) {
      if (!absl::StartsWith(o.key, prefix)) {
        return ListError(display,
                         absl::StrCat("key '", o.key, "' outside the prefix"));
      }
      all.push_back(std::move(o));
    }
    if (!parsed->truncated) return all;
    if (!tokens_seen.insert(parsed->next_token).second) {
      return ListError(display, "a continuation token repeated");
    }
    token = parsed->next_token;
  }
  return ListError(display,
                   absl::StrCat("more than ", kMaxListPages, " pages"));
}

}  // namespace tensormorph
