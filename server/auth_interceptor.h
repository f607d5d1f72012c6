// Bearer-token authentication in one place: an interceptor on every call of
// the server (our service and gRPC's reflection alike) checks the call's
// metadata before its handler runs, and ends a refused call with
// UNAUTHENTICATED. Only grpc.health.v1 stays open without a token, so load
// balancers and orchestrators can probe a server they hold no token for.
#ifndef TENSORMORPH_SERVER_AUTH_INTERCEPTOR_H_
#define TENSORMORPH_SERVER_AUTH_INTERCEPTOR_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "server/auth.h"

namespace tensormorph {

// The calls the interceptor refused, while they last. gRPC runs a handler
// even for a call an interceptor has already ended; a handler asks here
// first, so a refused call opens no file, takes no slot and does no work.
// Thread safety: all methods are thread-safe.
class RefusedCalls {
 public:
  bool Contains(const grpc::ServerContextBase* ctx) const {
    absl::MutexLock lock(&mu_);
    return calls_.contains(ctx);
  }
  void Add(const grpc::ServerContextBase* ctx) {
    absl::MutexLock lock(&mu_);
    calls_.insert(ctx);
  }
  void Remove(const grpc::ServerContextBase* ctx) {
    absl::MutexLock lock(&mu_);
    calls_.erase(ctx);
  }

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_set<const grpc::ServerContextBase*> calls_
      ABSL_GUARDED_BY(mu_);
};

// Creates, for each call to a method outside grpc.health.v1, an interceptor
// that ends the call with UNAUTHENTICATED (TokenStore::CheckMetadata's
// message) when `tokens` refuses its metadata, and lists it in `refused`
// until the call is over. Health calls get no interceptor.
// REQUIRES: `tokens` and `refused` outlive the server.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewAuthInterceptorFactory(const TokenStore* tokens, RefusedCalls* refused);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_AUTH_INTERCEPTOR_H_
