#include "server/http/http_gateway.h"

#include <httplib.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/util/error_reason.h"
#include "core/util/peer_ledger.h"
#include "proto/received_chunk.h"
#include "proto/status_mapping.h"
#include "render/heatmap_render.h"
#include "render/npy.h"
#include "server/http/disconnect_watch.h"
#include "server/http/heatmap_cells.h"
#include "server/http/http_body.h"
#include "server/http/http_query.h"
#include "server/http/http_status.h"
#include "server/http/json_rpc.h"
#include "server/http/peer_fair_server.h"
#include "server/http/request_guard.h"
#include "server/http/web_assets.h"

namespace tensormorph {
namespace {

// The largest request body. A request is at most kMaxRequestBytes (4 MiB)
// as protobuf, the server's receive limit, and its JSON a few times that; a
// body past this could not become a request the server takes.
constexpr size_t kMaxBodyBytes = 16 << 20;
// A body declared past kMaxBodyBytes but within this is read and dropped
// before the 413 goes out (cpp-httplib's own skip, which its read timeout
// bounds per read): a connection closed on unread bytes is reset, and a
// client still writing (Python's http.client) then sees a broken pipe, not
// the answer. Past it the 413 goes out unread: no client sends that much to
// a limit of 16 MiB by mistake.
constexpr uint64_t kMaxDrainBytes = 64 << 20;
// A request body must arrive within this, however it trickles in, so that
// slow senders cannot keep the serving threads.
constexpr absl::Duration kBodyDeadline = absl::Seconds(20);

// JSON named with its charset: a type cpp-httplib does not compress (see
// http_body.h), for bodies too small to gain from it.
constexpr char kSmallJson[] = "application/json; charset=utf-8";

void SendError(httplib::Response& res, const absl::Status& status) {
  res.status = HttpStatusOf(status.code());
  res.set_content(ErrorJson(status), kSmallJson);
}

// A body past kMaxBodyBytes: 413 (Rpc), not 429, which tells a client to
// come back later with the same request. `asked` is the length declared, or
// what had come when the body was cut off.
absl::Status BodyTooLarge(absl::string_view asked) {
  return WithReason(absl::ResourceExhaustedError(absl::StrCat(
                        "the request body is past the ", kMaxBodyBytes >> 20,
                        " MiB allowed (", asked, " bytes)")),
                    ErrorReason::kLimitExceeded,
                    {{"limit", "max_request_body_bytes"},
                     {"limit_value", absl::StrCat(kMaxBodyBytes)},
                     {"asked", std::string(asked)}});
}

// For the request this serving thread answers, reset after each response:
// PreRoute ran (cpp-httplib parsed the request), and ReadBody read its body
// whole. A request answered without either leaves bytes on the connection
// that are no request of its client's (a body, or the rest of a malformed
// head): the connection ends after the response, or those bytes would be
// taken for the next request (request smuggling).
thread_local bool request_routed = false;
thread_local bool request_body_read = false;

// True when `req` declares a body: Transfer-Encoding, or a Content-Length
// other than 0 (CheckFraming has refused every other framing).
bool DeclaresBody(const httplib::Request& req) {
  uint64_t length = 0;
  return req.has_header("Transfer-Encoding") ||
         (absl::SimpleAtoi(absl::StripAsciiWhitespace(
                               req.get_header_value("Content-Length")),
                           &length) &&
          length > 0);
}

// The body, read here rather than by cpp-httplib, so that a slow sender is
// cut off at kBodyDeadline, not held for as long as it trickles. `res` is
// where cpp-httplib says why it stopped reading. CheckFraming has passed:
// one Content-Length of digits, or Transfer-Encoding: chunked, or neither.
absl::StatusOr<std::string> ReadBody(const httplib::Request& req,
                                     const httplib::Response& res,
                                     const httplib::ContentReader& content) {
  const bool chunked = req.has_header("Transfer-Encoding");
  const std::string length = req.get_header_value("Content-Length");
  if (!chunked && !req.has_header("Content-Length")) {
    // A request without either has no body (RFC 9112 6.3); cpp-httplib
    // would read to the connection's end, holding a thread until its read
    // timeout.
    return std::string();
  }
  uint64_t declared = 0;
  if (!chunked &&
      (!absl::SimpleAtoi(absl::StripAsciiWhitespace(length), &declared) ||
       declared > kMaxDrainBytes)) {
    // cpp-httplib would read and drop all that was declared, however much.
    return BodyTooLarge(absl::StripAsciiWhitespace(length));
  }
  std::string body;
  const absl::Time deadline = absl::Now() + kBodyDeadline;
  bool late = false, large = false;
  const bool read = content([&](const char* data, size_t n) {
    late = absl::Now() > deadline;
    large = body.size() + n > kMaxBodyBytes;
    if (late || large) return false;
    body.append(data, n);
    return true;
  });
  if (large) return BodyTooLarge(absl::StrCat("over ", kMaxBodyBytes));
  if (late) {
    return absl::DeadlineExceededError(
        absl::StrCat("the request body did not arrive within ",
                     absl::ToInt64Seconds(kBodyDeadline), " seconds"));
  }
  if (read) {
    request_body_read = true;
    return body;
  }
  // Declared past kMaxBodyBytes: cpp-httplib read and dropped it.
  if (res.status == 413) return BodyTooLarge(absl::StrCat(declared));
  // cpp-httplib stopped: 415 or 500 before reading (a Content-Encoding it
  // cannot decode), else 400 (the bytes broke the framing, or stopped).
  if (res.status == 415 || res.status == 500) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request's Content-Encoding '",
                     absl::CHexEscape(req.get_header_value("Content-Encoding")),
                     "' is not one this server decodes"));
  }
  const std::string encoded =
      req.has_header("Content-Encoding")
          ? absl::StrCat(
                ", or its Content-Encoding '",
                absl::CHexEscape(req.get_header_value("Content-Encoding")),
                "' did not decode")
          : "";
  if (chunked) {
    // cpp-httplib 0.11 reads no trailer fields: a legal one after the last
    // chunk is refused with the malformed.
    return FramingError(
        "chunked-body",
        absl::StrCat("the chunked request body does not parse: a chunk size "
                     "that is not hexadecimal or is past 2^64, a chunk not "
                     "followed by CRLF, trailer fields after the last chunk "
                     "(this server reads none), or it ended early",
                     encoded));
  }
  return FramingError(
      "body-short",
      absl::StrCat("the request body ended (or stalled past the read "
                   "timeout) before its Content-Length of ",
                   declared, " bytes", encoded));
}

