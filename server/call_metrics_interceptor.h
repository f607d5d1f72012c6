// Counts every call of the server in one place: an interceptor on each call
// (our service, health and reflection alike) records its method, final
// status code and duration into CallStats when the call is over, whether it
// ended with a status its handler sent, refused by the auth interceptor, or
// cancelled (by the client, a deadline or the server) with none.
#ifndef TENSORMORPH_SERVER_CALL_METRICS_INTERCEPTOR_H_
#define TENSORMORPH_SERVER_CALL_METRICS_INTERCEPTOR_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>

#include "absl/strings/string_view.h"
#include "server/auth_interceptor.h"
#include "server/call_stats.h"

namespace tensormorph {

// "ReadSlice" for "/tensormorph.v1.Tensormorph/ReadSlice": what follows the
// last '/' (the whole name when there is none).
absl::string_view ShortMethodName(absl::string_view full_method);

// Creates, for each call, an interceptor that records into `stats`, under
// the call's short method name, when the server sees the call closed:
//  - the refusal's code when `refused` lists the call (the admission
//    interceptor ended it with that status: UNAUTHENTICATED, UNAVAILABLE,
//    UNIMPLEMENTED);
//  - else, when the call was cancelled before its status reached the client,
//    what the client saw: DEADLINE_EXCEEDED if its deadline has passed (or
//    nearly: the client's runs out first), CANCELLED otherwise;
//  - else the status the server sent.
// The duration runs from the call's arrival to its close. A call that ended
// refused is also counted once in refusals.h under its reason (the
// admission interceptor's, else RefusalReason of its code).
// Register it first, before the auth interceptor: its duration then covers
// the token check too, and an interceptor after it that ended calls without
// passing them on (hijacking) could not hide them. (The auth interceptor
// cancels refused calls instead, which every interceptor sees, so today the
// counts do not depend on the order.)
// REQUIRES: `stats` and `refused` outlive the server.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewCallMetricsInterceptorFactory(CallStats* stats, const RefusedCalls* refused);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_CALL_METRICS_INTERCEPTOR_H_
