// An object served over HTTP(S), read by byte range: plain and presigned
// URLs, and the transport of S3 objects (s3_store.h) and Hub files
// (hf_hub.h).
#ifndef TENSORMORPH_CORE_IO_HTTP_OBJECT_H_
#define TENSORMORPH_CORE_IO_HTTP_OBJECT_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/io/http_client.h"
#include "core/io/object_reader.h"

namespace tensormorph {

// How to reach one object and what to send with each request.
struct HttpSource {
  std::string url;      // absolute http(s); may carry a presigned query
  std::string display;  // what messages name (never a secret)
  std::vector<std::string> headers;               // sent with every request
  std::shared_ptr<const SigV4Credentials> sigv4;  // S3: sign every request
  std::string bearer_token;  // the Hub: sent to bearer_origin only
  std::string bearer_origin;
  // Follow redirects at open (the Hub's resolve answers 302 to its CDN);
  // reads then go to where the redirects led.
  bool follow_redirects = true;
};

// Opening costs one request: GET of bytes [0, head_bytes) (following
// redirects when the source says so), which yields the size (from
// Content-Range, or a 200's length from a server without ranges), the
// identity (ETag, else Last-Modified, and the size; on the Hub the
// X-Linked-Etag of the redirect, which names the file's content) and the
// object's first bytes, kept: a read within them costs nothing (a
// safetensors header, GGUF metadata).
//
// When open followed a redirect, reads go where it led; a read refused
// there (403 or 404: a signed CDN URL expired) resolves the object again
// once, from its source URL, and reads from the new location when the
// identity is the same, else ends ABORTED.
//
// When open followed a redirect, reads go where it led; a read refused
// there (403 or 404: a signed CDN URL expired) resolves the object again
// once, from its source URL, and reads from the new location when the
// identity is the same, else ends ABORTED.
//
// Each later read is one request of exactly its range, conditional on the
// identity: If-Match with a strong ETag of the server that answers, else
// If-Unmodified-Since with the Last-Modified (an object with neither is
// read unconditioned, and only its size is checked). Every answer is
// checked: a 206 whose Content-Range is another range is DATA_LOSS, one
// whose total or ETag differs from open's is ABORTED, as is a 412; a body
// shorter or longer than asked is DATA_LOSS naming expected and actual
// bytes; a 200 (the server ignored the range) is accepted only for a read
// from offset 0 (its first bytes, the transfer then stopped), else
// DATA_LOSS.
//
// Thread safety: thread-safe; reads run concurrently.
class HttpObjectReader final : public ObjectReader {
 public:
  static constexpr uint64_t kDefaultHeadBytes = uint64_t{64} << 10;

  // Errors: those of HttpClient::Get (PERMISSION_DENIED, NOT_FOUND,
  // UNAVAILABLE, ...) naming source.display; DATA_LOSS when the answer
  // contradicts itself (a Content-Range that is not of the range asked, a
  // body of another length); FAILED_PRECONDITION when no size can be
  // learnt (a 200 without Content-Length to a range request).
  // REQUIRES: head_bytes >= 1.
  static absl::StatusOr<std::shared_ptr<const HttpObjectReader>> Open(
      std::shared_ptr<const HttpClient> client, HttpSource source,
      uint64_t head_bytes = kDefaultHeadBytes);

  const std::string& display() const override { return source_.display; }
  absl::Status ReadAt(uint64_t offset, uint64_t length,
                      char* out) const override;
  ReadStats stats() const override;

  // Where reads go now (after redirects). May be a presigned URL: do not
  // print it.
  std::string read_url() const { return CurrentTarget().url; }

 private:
  // Where reads go and what they are conditional on.
  struct Target {
    std::string url;
    bool sign = false;                // same origin as the source (S3)
    std::string if_match;             // a strong ETag of url's server
    std::string if_unmodified_since;  // when there is none
  };
  struct Resolved {
    ObjectIdentity identity;
    Target target;
    std::string head;
  };
  // The GET of bytes [0, head_bytes) that opening is, and what it says.
  static absl::StatusOr<Resolved> Resolve(const HttpClient& client,
                                          const HttpSource& source,
                                          uint64_t head_bytes,
                                          TransferCounters* counters);
  HttpObjectReader(ObjectIdentity identity,
                   std::shared_ptr<const HttpClient> client, HttpSource source);
  Target CurrentTarget() const;
  // Resolves the source again after `failed` was refused; ABORTED when the
  // identity changed.
  absl::Status Reresolve(const Target& failed) const;
  HttpRequest RequestFor(const Target& target, uint64_t offset, uint64_t length,
                         char* out) const;
  absl::Status CheckAnswer(const Target& target, const HttpResponse& r,
                           uint64_t offset, uint64_t length) const;

  std::shared_ptr<const HttpClient> client_;
  HttpSource source_;
  mutable std::mutex mu_;
  mutable Target target_;  // guarded by mu_
  std::string head_;       // bytes [0, head_.size()) at open
  mutable TransferCounters counters_;
};

// Parses "bytes FIRST-LAST/TOTAL" (TOTAL may be "*": then *total is
// unset, returned as UINT64_MAX) or "bytes */TOTAL" (first = last =
// UINT64_MAX). False when malformed.
bool ParseContentRange(absl::string_view value, uint64_t* first, uint64_t* last,
                       uint64_t* total);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_HTTP_OBJECT_H_