// Who sent `req`, for the service's log; `sent` (when given) learns whether
// a call carried it (CallOrigin::sent).
CallOrigin OriginOf(const httplib::Request& req, bool* sent = nullptr) {
  return {req.get_header_value("Authorization"),
          absl::StrCat(req.remote_addr, ":", req.remote_port),
          req.get_header_value("X-Forwarded-For"),
          absl::StrCat(req.method, " ", req.path),
          sent,
          nullptr};
}

// A name fit for Content-Disposition: letters, digits, '.', '-' and '_'.
std::string FileNameOf(absl::string_view tensor, absl::string_view ext) {
  std::string name;
  for (const char c : tensor) {
    name.push_back(absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                           c == '.' || c == '-' || c == '_'
                       ? c
                       : '_');
  }
  if (name.empty()) name = "tensor";
  return absl::StrCat(name.substr(0, 200), ext);
}

// A page file's path: what the compiled-in table could hold, and nothing a
// directory walk could abuse in development mode.
bool IsAssetPath(absl::string_view path) {
  if (path.empty() || path[0] != '/' || absl::StrContains(path, "..") ||
      absl::StrContains(path, "//")) {
    return false;
  }
  for (const char c : path) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '/' &&
        c != '.' && c != '-' && c != '_') {
      return false;
    }
  }
  return true;
}

}  // namespace

class HttpGateway::Impl {
 public:
  Impl(HttpGatewayOptions options, std::shared_ptr<grpc::Channel> channel)
      : options_(std::move(options)),
        rpc_(std::move(channel)),
        held_(options_.max_reply_bytes_in_flight,
              options_.max_reply_bytes_per_peer) {}

  absl::Status Bind(int* port, std::string* url);
  // The share of the serving threads each client address gets.
  PeerFairOptions FairOptions() const;
  void BeginDrain() { draining_.store(true); }
  bool WaitIdle(absl::Duration timeout);
  void CancelAll();
  bool Stop(absl::Duration timeout);

 private:
  // A response still being sent: its call is cancelled when the gateway
  // stops, so that Stop does not wait on a client that reads slowly.
  struct Sending {
    std::function<void()> cancel;
  };
  void Track(Sending* s) {
    std::lock_guard<std::mutex> lock(mu_);
    sending_.insert(s);
  }
  void Untrack(Sending* s) {
    std::lock_guard<std::mutex> lock(mu_);
    sending_.erase(s);
  }

  // Registers the handlers below with cpp-httplib.
  void Routes();
  // Before routing: the guard (request_guard.h) for every request; for /v1
  // ones also the in-flight count, draining and the Authorization check.
  httplib::Server::HandlerResponse PreRoute(const httplib::Request& req,
                                            httplib::Response& res);
  // A response written (or failed): a /v1 request is no longer in flight.
  void Logged(const httplib::Request& req, const httplib::Response& res);
  // cpp-httplib's own refusals and unrouted requests, in the API's error
  // shape; Unhandled for a response that has a body of ours.
  httplib::Server::HandlerResponse HttpError(const httplib::Request& req,
                                             httplib::Response& res) const;
  // OPTIONS: a CORS preflight, answered for the allowed origin only.
  void Preflight(const httplib::Request& req, httplib::Response& res) const;
  void Healthz(const httplib::Request& req, httplib::Response& res) const;
  void Metrics(const httplib::Request& req, httplib::Response& res) const;
  // GET /v1/<Method>: 405, the API takes POST.
  void NotPost(const httplib::Request& req, httplib::Response& res) const;
  void Rpc(const httplib::Request& req, httplib::Response& res,
           const httplib::ContentReader& content);
  void Stream(const std::string& method, const std::string& body,
              const httplib::Request& req, httplib::Response& res);
  // POST /v1/GetHeatmap answered in the binary form (heatmap_cells.h);
  // origin.sent is set.
  void HeatmapCells(const std::string& body, const CallOrigin& origin,
                    const httplib::Request& req, httplib::Response& res);
  // An API request's Authorization, checked before its body is read (so
  // that no unauthenticated client makes the server hold 16 MiB bodies) by
  // the service's own interceptor, through a GetServerInfo call that
  // carries it. Answers the refusal and returns false.
  bool Authorized(const httplib::Request& req, httplib::Response& res) const;
  void Npy(const httplib::Request& req, httplib::Response& res);
  void HeatmapPng(const httplib::Request& req, httplib::Response& res);
  void Asset(const httplib::Request& req, httplib::Response& res);
  bool AllowedOrigin(const httplib::Request& req) const;
  // Answers `body`, a reply the gateway holds whole until it is written,
  // counted against the client address's share of held reply bytes (held_);
  // past it, answers 429 LIMIT_EXCEEDED instead.
  void SendHeld(const httplib::Request& req, httplib::Response& res,
                std::string body, const std::string& content_type);
  // Answers `status` (as `http_status`, 0 = the code's own) for a request
  // the gateway refuses itself, and tells options_.on_refused once.
  void Refuse(const httplib::Request& req, httplib::Response& res,
              const absl::Status& status, int http_status = 0,
              absl::string_view reason = "") const;
  // The checks of every request before routing (request_guard.h): Handled
  // when it was refused.
  httplib::Server::HandlerResponse Guard(const httplib::Request& req,
                                         httplib::Response& res) const;
  // CORS headers for an allowed origin (set once per response).
  void Cors(const httplib::Request& req, httplib::Response& res) const;

