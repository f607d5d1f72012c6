#include "core/io/http_client.h"

#include <curl/curl.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "core/io/object_url.h"
#include "core/util/error_reason.h"

namespace tensormorph {
namespace {

constexpr uint64_t kMaxErrorBody = 64 << 10;

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

bool IsRedirect(long status) {
  return status == 301 || status == 302 || status == 303 || status == 307 ||
         status == 308;
}

bool IsRetryableStatus(long status) {
  return status == 408 || status == 429 || (status >= 500 && status <= 599);
}

bool IsRetryableCurl(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_HTTP3:
      return true;
    default:
      return false;
  }
}

// The code of an S3 error document (<Error><Code>AccessDenied</Code>),
// letters only: that is all of a hostile or chatty body a message repeats.
std::string S3ErrorCode(absl::string_view body) {
  const size_t open = body.find("<Code>");
  if (open == absl::string_view::npos) return "";
  absl::string_view rest = body.substr(open + 6);
  const size_t close = rest.find("</Code>");
  if (close == absl::string_view::npos || close > 64) return "";
  absl::string_view code = rest.substr(0, close);
  for (char c : code) {
    if (!absl::ascii_isalpha(c)) return "";
  }
  return std::string(code);
}

// What a transfer collects; the callbacks' user data.
struct Transfer {
  const HttpRequest* request;
  TransferCounters* counters;
  HttpResponse response;
  bool in_body_of_success = false;
};

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  absl::string_view line(data, size * n);
  line = absl::StripTrailingAsciiWhitespace(line);
  if (absl::StartsWith(line, "HTTP/")) {
    // A new response (after a proxy's CONNECT or a 100 Continue): its
    // headers replace what came before.
    t->response.headers.clear();
    const size_t sp = line.find(' ');
    long status = 0;
    if (sp != absl::string_view::npos) {
      (void)absl::SimpleAtoi(line.substr(sp + 1, 3), &status);
    }
    t->response.status = status;
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon != absl::string_view::npos) {
    t->response.headers[absl::AsciiStrToLower(line.substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return size * n;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const uint64_t len = uint64_t{size} * n;
  HttpResponse& r = t->response;
  const bool success = r.status >= 200 && r.status < 300;
  if (!success) {
    // An error or redirect body: kept short, for its S3 error code.
    const uint64_t room =
        kMaxErrorBody - std::min<uint64_t>(r.body.size(), kMaxErrorBody);
    r.body.append(data, std::min(len, room));
    return len;
  }
  t->counters->bytes.fetch_add(len, std::memory_order_relaxed);
  const HttpRequest& req = *t->request;
  const uint64_t cap = req.sink != nullptr ? req.sink_capacity : req.max_body;
  const uint64_t room = cap - std::min(cap, r.body_bytes);
  const uint64_t take = std::min(len, room);
  if (req.sink != nullptr) {
    std::memcpy(req.sink + r.body_bytes, data, take);
  } else {
    r.body.append(data, take);
  }
  r.body_bytes += take;
  if (take < len) {
    r.body_truncated = true;
    return 0;  // ends the transfer: CURLE_WRITE_ERROR, judged by the caller
  }
  return len;
}

}  // namespace

const std::string& HttpResponse::Header(absl::string_view name) const {
  static const std::string* const kEmpty = new std::string();
  auto it = headers.find(name);
  return it == headers.end() ? *kEmpty : it->second;
}

HttpOptions HttpOptions::FromEnvironment(const EnvLookup& env) {
  HttpOptions o;
  o.ca_file = EnvOr(env, "SSL_CERT_FILE", "");
  if (!env("http_proxy").has_value()) {
    o.http_proxy = EnvOr(env, "HTTP_PROXY", "");
  }
  o.no_proxy = EnvOr(env, "no_proxy", EnvOr(env, "NO_PROXY", ""));
  return o;
}

absl::Status HttpStatusToStatus(long status, absl::string_view display,
                                absl::string_view body) {
  const std::string code = S3ErrorCode(body);
  const std::string what =
      absl::StrCat("GET '", display, "': HTTP ", status,
                   code.empty() ? "" : absl::StrCat(" (", code, ")"));
  switch (status) {
    case 401:
    case 403:
      return absl::PermissionDeniedError(what);
    case 404:
    case 410:
      return absl::NotFoundError(what);
    case 412:
      return WithReason(absl::AbortedError(absl::StrCat(
                            what, ": the object changed since it was opened")),
                        ErrorReason::kFileChangedDuringRead,
                        {{"file", std::string(display)}});
    default:
      if (IsRetryableStatus(status)) return absl::UnavailableError(what);
      return absl::FailedPreconditionError(what);
  }
}

HttpClient::HttpClient(HttpOptions options) : options_(std::move(options)) {
  GlobalInit();
}

HttpClient::~HttpClient() {
  for (void* h : idle_) curl_easy_cleanup(static_cast<CURL*>(h));
}

void* HttpClient::AcquireHandle() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      void* h = idle_.back();
      idle_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void HttpClient::ReleaseHandle(void* handle) const {
  CURL* h = static_cast<CURL*>(handle);
  // Options go; the handle's connections, DNS and TLS session caches stay.
  curl_easy_reset(h);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < options_.pooled_handles) {
      idle_.push_back(h);
      return;
    }
  }
  curl_easy_cleanup(h);
}

