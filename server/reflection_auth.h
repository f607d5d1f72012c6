// Puts server reflection behind the bearer token. The reflection service is
// gRPC's own (a plugin), so it cannot check the token itself: an
// interceptor checks its calls' metadata and refuses them before they run.
// Only grpc.health.v1 stays open without a token.
#ifndef TENSORMORPH_SERVER_REFLECTION_AUTH_H_
#define TENSORMORPH_SERVER_REFLECTION_AUTH_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>

#include "server/auth.h"

namespace tensormorph {

// Creates, for each call to a grpc.reflection.* method, an interceptor that
// ends the call with UNAUTHENTICATED (TokenStore::CheckMetadata's message)
// when `tokens` refuses its metadata. Other methods get no interceptor.
// REQUIRES: `tokens` outlives the server.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewReflectionAuthInterceptorFactory(const TokenStore* tokens);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_REFLECTION_AUTH_H_