  const HttpGatewayOptions options_;
  const JsonRpc rpc_;
  // Cancels the unary calls of clients that left (a page leaving a view
  // aborts its fetch, which closes the connection).
  DisconnectWatch watch_;
  // Bytes of reply bodies built and not yet written, per client address
  // (PeerShareKey) and in all: what a client that stops reading can hold.
  PeerLedger held_;
  std::unique_ptr<HostAllowList> hosts_;  // set by Bind
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable idle_;
  std::set<Sending*> sending_;
  int in_flight_ = 0;  // /v1 requests between routing and their last byte
  bool stopped_ = false;
  std::atomic<bool> draining_{false};
  std::atomic<bool> serving_done_{false};
};

PeerFairOptions HttpGateway::Impl::FairOptions() const {
  const int threads = std::max(options_.threads, 2);
  PeerFairOptions fair;
  fair.threads = threads;
  // A quarter of the process's descriptors at most: the rest are the gRPC
  // port's, the files' and the log's.
  rlimit files{};
  const int64_t descriptors =
      ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY
          ? static_cast<int64_t>(files.rlim_cur)
          : int64_t{65536};
  fair.max_connections =
      static_cast<int>(std::clamp<int64_t>(descriptors / 4, 64, 16384));
  fair.share =
      options_.connections_per_peer > 0
          ? std::min(options_.connections_per_peer, fair.max_connections)
          : std::max(threads / 4, 1);
  // A short line: its connections hold descriptors, with no deadline
  // until they reach the parking.
  fair.waiting = std::max(16, 2 * fair.share);
  // An eighth of the threads (but never below a browser's six connections
  // to a host): eight addresses' requests, however slowly they come after
  // their first 16 KiB, leave the rest to others.
  fair.threads_per_peer = std::max(6, threads / 8);
  fair.unshared = options_.unshared_peer;
  if (options_.on_refused) {
    fair.on_refused = [report = options_.on_refused](
                          const std::string& peer, const std::string& message) {
      report({peer, "", "", "", absl::StatusCode::kResourceExhausted, 429, "",
              message});
    };
  }
  return fair;
}

absl::Status HttpGateway::Impl::Bind(int* port, std::string* url) {
  const size_t colon = options_.listen.rfind(':');
  int64_t wanted = -1;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(options_.listen.substr(colon + 1), &wanted) ||
      wanted < 0 || wanted > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http-listen is '", options_.listen,
                     "'; expected HOST:PORT with a port in [0, 65535]"));
  }
  std::string host = options_.listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [::1]:8080
  }
  hosts_ = std::make_unique<HostAllowList>(host, options_.allow_hosts);
  const bool tls = !options_.tls_cert.empty() || !options_.tls_key.empty();
  std::function<void()> widen_backlog;
  if (tls) {
    if (options_.tls_cert.empty() || options_.tls_key.empty()) {
      return absl::InvalidArgumentError(
          "HTTPS needs both a certificate (--tls-cert) and its key "
          "(--tls-key)");
    }
    auto ssl = std::make_unique<PeerFairServer<httplib::SSLServer>>(
        FairOptions(), options_.tls_cert.c_str(), options_.tls_key.c_str(),
        options_.tls_client_ca.empty() ? nullptr
                                       : options_.tls_client_ca.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot load the HTTPS certificate '", options_.tls_cert,
          "' with key '", options_.tls_key, "'",
          options_.tls_client_ca.empty()
              ? ""
              : absl::StrCat(" and client CA '", options_.tls_client_ca, "'"),
          ": not readable PEM, or a key that does not match"));
    }
    // A context that verifies clients needs a session id context for a
    // client to resume its session: without one OpenSSL answered every
    // resumption (curl's, a browser's) with an internal-error alert.
    static constexpr unsigned char kSessionContext[] = "tensormorphd-http";
    SSL_CTX_set_session_id_context(ssl->ssl_context(), kSessionContext,
                                   sizeof kSessionContext - 1);
    widen_backlog = [server = ssl.get()] { server->WidenBacklog(); };
    http_ = std::move(ssl);
  } else {
    auto plain =
        std::make_unique<PeerFairServer<httplib::Server>>(FairOptions());
    widen_backlog = [server = plain.get()] { server->WidenBacklog(); };
    http_ = std::move(plain);
  }
  http_->set_payload_max_length(kMaxBodyBytes);
  // Headers and body go out in separate writes: with Nagle's algorithm on,
  // the body waited for the client's delayed ACK, 40 ms per response.
  http_->set_tcp_nodelay(true);
  // cpp-httplib's default sets SO_REUSEPORT, with which a second server on
  // the same --http-listen bound beside this one and took half its
  // connections, past this one's token check. SO_REUSEADDR alone still lets
  // a restart bind while old connections are in TIME_WAIT.
  http_->set_socket_options([](socket_t sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  // A client that takes no data for this long is dropped, and its call
  // cancelled with it.
  http_->set_write_timeout(30, 0);
  Routes();
  int bound = -1;
  if (wanted == 0) {
    bound = http_->bind_to_any_port(host);
  } else if (http_->bind_to_port(host, static_cast<int>(wanted))) {
    bound = static_cast<int>(wanted);
  }
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for HTTP on ", options_.listen,
                     " (address in use, or not an address of this machine)"));
  }
  widen_backlog();
  *port = bound;
  const std::string shown =
      absl::StrContains(host, ':') ? absl::StrCat("[", host, "]") : host;
  *url = absl::StrCat(tls ? "https" : "http", "://", shown, ":", bound, "/");
  thread_ = std::thread([this] {
    http_->listen_after_bind();
    serving_done_.store(true);
  });
  return absl::OkStatus();
}