absl::StatusOr<HttpResponse> HttpClient::Once(
    const HttpRequest& request, const std::string& url, bool sign,
    TransferCounters* counters, bool* retryable,
    std::chrono::milliseconds* retry_after) const {
  *retryable = false;
  *retry_after = std::chrono::milliseconds(0);
  const std::string display =
      request.display.empty() ? RedactUrl(request.url) : request.display;
  CURL* h = static_cast<CURL*>(AcquireHandle());
  if (h == nullptr)
    return absl::ResourceExhaustedError("curl_easy_init failed");
  Transfer t{&request, counters, {}, false};
  char error[CURL_ERROR_SIZE] = {0};
  curl_slist* headers = nullptr;
  for (const std::string& hdr : request.headers) {
    headers = curl_slist_append(headers, hdr.c_str());
  }
  std::string range_header;
  if (request.has_range) {
    range_header =
        absl::StrCat("Range: bytes=", request.first, "-", request.last);
    headers = curl_slist_append(headers, range_header.c_str());
  }
  std::string bearer;
  if (!request.bearer_token.empty() && OriginOf(url) == request.bearer_origin) {
    bearer = absl::StrCat("Authorization: Bearer ", request.bearer_token);
    headers = curl_slist_append(headers, bearer.c_str());
  }
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &OnBody);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 256L << 10);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options_.connect_timeout.count()));
  // libcurl's stall detector counts whole seconds.
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(
      h, CURLOPT_LOW_SPEED_TIME,
      std::max(1L, static_cast<long>(options_.stall_timeout.count() / 1000)));
  if (options_.request_timeout.count() > 0) {
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
                     static_cast<long>(options_.request_timeout.count()));
  }
  if (!options_.ca_file.empty()) {
    curl_easy_setopt(h, CURLOPT_CAINFO, options_.ca_file.c_str());
  }
  if (!options_.http_proxy.empty() &&
      absl::StartsWithIgnoreCase(url, "http://")) {
    curl_easy_setopt(h, CURLOPT_PROXY, options_.http_proxy.c_str());
    if (!options_.no_proxy.empty()) {
      curl_easy_setopt(h, CURLOPT_NOPROXY, options_.no_proxy.c_str());
    }
  }
  if (sign && request.sigv4 != nullptr) {
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, request.sigv4->provider.c_str());
    curl_easy_setopt(h, CURLOPT_USERNAME, request.sigv4->access_key.c_str());
    curl_easy_setopt(h, CURLOPT_PASSWORD, request.sigv4->secret_key.c_str());
  }
  counters->requests.fetch_add(1, std::memory_order_relaxed);
  const CURLcode rc = curl_easy_perform(h);
  char* redirect = nullptr;
  curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &redirect);
  if (redirect != nullptr) t.response.headers["location"] = redirect;
  curl_slist_free_all(headers);
  ReleaseHandle(h);
  t.response.url = url;
  if (rc == CURLE_WRITE_ERROR && t.response.body_truncated)
    return std::move(t.response);
  if (rc != CURLE_OK) {
    *retryable = IsRetryableCurl(rc);
    std::string why = error[0] != '\0' ? error : curl_easy_strerror(rc);
    // libcurl names hosts and ports, but never let a query string through.
    why = absl::StrReplaceAll(why, {{url, display}});
    const std::string msg = absl::StrCat("GET '", display, "': ", why);
    if (rc == CURLE_URL_MALFORMAT || rc == CURLE_UNSUPPORTED_PROTOCOL) {
      return absl::InvalidArgumentError(msg);
    }
    return absl::UnavailableError(msg);
  }
  const long status = t.response.status;
  if ((status >= 200 && status < 300) || status == 416 || IsRedirect(status)) {
    return std::move(t.response);
  }
  *retryable = IsRetryableStatus(status);
  // Delta-seconds only; an HTTP-date is left to the backoff.
  uint32_t seconds = 0;
  const std::string& after = t.response.Header("retry-after");
  if (*retryable && !after.empty() && after.size() <= 6 &&
      absl::c_all_of(after, absl::ascii_isdigit) &&
      absl::SimpleAtoi(after, &seconds)) {
    *retry_after = std::chrono::seconds(seconds);
  }
  return HttpStatusToStatus(status, display, t.response.body);
}

