// GET requests over libcurl: one pooled easy handle per request in flight,
// byte ranges into the caller's buffer, retries with exponential backoff,
// redirects followed here so that credentials go to one origin only, and
// the one mapping of an HTTP outcome to a Status.
#ifndef TENSORMORPH_CORE_IO_HTTP_CLIENT_H_
#define TENSORMORPH_CORE_IO_HTTP_CLIENT_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/io/environment.h"

namespace tensormorph {

struct HttpOptions {
  // Attempts of one request in all (the first and its retries). Retried:
  // timeouts, refused or dropped connections, a body cut short, HTTP 408,
  // 429 and 5xx.
  int max_attempts = 5;
  // Backoff before retry n (n = 1, 2, ...): initial_backoff * 2^(n-1),
  // capped at max_backoff, with up to 50% random jitter subtracted so that
  // clients that failed together do not retry together.
  // A 429 or 5xx's Retry-After (in seconds) lengthens the wait before the
  // next attempt, up to max_backoff.
  std::chrono::milliseconds initial_backoff{100};
  std::chrono::milliseconds max_backoff{5000};
  // How a wait is waited (tests record them instead); empty: sleep.
  std::function<void(std::chrono::milliseconds)> sleep;
  std::chrono::milliseconds connect_timeout{10000};
  // A transfer that receives nothing for this long is a timeout (retried).
  std::chrono::milliseconds stall_timeout{30000};
  // A whole request (one attempt) that takes longer; 0: no limit.
  std::chrono::milliseconds request_timeout{0};
  int max_redirects = 5;
  // CA bundle for https (CURLOPT_CAINFO); empty: libcurl's default.
  std::string ca_file;
  // Proxy for http:// URLs when set. libcurl reads http_proxy, HTTPS_PROXY,
  // ALL_PROXY and NO_PROXY itself, but not the upper-case HTTP_PROXY (a
  // CGI program could be handed one by its client); FromEnvironment takes
  // it here.
  std::string http_proxy;
  // Hosts that bypass that proxy ($NO_PROXY, $no_proxy: libcurl's syntax).
  std::string no_proxy;
  // Idle easy handles kept (with their connections) for reuse.
  size_t pooled_handles = 16;

  // The defaults with ca_file = $SSL_CERT_FILE, http_proxy = $HTTP_PROXY
  // (when http_proxy, lower case, is unset) and no_proxy = $no_proxy, else
  // $NO_PROXY.
  static HttpOptions FromEnvironment(const EnvLookup& env);
};

// SigV4 signing by libcurl (CURLOPT_AWS_SIGV4).
struct SigV4Credentials {
  std::string provider;  // "aws:amz:REGION:SERVICE"
  std::string access_key;
  std::string secret_key;
};

struct HttpRequest {
  // Absolute http(s) URL; may carry a presigned query string, so messages
  // name `display` instead (RedactUrl(url) when empty).
  std::string url;
  std::string display;
  std::vector<std::string> headers;  // "Name: value"
  // Range: bytes=first-last (inclusive) when set.
  bool has_range = false;
  uint64_t first = 0;
  uint64_t last = 0;
  // Signs every hop whose origin is the first URL's (S3).
  const SigV4Credentials* sigv4 = nullptr;
  // "Authorization: Bearer <token>", sent to `bearer_origin` (OriginOf)
  // only, whichever hop of a redirect chain that is.
  std::string bearer_token;
  std::string bearer_origin;
  bool follow_redirects = false;
  // A 2xx body goes into sink[0, sink_capacity) when sink is set, else into
  // HttpResponse::body up to max_body bytes. Either way more than that ends
  // the transfer with body_truncated set.
  char* sink = nullptr;
  uint64_t sink_capacity = 0;
  uint64_t max_body = uint64_t{16} << 20;
};

struct HttpResponse {
  long status = 0;
  std::string url;  // the URL that answered, after redirects
  // Header fields of the final response, names lower-cased (the last of a
  // repeated field).
  absl::flat_hash_map<std::string, std::string> headers;
  // The header fields of each redirect followed, in order.
  std::vector<absl::flat_hash_map<std::string, std::string>> hops;
  std::string body;         // when no sink (or a non-2xx body, capped)
  uint64_t body_bytes = 0;  // bytes of a 2xx body received
  bool body_truncated = false;
  // "" when absent.
  const std::string& Header(absl::string_view name) const;
};

// Counted by every request, whether it succeeds or not.
struct TransferCounters {
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> retries{0};
};

// Thread safety: thread-safe; requests run concurrently on pooled handles.
class HttpClient {
 public:
  explicit HttpClient(HttpOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  const HttpOptions& options() const { return options_; }

  // Sends GET `request`, retrying as HttpOptions says. Returns the final
  // response when its status is 2xx, 3xx (not followed) or 416; the caller
  // judges its headers and body.
  // Errors, each naming the display URL and never a credential or query
  // string: PERMISSION_DENIED (401, 403; with S3's error code when the
  // body has one), NOT_FOUND (404, 410), ABORTED (412: the object is no
  // longer the version the request was conditional on), UNAVAILABLE (what
  // is retried, once attempts run out, naming the last cause and the
  // attempts), FAILED_PRECONDITION (any other status; too many redirects, a
  // redirect without a Location), INVALID_ARGUMENT (a URL libcurl refuses).
  absl::StatusOr<HttpResponse> Get(const HttpRequest& request,
                                   TransferCounters* counters) const;

 private:
  struct Attempt;
  void* AcquireHandle() const;
  void ReleaseHandle(void* handle) const;
  // One attempt at one URL; `retryable` says whether a failure may be tried
  // again, `retry_after` what the server asked to wait (0: nothing).
  absl::StatusOr<HttpResponse> Once(
      const HttpRequest& request, const std::string& url, bool sign,
      TransferCounters* counters, bool* retryable,
      std::chrono::milliseconds* retry_after) const;
  absl::StatusOr<HttpResponse> WithRetries(const HttpRequest& request,
                                           const std::string& url, bool sign,
                                           TransferCounters* counters) const;

  HttpOptions options_;
  mutable std::mutex mu_;
  mutable std::vector<void*> idle_;  // CURL*
};

// The Status of a response that is no success, naming `display`: see Get.
// `body` is searched for an S3 <Code> (letters only) to name the reason.
absl::Status HttpStatusToStatus(long status, absl::string_view display,
                                absl::string_view body);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_HTTP_CLIENT_H_