bool HttpGateway::Impl::WaitIdle(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                        [this] { return in_flight_ == 0; });
}

void HttpGateway::Impl::CancelAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Sending* s : sending_) s->cancel();
}

bool HttpGateway::Impl::Stop(absl::Duration timeout) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopped_) {
      stopped_ = first = true;
      for (Sending* s : sending_) s->cancel();
    }
  }
  if (first && http_ != nullptr) http_->stop();
  // cpp-httplib joins its serving threads as it stops; one held by a client
  // (a body trickling in, a full socket) can hold it for its timeouts, so
  // wait a bounded time when asked to, and say so.
  const absl::Time deadline = absl::Now() + timeout;
  while (thread_.joinable() && !serving_done_.load() &&
         absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (thread_.joinable() && !serving_done_.load()) return false;
  if (thread_.joinable()) thread_.join();
  return true;
}

bool HttpGateway::Impl::AllowedOrigin(const httplib::Request& req) const {
  if (options_.allow_origin.empty() || !req.has_header("Origin")) return false;
  return options_.allow_origin == "*" ||
         req.get_header_value("Origin") == options_.allow_origin;
}

void HttpGateway::Impl::Cors(const httplib::Request& req,
                             httplib::Response& res) const {
  if (!AllowedOrigin(req)) return;
  res.set_header(
      "Access-Control-Allow-Origin",
      options_.allow_origin == "*" ? "*" : req.get_header_value("Origin"));
  res.set_header("Access-Control-Expose-Headers", "Content-Disposition");
  res.set_header("Vary", "Origin");
}

void HttpGateway::Impl::SendHeld(const httplib::Request& req,
                                 httplib::Response& res, std::string body,
                                 const std::string& content_type) {
  const std::string key = ServedPeerKey();
  const auto bytes = static_cast<int64_t>(body.size());
  // One reply larger than the share still goes when the client holds
  // nothing else, as on the gRPC side.
  switch (held_.TryTake(key, bytes, /*one_always=*/true)) {
    case PeerLedger::Refusal::kNone: {
      std::shared_ptr<void> hold(
          nullptr, [this, key, bytes](void*) { held_.Give(key, bytes); });
      return SendBody(req, res, std::move(body), content_type, std::move(hold));
    }
    case PeerLedger::Refusal::kPeer:
      return Refuse(
          req, res,
          LimitExceededError(
              absl::StrCat("limit max_reply_bytes_per_peer (", held_.peer_cap(),
                           " bytes) reached: ", held_.held_by(key),
                           " bytes of HTTP replies to this client address are "
                           "not yet read; read them before asking for more"),
              "max_reply_bytes_per_peer", held_.peer_cap(),
              held_.held_by(key) + bytes),
          0, "");
    case PeerLedger::Refusal::kTotal:
      return Refuse(
          req, res,
          LimitExceededError(
              absl::StrCat("limit max_reply_bytes_in_flight (",
                           held_.total_cap(),
                           " bytes) reached: ", held_.total(),
                           " bytes of HTTP replies to all clients are not yet "
                           "sent; retry later"),
              "max_reply_bytes_in_flight", held_.total_cap(),
              held_.total() + bytes),
          0, "");
  }
}

void HttpGateway::Impl::Refuse(const httplib::Request& req,
                               httplib::Response& res,
                               const absl::Status& status, int http_status,
                               absl::string_view reason) const {
  SendError(res, status);
  if (http_status != 0) res.status = http_status;
  if (!options_.on_refused) return;
  options_.on_refused({absl::StrCat(req.remote_addr, ":", req.remote_port),
                       req.get_header_value("X-Forwarded-For"), req.method,
                       req.path, status.code(), res.status, std::string(reason),
                       std::string(status.message())});
}