absl::StatusOr<HttpResponse> HttpClient::WithRetries(
    const HttpRequest& request, const std::string& url, bool sign,
    TransferCounters* counters) const {
  thread_local std::minstd_rand jitter(std::random_device{}());
  absl::Status last;
  std::chrono::milliseconds asked(0);  // the last answer's Retry-After
  const int attempts = std::max(1, options_.max_attempts);
  for (int attempt = 1; attempt <= attempts; ++attempt) {
    if (attempt > 1) {
      counters->retries.fetch_add(1, std::memory_order_relaxed);
      auto wait =
          options_.initial_backoff * (int64_t{1} << std::min(attempt - 2, 20));
      wait = std::min<std::chrono::milliseconds>(wait, options_.max_backoff);
      const int64_t ms = wait.count();
      const int64_t off =
          ms > 1 ? static_cast<int64_t>(jitter() % (ms / 2 + 1)) : 0;
      std::chrono::milliseconds pause(ms - off);
      pause = std::max(pause, std::min(asked, options_.max_backoff));
      if (options_.sleep) {
        options_.sleep(pause);
      } else {
        std::this_thread::sleep_for(pause);
      }
    }
    bool retryable = false;
    absl::StatusOr<HttpResponse> r =
        Once(request, url, sign, counters, &retryable, &asked);
    if (r.ok() || !retryable) return r;
    last = r.status();
  }
  return absl::UnavailableError(
      absl::StrCat(last.message(), " (gave up after ", attempts, " attempts)"));
}

absl::StatusOr<HttpResponse> HttpClient::Get(const HttpRequest& request,
                                             TransferCounters* counters) const {
  const std::string display =
      request.display.empty() ? RedactUrl(request.url) : request.display;
  const std::string first_origin = OriginOf(request.url);
  std::string url = request.url;
  std::vector<absl::flat_hash_map<std::string, std::string>> hops;
  for (int hop = 0;; ++hop) {
    const bool sign = OriginOf(url) == first_origin;
    absl::StatusOr<HttpResponse> r = WithRetries(request, url, sign, counters);
    if (!r.ok() || !IsRedirect(r->status) || !request.follow_redirects) {
      if (r.ok()) r->hops = std::move(hops);
      return r;
    }
    if (hop >= options_.max_redirects) {
      return absl::FailedPreconditionError(
          absl::StrCat("GET '", display, "': more than ",
                       options_.max_redirects, " redirects"));
    }
    const std::string& location = r->Header("location");
    if (location.empty() || OriginOf(location).empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("GET '", display, "': HTTP ", r->status,
                       " without an http(s) Location"));
    }
    url = location;
    hops.push_back(std::move(r->headers));
  }
}

}  // namespace tensormorph
