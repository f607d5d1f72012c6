// The metadata by which tensormorphd's HTTP gateway tells the service who an
// HTTP request came from. The gateway is linked into tensormorphd and calls
// over the server's in-process channel; the server believes these keys only
// on an in-process call (server/call_log.h), which nothing outside the
// process can make, so a network client that sends them is ignored. The
// gateway sets them from its socket (and from the request's X-Forwarded-For,
// which the server then believes only when that socket's address is a
// --trusted-proxy), never by copying a request header of the same name.
#ifndef TENSORMORPH_SERVER_GATEWAY_METADATA_H_
#define TENSORMORPH_SERVER_GATEWAY_METADATA_H_

namespace tensormorph {

// "ADDRESS:PORT" of the HTTP client's TCP connection.
inline constexpr char kGatewayPeerKey[] = "tensormorph-gateway-peer";
// The HTTP request's X-Forwarded-For, verbatim (absent when it had none).
inline constexpr char kGatewayForwardedForKey[] =
    "tensormorph-gateway-forwarded-for";
// "VERB PATH" of the HTTP request the call serves: a call it makes for
// another purpose (the token check before a body is read) is then logged
// under the request it was made for.
inline constexpr char kGatewayRouteKey[] = "tensormorph-gateway-route";

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_GATEWAY_METADATA_H_