httplib::Server::HandlerResponse HttpGateway::Impl::Guard(
    const httplib::Request& req, httplib::Response& res) const {
  if (absl::Status framing = CheckFraming(req.headers); !framing.ok()) {
    Refuse(req, res, framing, 400, "framing");
    // The body was not read, and how long it is cannot be told: the
    // connection ends, so nothing of it is taken for a next request.
    EndConnectionAfter(res);
    return httplib::Server::HandlerResponse::Handled;
  }
  // /healthz tells only serving or draining, and orchestrators probe it by
  // a pod's address, which no list of names holds.
  if (req.path != "/healthz" && !hosts_->Allows(req)) {
    Refuse(req, res,
           absl::PermissionDeniedError(
               "the Host header does not name this server; add the name "
               "with tensormorphd --http-allow-host"),
           421, "host");
    EndConnectionAfter(res);  // its body is not read
    return httplib::Server::HandlerResponse::Handled;
  }
  return httplib::Server::HandlerResponse::Unhandled;
}

bool HttpGateway::Impl::Authorized(const httplib::Request& req,
                                   httplib::Response& res) const {
  if (!options_.check_authorization_first) return true;
  grpc::ClientContext context;
  v1::GetServerInfoResponse ignored;
  absl::Status s = ApplyOrigin(OriginOf(req), &context);
  if (!s.ok()) {
    Refuse(req, res, s);
    EndConnectionAfter(res);  // its body is not read
    return false;
  }
  s = FromGrpcStatus(rpc_.stub().GetServerInfo(
      &context, v1::GetServerInfoRequest(), &ignored));
  if (s.code() != absl::StatusCode::kUnauthenticated &&
      s.code() != absl::StatusCode::kPermissionDenied) {
    return true;  // anything else is the call's own to answer
  }
  // The service refused the call, and logged and counted it.
  SendError(res, s);
  EndConnectionAfter(res);  // its body is not read
  return false;
}

httplib::Server::HandlerResponse HttpGateway::Impl::PreRoute(
    const httplib::Request& req, httplib::Response& res) {
  request_routed = true;
  if (!absl::StartsWith(req.path, "/v1/")) return Guard(req, res);
  // cpp-httplib cuts any answer to a request's Range, errors and streams
  // included; no /v1 answer can be cut (the .npy refuses a Range itself).
  // The Request is cpp-httplib's own mutable object, handed over as const.
  const_cast<httplib::Request&>(req).ranges.clear();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++in_flight_;  // until the logger sees its last byte go
  }
  if (Guard(req, res) == httplib::Server::HandlerResponse::Handled) {
    return httplib::Server::HandlerResponse::Handled;
  }
  if (draining_.load() && req.method != "OPTIONS") {
    Refuse(req, res,
           absl::UnavailableError("the server is draining (shutting "
                                  "down); retry on another replica"),
           0, "draining");
    EndConnectionAfter(res);
    return httplib::Server::HandlerResponse::Handled;
  }
  if (req.method != "OPTIONS" && !Authorized(req, res)) {
    return httplib::Server::HandlerResponse::Handled;
  }
  return httplib::Server::HandlerResponse::Unhandled;
}

void HttpGateway::Impl::Logged(const httplib::Request& req,
                               const httplib::Response& res) {
  if (!absl::StartsWith(req.path, "/v1/")) return;
  spdlog::debug("HTTP {} {} -> {}", req.method, req.path, res.status);
  std::lock_guard<std::mutex> lock(mu_);
  if (--in_flight_ == 0) idle_.notify_all();
}

httplib::Server::HandlerResponse HttpGateway::Impl::HttpError(
    const httplib::Request& req, httplib::Response& res) const {
  // A body of ours (SendBody and EndConnectionAfter send theirs through a
  // provider): not cpp-httplib's refusal.
  if (!res.body.empty() || res.content_provider_)
    return httplib::Server::HandlerResponse::Unhandled;
  // A Range cpp-httplib could not parse whole (its 416) would still cut
  // this answer into the ranges it did parse: no refusal is ever cut.
  const_cast<httplib::Request&>(req).ranges.clear();
  absl::Status s = absl::NotFoundError(
      absl::StrCat("no such endpoint: ", req.method, " ", req.path));
  absl::string_view reason = "bad_request";
  if (res.status == 413) {
    reason = "limit";
    s = absl::ResourceExhaustedError(absl::StrCat(
        "the request body is past the ", kMaxBodyBytes >> 20, " MiB allowed"));
  } else if (res.status == 400) {
    s = absl::InvalidArgumentError("a malformed HTTP request");
  } else if (res.status == 414) {
    s = absl::InvalidArgumentError(
        "the URL is past the 8 KiB allowed; send the request as JSON "
        "to POST /v1/<Method> instead");
  } else if (res.status == 416) {
    s = absl::InvalidArgumentError(
        "a Range header that does not parse; no answer here is sent in "
        "ranges: ask without one");
  } else if (res.status != 404) {
    s = absl::UnknownError(absl::StrCat("HTTP ", res.status));
  }
  // cpp-httplib's own refusals, and requests no route takes.
  Refuse(req, res, s, res.status, reason);
  return httplib::Server::HandlerResponse::Handled;
}

void HttpGateway::Impl::Preflight(const httplib::Request& req,
                                  httplib::Response& res) const {
  if (!AllowedOrigin(req)) {
    Refuse(req, res,
           absl::PermissionDeniedError(
               "cross-origin calls are not allowed from this origin "
               "(tensormorphd --http-allow-origin)"));
    return;
  }
  res.set_header("Access-Control-Allow-Methods", "GET, POST");
  res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
  res.set_header("Access-Control-Max-Age", "600");
  res.status = 204;
}

void HttpGateway::Impl::Healthz(const httplib::Request& req,
                                httplib::Response& res) const {
  const bool serving = !options_.serving || options_.serving();
  res.status = serving ? 200 : 503;
  SendBody(req, res, serving ? "ok\n" : "draining\n", "text/plain");
}

