// Admission in one place: an interceptor on every call of the server (our
// service and gRPC's reflection alike) decides, from the call's method and
// metadata and before its handler runs, whether the call may run at all:
//  - UNAVAILABLE while the server drains (TensormorphServer::BeginDrain),
//    from the drain's first moment, so a call is never admitted and then
//    cut when the shutdown's grace ends. In-process calls are exempt: they
//    are the HTTP gateway's, which refuses new requests itself and whose
//    requests in flight must finish;
//  - UNIMPLEMENTED for a method the server does not have;
//  - UNAUTHENTICATED when tokens are set and the call's metadata has none
//    of them.
// Only grpc.health.v1 stays open without a token and while draining, so
// load balancers and orchestrators can probe a server they hold no token
// for, and see it go NOT_SERVING.
// A refused call is logged here, once (call_log.h), with the transport's
// peer, its method and code; its handler logs nothing.
#ifndef TENSORMORPH_SERVER_AUTH_INTERCEPTOR_H_
#define TENSORMORPH_SERVER_AUTH_INTERCEPTOR_H_

#include <grpcpp/support/server_interceptor.h>

#include <atomic>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/auth.h"

namespace tensormorph {

// The calls the interceptor refused, while they last. gRPC runs a handler
// even for a call an interceptor has already ended; a handler asks here
// first, so a refused call opens no file, takes no slot and does no work.
// Thread safety: all methods are thread-safe.
class RefusedCalls {
 public:
  struct Refusal {
    grpc::StatusCode code;
    absl::string_view reason;  // refusals.h's, a literal
  };
  bool Contains(const grpc::ServerContextBase* ctx) const;
  // What the call was refused with; UNKNOWN/"" when it was not.
  Refusal Find(const grpc::ServerContextBase* ctx) const;
  void Add(const grpc::ServerContextBase* ctx, Refusal refusal);
  void Remove(const grpc::ServerContextBase* ctx);

  // Whether any server's interceptor refused `ctx` (a context is one call's
  // wherever it is): how the call log, which has no server at hand, knows
  // the refusal is logged already.
  static bool RefusedAnywhere(const grpc::ServerContextBase* ctx);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<const grpc::ServerContextBase*, Refusal> calls_
      ABSL_GUARDED_BY(mu_);
};

// Creates, for each call to a method outside grpc.health.v1, an interceptor
// that ends the call as the header says (UNAUTHENTICATED with
// TokenStore::CheckMetadata's message when `tokens` refuses its metadata;
// UNAVAILABLE for a network call while `*draining`; UNIMPLEMENTED for a
// method no service has), logs it, and lists it in `refused` until the call
// is over. Health calls get no interceptor.
// REQUIRES: `tokens`, `refused` and `draining` outlive the server.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewAuthInterceptorFactory(const TokenStore* tokens, RefusedCalls* refused,
                          const std::atomic<bool>* draining);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_AUTH_INTERCEPTOR_H_
