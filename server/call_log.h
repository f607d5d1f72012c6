// One log line per call: method, peer, checkpoint, tensor, status, bytes and
// milliseconds, in the format --log-format chose (log_line.h), every
// supplied string escaped.
#ifndef TENSORMORPH_SERVER_CALL_LOG_H_
#define TENSORMORPH_SERVER_CALL_LOG_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "server/exception_fence.h"
#include "server/trusted_proxies.h"

namespace tensormorph {

// Who made a call, as the log names it.
struct CallPeer {
  // The transport's address, always: gRPC's peer ("ipv4:10.0.0.7:51234");
  // for a call the HTTP gateway makes over the in-process channel, its HTTP
  // client's socket ("http:10.0.0.7:51234"; server/gateway_metadata.h says
  // why only an in-process caller can say so).
  std::string address;
  // The client a trusted proxy (SetTrustedProxies) forwarded for, from its
  // X-Forwarded-For, verbatim; empty when the peer is not one. A header
  // from any other peer is the client's own word, and ignored.
  std::string forwarded_for;
  // For a call the HTTP gateway makes: "VERB PATH" of the request it
  // serves, as the gateway told (gateway_metadata.h); else empty.
  std::string http_route;
};

// The peers whose X-Forwarded-For is believed; none until set. Call once,
// before the server serves.
void SetTrustedProxies(TrustedProxies proxies);

// True when `address` ("10.0.0.7", "::1") is one of those proxies.
bool IsTrustedProxy(absl::string_view address);

// True for a gRPC peer that is this process's in-process channel (gRPC
// names it "unknown" in 1.51, "inproc..." elsewhere); network peers always
// have an address family ("ipv4:", "ipv6:", "unix:").
bool IsInProcessPeer(absl::string_view grpc_peer);

CallPeer PeerOf(const grpc::ServerContextBase& ctx);

// The peer whose fair share a call spends (core/util/peer_ledger.h): the client
// a trusted proxy forwarded for (the first address of its X-Forwarded-For),
// else the connection's host without its port; for the HTTP gateway's
// calls, the HTTP client's, so users of the web page do not share one
// in-process peer.
std::string SharePeer(const grpc::ServerContextBase& ctx);

// Logs a refused call once, at warning: its method, peer, code (its name)
// and the refusals.h reason, and the message it was refused with.
void LogRefusal(absl::string_view method, const CallPeer& peer,
                grpc::StatusCode code, absl::string_view reason,
                absl::string_view message);

// The peer of a request to the HTTP gateway: "http:" and its socket's
// "ADDRESS:PORT", and `forwarded_for` when that address is a trusted proxy.
CallPeer GatewayPeer(absl::string_view http_peer,
                     absl::string_view forwarded_for);

// Logs and counts (refusals.h) one HTTP request the gateway refused itself
// (HttpRefusal): "HTTP" with its verb and path (escaped), its socket's
// address as "http:ADDRESS:PORT" (and a trusted proxy's client), the
// code, HTTP status and reason (`reason`, else RefusalReason(code), else
// bad_request).
void RecordHttpRefusal(absl::string_view verb, absl::string_view path,
                       absl::string_view http_peer,
                       absl::string_view forwarded_for, grpc::StatusCode code,
                       int http_status, absl::string_view reason,
                       absl::string_view message);

class CallLog {
 public:
  CallLog(const char* method, grpc::CallbackServerContext* ctx,
          std::string checkpoint, std::string tensor);

  // Logs the call's outcome; errors other than cancellation at warning. A
  // call the admission interceptor refused (auth_interceptor.h) was logged
  // there: nothing is logged again.
  void Finish(const grpc::Status& status, int64_t bytes) const;

  // The call, for the exception fence; valid while this log lives.
  FenceSite site() const { return {method_, checkpoint_, tensor_}; }
  const char* method() const { return method_; }

 private:
  const char* method_;
  CallPeer peer_;
  std::string checkpoint_;
  std::string tensor_;
  absl::Time start_;
  bool logged_as_refused_ = false;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_CALL_LOG_H_