void HttpGateway::Impl::Metrics(const httplib::Request& req,
                                httplib::Response& res) const {
  if (!options_.metrics) {
    SendError(res, absl::NotFoundError("this gateway has no metrics"));
    return;
  }
  SendBody(req, res, options_.metrics(),
           "text/plain; version=0.0.4; charset=utf-8");
}

void HttpGateway::Impl::NotPost(const httplib::Request& req,
                                httplib::Response& res) const {
  res.set_header("Allow", "POST");
  Refuse(req, res,
         absl::UnimplementedError(
             absl::StrCat(req.path, " takes POST with the request as JSON")),
         405, "bad_request");
}

void HttpGateway::Impl::Routes() {
  using Req = const httplib::Request&;
  using Res = httplib::Response&;
  http_->set_pre_routing_handler(
      [this](Req req, Res res) { return PreRoute(req, res); });
  // cpp-httplib calls its logger once a response has been written (or has
  // failed to be): where a /v1 request stops being in flight.
  http_->set_logger(
      [this](Req req, const httplib::Response& res) { Logged(req, res); });
  http_->set_post_routing_handler([this](Req req, Res res) {
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Referrer-Policy", "no-referrer");
    Cors(req, res);
    AddFrameHeaders(res);
    if (!request_routed ||
        (DeclaresBody(req) && !request_body_read && req.body.empty())) {
      EndConnectionAfter(res);
    }
    request_routed = request_body_read = false;
  });
  // Unmatched routes, oversized bodies and httplib's own refusals answer in
  // the API's error shape too.
  http_->set_error_handler(httplib::Server::HandlerWithResponse(
      [this](Req req, Res res) { return HttpError(req, res); }));
  http_->Options(R"(/.*)", [this](Req req, Res res) { Preflight(req, res); });
  http_->Get("/healthz", [this](Req req, Res res) { Healthz(req, res); });
  http_->Get("/metrics", [this](Req req, Res res) { Metrics(req, res); });
  http_->Get("/v1/tensor.npy", [this](Req req, Res res) { Npy(req, res); });
  http_->Get("/v1/heatmap.png",
             [this](Req req, Res res) { HeatmapPng(req, res); });
  http_->Post(R"(/v1/([A-Za-z]+))",
              [this](Req req, Res res, const httplib::ContentReader& content) {
                Rpc(req, res, content);
              });
  http_->Get(R"(/v1/.*)", [this](Req req, Res res) { NotPost(req, res); });
  http_->Get(R"(/.*)", [this](Req req, Res res) { Asset(req, res); });
}

void HttpGateway::Impl::Rpc(const httplib::Request& req, httplib::Response& res,
                            const httplib::ContentReader& content) {
  const std::string method = req.matches[1];
  // A browser sends a cross-origin application/json POST only after a
  // preflight, which only --http-allow-origin answers; a form or a
  // text/plain POST from another site is refused here.
  const std::string type = req.get_header_value("Content-Type");
  const absl::string_view media = absl::StripAsciiWhitespace(
      absl::string_view(type).substr(0, std::min(type.find(';'), type.size())));
  if (!absl::EqualsIgnoreCase(media, "application/json")) {
    Refuse(req, res,
           absl::InvalidArgumentError(absl::StrCat(
               "POST /v1/", method, " needs Content-Type: application/json",
               type.empty() ? "" : absl::StrCat(", not ", type))),
           415, "bad_request");
    return;
  }
  absl::StatusOr<bool> streaming = rpc_.IsServerStreaming(method);
  if (!streaming.ok()) {
    return Refuse(req, res, streaming.status(), 0, "unimplemented");
  }
  absl::StatusOr<std::string> body = ReadBody(req, res, content);
  if (!body.ok()) {
    const bool limit = IsReason(body.status(), ErrorReason::kLimitExceeded);
    // A body cut off at its deadline is the client's slowness (408 Request
    // Timeout), not an upstream's (DEADLINE_EXCEEDED's own 504).
    const bool late = absl::IsDeadlineExceeded(body.status());
    Refuse(req, res, body.status(),
           limit  ? 413
           : late ? 408
                  : 0,
           limit ? "limit"
           : IsReason(body.status(), ErrorReason::kHttpFramingInvalid)
               ? "framing"
               : "bad_request");
    EndConnectionAfter(res);  // the rest is not read
    return;
  }
  if (*streaming) return Stream(method, *body, req, res);
  bool sent = false;
  CallOrigin origin = OriginOf(req, &sent);
  origin.watch = [this,
                  fd = ServedConnectionSocket()](grpc::ClientContext* context) {
    return watch_.Watch(fd, context);
  };
  if (method == "GetHeatmap") {
    // The two forms of one resource: a cache must not hand one for the
    // other.
    res.set_header("Vary", "Accept");
    if (AcceptsHeatmapCells(req.get_header_value("Accept"))) {
      return HeatmapCells(*body, origin, req, res);
    }
  }
  absl::StatusOr<std::string> reply = rpc_.Unary(method, *body, origin);
  if (!reply.ok()) {
    // Before the call: the body is no request. After it: the service's.
    if (!sent) return Refuse(req, res, reply.status());
    return SendError(res, reply.status());
  }
  SendHeld(req, res, *std::move(reply), "application/json");
}

