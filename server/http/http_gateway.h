// tensormorphd's HTTP port (--http-listen): the web inspector's page, every
// RPC as JSON (POST /v1/<Method>), a tensor as .npy and a heatmap as PNG,
// Prometheus metrics and a health check. It is a client of the service: each
// request becomes a call on a channel to it (the server's in-process channel
// in tensormorphd), so sandbox, limits, auth and logging are the service's
// own, not a second implementation.
//
// Endpoints:
//   GET  /, /<file>        the inspector (compiled in; see web_assets.h)
//   POST /v1/<Method>      body: the request in protobuf's JSON mapping
//                          (Content-Type application/json). Unary: the
//                          response as JSON. Server-streaming: ndjson, one
//                          {"result": <message>} per line, flushed as
//                          produced; a failure after the first line ends the
//                          stream with {"error": {"code", "message"}}.
//                          GetHeatmap with Accept: application/octet-stream
//                          answers its cells as little-endian arrays
//                          (heatmap_cells.h), which the page reads.
//   GET  /v1/tensor.npy    ?checkpoint&tensor[&slice][&raw=1][&part=1]
//                          streamed with a Content-Length, never held whole,
//                          its bytes written from the service's own buffers
//                          (proto/received_chunk.h)
//   GET  /v1/heatmap.png   ?checkpoint&tensor[&mode][&ref][&width&height]
//                          [&rows=A:B&cols=C:D] (see http_query.h)
//   GET  /metrics          Prometheus text (HttpGatewayOptions::metrics)
//   GET  /healthz          200 "ok" while serving, 503 while draining
// Errors answer grpc-gateway's HTTP status for the code (http_status.h) and
// {"code": "NOT_FOUND", "message": ...}. The Authorization header is passed
// on as the call's metadata; CORS headers are sent only for the origin in
// HttpGatewayOptions::allow_origin.
// Before routing (request_guard.h): a request whose Host header is not one
// of the server's names is answered 421 (PERMISSION_DENIED), except on
// /healthz, which orchestrators probe by a pod's address and which tells
// nothing; a request with ambiguous framing is answered 400 and its
// connection closed. Every response carries X-Frame-Options: DENY and
// Content-Security-Policy frame-ancestors 'none'.
#ifndef TENSORMORPH_SERVER_HTTP_HTTP_GATEWAY_H_
#define TENSORMORPH_SERVER_HTTP_HTTP_GATEWAY_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tensormorph {

// A request the gateway refused itself, before or instead of a call to the
// service (a refusal by the service is the service's to log and count).
struct HttpRefusal {
  std::string peer;           // the socket's "ADDRESS:PORT"
  std::string forwarded_for;  // the request's X-Forwarded-For, verbatim
  std::string method;         // "GET", "POST"... (cpp-httplib knows them)
  std::string path;           // as sent: the client's bytes
  absl::StatusCode code;      // of the JSON error answered
  int http_status;
  // "host", "framing" or "draining" where the code alone does not say
  // why; else empty. A connection refused before its request was read
  // (peer_fair_server.h) has an empty method and path.
  std::string reason;
  std::string message;
};

struct HttpGatewayOptions {
  std::string listen;  // host:port; port 0 picks a free one
  // HTTPS with this certificate and key (PEM files), both or neither; with
  // a client CA, clients must present a certificate it signed.
  std::string tls_cert, tls_key, tls_client_ca;
  // The one origin ("https://dash.example:3000", or "*") whose pages may
  // call the API from a browser; empty = none (no CORS headers at all).
  std::string allow_origin;
  // Development: serve the page's files from this directory (client/web)
  // instead of the compiled-in copy, so an edit shows on reload.
  std::string assets_dir;
  // Threads serving HTTP requests; a request holds one from when it has
  // come whole until its response is written (a streaming one: to its
  // end). One client address has at most an eighth of them (at least 6).
  int threads = 64;
  // Connections one client address (an IPv6 /64) may have open at once;
  // its further ones wait their turn, up to twice as many (at least 16),
  // and past that are answered 429 (peer_fair_server.h). 0 = threads / 4.
  int connections_per_peer = 0;
  // Bytes of reply bodies (JSON, heatmap cells, PNG) the port may hold
  // built and not yet written, to one client address and to all; past
  // either a request is answered 429 LIMIT_EXCEEDED (a reply alone larger
  // still goes to a client holding nothing). tensormorphd passes its
  // --max-reply-bytes-per-peer and --max-reply-bytes-in-flight. <= 0 = none.
  int64_t max_reply_bytes_per_peer = 0, max_reply_bytes_in_flight = 0;
  // Addresses served without that share: a proxy whose connections are
  // many clients' (tensormorphd's --trusted-proxy). Unset = none.
  std::function<bool(const std::string& address)> unshared_peer;
  // Check each /v1 request's Authorization before reading its body (set when
  // the service has tokens): the service's interceptor judges it, through a
  // GetServerInfo call that carries it, so an unauthenticated client cannot
  // make the server read and hold large bodies.
  bool check_authorization_first = false;
  // The body of /metrics (Prometheus text); unset = 404.
  std::function<std::string()> metrics;
  // /healthz is 200 while this is true; unset = always.
  std::function<bool()> serving;
  // Host header names answered besides the localhost names and the listen
  // host ("inspector.example.com"; "*" = any: no DNS-rebinding check).
  std::vector<std::string> allow_hosts;
  // Told once of every request the gateway refuses itself; may be called
  // from many serving threads at once.
  std::function<void(const HttpRefusal&)> on_refused;
};

// Thread safety: BeginDrain, WaitIdle, CancelAll and Stop may be called from
// any thread.
class HttpGateway {
 public:
  // Binds and starts serving on a thread of its own.
  // Errors: INVALID_ARGUMENT (listen not host:port; one of cert/key alone;
  // a certificate or key that does not load); UNAVAILABLE (cannot bind).
  static absl::StatusOr<std::unique_ptr<HttpGateway>> Start(
      HttpGatewayOptions options, std::shared_ptr<grpc::Channel> channel);
  ~HttpGateway();

  int port() const { return port_; }
  // "http://host:port/" (https with TLS), as a browser opens it.
  std::string url() const { return url_; }

  // The first step of a graceful stop: new /v1 requests are answered 503
  // UNAVAILABLE ("draining"), while those in flight run on. Idempotent.
  void BeginDrain();
  // Waits until no /v1 request is in flight, or `timeout` passes; true when
  // none is. The server's own shutdown would end in-process calls at once,
  // so a graceful stop drains here first.
  bool WaitIdle(absl::Duration timeout);
  // Cancels the calls of every response still being sent (a second signal).
  void CancelAll();

  // Stops accepting, cancels the calls of streams still being sent, and
  // waits up to `timeout` for the serving threads; false when some are still
  // held by clients (a body trickling in, a full socket), which only the
  // process's exit then ends. Idempotent.
  bool Stop(absl::Duration timeout = absl::InfiniteDuration());

 private:
  class Impl;
  explicit HttpGateway(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::string url_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_HTTP_HTTP_GATEWAY_H_
