// The servers a Client is given: `--server a:7431,b:7431,dns:///name:7431`
// parsed into its entries (what Client::Connect dials, one channel each), or
// resolved into one address per server (what `health` and `ls` ask one by
// one).
#ifndef TENSORMORPH_CLIENT_ENDPOINT_SET_H_
#define TENSORMORPH_CLIENT_ENDPOINT_SET_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensormorph {

// The addresses ("a.b.c.d:port", "[v6]:port") `host` resolves to now, for
// `port`; an error's message says why it does not resolve. Tests give one
// of their own.
using Resolver = std::function<absl::StatusOr<std::vector<std::string>>(
    const std::string& host, const std::string& port)>;

// The system resolver (getaddrinfo), every address of either family.
absl::StatusOr<std::vector<std::string>> ResolveWithGetaddrinfo(
    const std::string& host, const std::string& port);

// Whether an entry of `targets` is a dns:/// name: its addresses may change,
// so a Client leaves resolving it to gRPC (round_robin over them all).
bool HasDnsName(absl::string_view targets);

// Whether `targets` names more than one plain target: a comma-separated
// list, or a `dns:///` name (which may resolve to several addresses). A
// single plain "host:port" (or any other gRPC target) is not: the Client
// then dials it as it always has.
bool IsEndpointList(absl::string_view targets);

// The endpoints of a comma-separated list of targets, each `host:port` (one
// endpoint, as written) or `dns:///host:port` (every address the name
// resolves to now, IPv4 as "a.b.c.d:port" and IPv6 as "[addr]:port", one
// endpoint each, as a headless Service's name resolves to every pod), in
// the order given, each address once.
// Spaces around an entry are ignored (" a:1, b:2").
// Errors: INVALID_ARGUMENT naming an entry that is empty (`a:1,,b:2`), has
// no port ("entry 1 '127.0.0.1' has no port": gRPC would dial a default
// one), or is a dns:/// name with an authority or no port;
// UNAVAILABLE naming a dns:/// name that does not resolve (and why).
// `resolver` resolves each dns:/// name.
absl::StatusOr<std::vector<std::string>> ResolveEndpoints(
    absl::string_view targets,
    const Resolver& resolver = ResolveWithGetaddrinfo);

// The entries of a comma-separated list as written (spaces around them
// trimmed), each once, in the order given: "host:port" and
// "dns:///name:port" alike, nothing resolved.
// Errors: INVALID_ARGUMENT as ResolveEndpoints'.
absl::StatusOr<std::vector<std::string>> ServerListEntries(
    absl::string_view targets);

// The syntax of a --server value, checked before anything is dialed or
// resolved, so that a malformed one is a usage error: ResolveEndpoints'
// INVALID_ARGUMENT for a list; for one target that is not a list,
// INVALID_ARGUMENT when it is empty or has no colon (a bare host, which
// gRPC would dial at a default port); any other gRPC target passes.
absl::Status CheckServerList(absl::string_view targets);

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_ENDPOINT_SET_H_