void HttpGateway::Impl::HeatmapCells(const std::string& body,
                                     const CallOrigin& origin,
                                     const httplib::Request& req,
                                     httplib::Response& res) {
  v1::HeatmapMode mode = v1::HEATMAP_MODE_UNSPECIFIED;
  absl::StatusOr<v1::GetHeatmapResponse> reply =
      rpc_.GetHeatmap(body, origin, &mode);
  if (!reply.ok()) {
    // Before the call: the body is no request. After it: the service's.
    if (!*origin.sent) return Refuse(req, res, reply.status());
    return SendError(res, reply.status());
  }
  // Not compressed (SendBody compresses text only): gzip shrinks floats
  // little, at tens of ms for a million cells.
  SendHeld(req, res, HeatmapCellsBody(*std::move(reply), mode),
           kHeatmapCellsType);
}

void HttpGateway::Impl::Stream(const std::string& method,
                               const std::string& body,
                               const httplib::Request& req,
                               httplib::Response& res) {
  bool sent = false;
  absl::StatusOr<std::unique_ptr<JsonStream>> started =
      rpc_.Stream(method, body, OriginOf(req, &sent));
  if (!started.ok()) {
    if (!sent) return Refuse(req, res, started.status());
    return SendError(res, started.status());
  }
  struct State : Sending {
    std::unique_ptr<JsonStream> stream;
    std::string line;
    bool finished = false;
  };
  auto state = std::make_shared<State>();
  state->stream = *std::move(started);
  // The first message, or the status, decides the HTTP status: a call that
  // fails at once answers 404 or 400, not 200 and an error line.
  std::string json;
  if (!state->stream->Next(&json)) {
    const absl::Status s = state->stream->Finish();
    if (!s.ok()) return SendError(res, s);
    res.set_content("", "application/x-ndjson");
    return;
  }
  state->line = absl::StrCat("{\"result\":", json, "}\n");
  JsonStream* stream = state->stream.get();
  state->cancel = [stream] { stream->Cancel(); };
  Track(state.get());
  res.set_chunked_content_provider(
      "application/x-ndjson",
      [state](size_t, httplib::DataSink& sink) {
        if (!sink.write(state->line.data(), state->line.size())) {
          state->stream->Cancel();
          return false;
        }
        std::string next;
        if (state->stream->Next(&next)) {
          state->line = absl::StrCat("{\"result\":", next, "}\n");
          return true;
        }
        state->finished = true;
        const absl::Status s = state->stream->Finish();
        if (!s.ok()) {
          const std::string error =
              absl::StrCat("{\"error\":", ErrorJson(s), "}\n");
          sink.write(error.data(), error.size());
        }
        sink.done();
        return true;
      },
      [this, state](bool) {
        if (!state->finished) {
          state->stream->Cancel();
          (void)state->stream->Finish();
          state->finished = true;
        }
        Untrack(state.get());
      });
}

void HttpGateway::Impl::Npy(const httplib::Request& req,
                            httplib::Response& res) {
  // A stream cannot start mid-way: a resumed download would get the start
  // again under a 206, so ranges are refused, not ignored.
  res.set_header("Accept-Ranges", "none");
  if (req.has_header("Range")) {
    Refuse(req, res,
           absl::InvalidArgumentError(
               "/v1/tensor.npy cannot send a byte range; download it whole, "
               "or name a part of the tensor with ?slice="),
           416);
    return;
  }
  absl::StatusOr<v1::ReadSliceRequest> request = ReadSliceFromQuery(req.params);
  if (!request.ok()) return Refuse(req, res, request.status());
  // The messages are read unparsed and their data written from where the
  // in-process channel hands it over (proto/received_chunk.h): no copy of
  // the tensor's bytes between the service's buffer and the socket.
  struct State : Sending {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader;
    grpc::ByteBuffer message;
    ReceivedChunk chunk;
    std::vector<absl::string_view> data;  // chunk's, as pieces
    int64_t left = 0;                     // data bytes still to send
    size_t sent = 0;                      // bytes written, the header included
    bool finished = false;
    // The next message, viewed; false at the end, or on a malformed one
    // (which cancels the call).
    bool Next() {
      if (!reader->Read(&message)) return false;
      const size_t size = message.Length();
      if (chunk.Parse(&message)) {
        chunk.DataPieces(&data);
        return true;
      }
      spdlog::error(
          "GET /v1/tensor.npy: a ReadSlice message ({} bytes) does not parse "
          "as a SliceChunk",
          size);
      context.TryCancel();
      return false;
    }
  };
  auto state = std::make_shared<State>();
  if (absl::Status s = ApplyOrigin(OriginOf(req), &state->context); !s.ok()) {
    return Refuse(req, res, s);
  }
  state->reader = rpc_.ReadSliceBytes(&state->context, *request);
  if (!state->Next()) {
    absl::Status s = FromGrpcStatus(state->reader->Finish());
    if (s.ok()) s = absl::InternalError("ReadSlice ended without a header");
    return SendError(res, s);
  }
  const v1::SliceHeader& h = state->chunk.fields().header();
  const std::vector<int64_t> shape(h.shape().begin(), h.shape().end());
  const NpyLayout layout = NpyLayoutFor(h.dtype(), shape, h.total_bytes());
  const std::string header = NpyHeader(layout.descr, layout.shape);
  state->left = h.total_bytes();
  state->cancel = [ctx = &state->context] { ctx->TryCancel(); };
  Track(state.get());
  res.set_header("Content-Disposition",
                 absl::StrCat("attachment; filename=\"",
                              FileNameOf(request->tensor(), ".npy"), "\""));
  // With the length known up front, a download that ends short is an error
  // the client sees, not a silently shorter array.
  res.set_content_provider(
      header.size() + static_cast<size_t>(h.total_bytes()),
      "application/octet-stream",
      [state, header](size_t offset, size_t, httplib::DataSink& sink) {
        // The bytes go out in order from the first; a request for any
        // other offset is not this stream's to answer.
        if (offset != state->sent) return false;
        if (state->sent == 0) {
          if (!sink.write(header.data(), header.size())) return false;
          state->sent += header.size();
        }
        const size_t n = state->chunk.data_size();
        if (static_cast<int64_t>(n) > state->left) return false;
        for (const absl::string_view piece : state->data) {
          if (!sink.write(piece.data(), piece.size())) return false;
        }
        state->sent += n;
        state->left -= static_cast<int64_t>(n);
        if (state->left == 0) return true;  // httplib ends at the length
        // Ends short (the call failed, or sent less than its header said):
        // returning false drops the connection mid-body.
        return state->Next();
      },
      [this, state](bool) {
        if (!state->finished) {
          state->finished = true;
          // Every byte sent: the call's status is on its way, and cancelling
          // now would end a whole download as CANCELLED. Else the client
          // went away, or the call failed: end it now.
          if (state->left > 0) state->context.TryCancel();
          while (state->reader->Read(&state->message)) {
          }
          const absl::Status s = FromGrpcStatus(state->reader->Finish());
          if (!s.ok() && state->left > 0) {
            spdlog::warn("GET /v1/tensor.npy ended {} bytes short: {}",
                         state->left, s.ToString());
          }
        }
        Untrack(state.get());
      });
}

void HttpGateway::Impl::HeatmapPng(const httplib::Request& req,
                                   httplib::Response& res) {
  absl::StatusOr<v1::GetHeatmapRequest> request = HeatmapFromQuery(req.params);
  if (!request.ok()) return Refuse(req, res, request.status());
  grpc::ClientContext context;
  if (absl::Status s = ApplyOrigin(OriginOf(req), &context); !s.ok()) {
    return Refuse(req, res, s);
  }
  v1::GetHeatmapResponse heatmap;
  // As for POST calls (Rpc): a client that leaves cancels the heatmap.
  const std::shared_ptr<void> watching =
      watch_.Watch(ServedConnectionSocket(), &context);
  const grpc::Status s = rpc_.stub().GetHeatmap(&context, *request, &heatmap);
  if (!s.ok()) return SendError(res, FromGrpcStatus(s));
  const std::string mode = req.has_param("mode") ? req.get_param_value("mode")
                                                 : std::string("value");
  const Image image =
      RenderHeatmap(heatmap, absl::StrCat(heatmap.tensor(), "  ", mode),
                    StyleFor(request->mode()));
  absl::StatusOr<std::string> png = image.EncodePng();
  if (!png.ok()) return SendError(res, png.status());
  res.set_header("Cache-Control", "no-store");
  SendHeld(req, res, *std::move(png), "image/png");
}

void HttpGateway::Impl::Asset(const httplib::Request& req,
                              httplib::Response& res) {
  const std::string path = req.path == "/" ? "/index.html" : req.path;
  if (!IsAssetPath(path)) {
    return SendError(
        res, absl::NotFoundError(absl::StrCat("no such page: ", req.path)));
  }
  if (absl::EndsWith(path, ".html")) {
    // Names shown on the page come from files; a name that smuggles markup
    // in still cannot run a script from anywhere but this server.
    res.set_header("Content-Security-Policy",
                   "default-src 'self'; img-src 'self' data: blob:; "
                   "style-src 'self' 'unsafe-inline'; object-src 'none'; "
                   "base-uri 'none'");
  }
  res.set_header("Cache-Control", "no-cache");
  if (!options_.assets_dir.empty()) {
    std::ifstream in(options_.assets_dir + path, std::ios::binary);
    std::ostringstream data;
    if (in && (data << in.rdbuf())) {
      SendBody(req, res, data.str(), ContentTypeOf(path));
      return;
    }
  }
  const WebAsset* asset = FindWebAsset(path);
  if (asset == nullptr) {
    return SendError(
        res, absl::NotFoundError(absl::StrCat("no such page: ", req.path)));
  }
  SendBody(req, res,
           std::string(reinterpret_cast<const char*>(asset->data), asset->size),
           ContentTypeOf(path));
}

HttpGateway::HttpGateway(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpGateway::~HttpGateway() { Stop(); }

void HttpGateway::BeginDrain() { impl_->BeginDrain(); }
bool HttpGateway::WaitIdle(absl::Duration timeout) {
  return impl_->WaitIdle(timeout);
}
void HttpGateway::CancelAll() { impl_->CancelAll(); }

absl::StatusOr<std::unique_ptr<HttpGateway>> HttpGateway::Start(
    HttpGatewayOptions options, std::shared_ptr<grpc::Channel> channel) {
  auto impl = std::make_unique<Impl>(std::move(options), std::move(channel));
  int port = 0;
  std::string url;
  if (absl::Status s = impl->Bind(&port, &url); !s.ok()) return s;
  std::unique_ptr<HttpGateway> gateway(new HttpGateway(std::move(impl)));
  gateway->port_ = port;
  gateway->url_ = url;
  return gateway;
}

bool HttpGateway::Stop(absl::Duration timeout) { return impl_->Stop(timeout); }

}  // namespace tensormorph
