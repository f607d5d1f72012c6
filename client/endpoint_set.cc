#include "client/endpoint_set.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tensormorph {
namespace {

constexpr absl::string_view kDnsScheme = "dns:///";

// "host:port" or "[v6]:port" split at the port's colon.
absl::Status SplitHostPort(absl::string_view entry, absl::string_view what,
                           std::string* host, std::string* port) {
  const size_t colon = entry.rfind(':');
  const size_t bracket = entry.rfind(']');
  if (colon == absl::string_view::npos ||
      (bracket != absl::string_view::npos && colon < bracket)) {
    // gRPC would dial a default port; a server list names its ports.
    return absl::InvalidArgumentError(
        absl::StrCat("server list entry ", what, " '", entry,
                     "' has no port (want host:port or dns:///name:port)"));
  }
  uint32_t number = 0;
  if (colon == 0 || !absl::SimpleAtoi(entry.substr(colon + 1), &number) ||
      number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("server list entry ", what, " '", entry,
                     "' is not host:port (a port from 0 to 65535)"));
  }
  *host = std::string(entry.substr(0, colon));
  *port = std::string(entry.substr(colon + 1));
  return absl::OkStatus();
}

absl::Status Resolve(absl::string_view entry, absl::string_view what,
                     const Resolver& resolver, std::vector<std::string>* out) {
  absl::string_view name = entry.substr(kDnsScheme.size());
  std::string host, port;
  if (absl::Status s = SplitHostPort(name, what, &host, &port); !s.ok()) {
    return s;
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  auto found = resolver(host, port);
  if (!found.ok()) {
    return absl::UnavailableError(
        absl::StrCat("server list entry ", what, " '", entry,
                     "' does not resolve: ", found.status().message()));
  }
  for (std::string& a : *found) out->push_back(std::move(a));
  return absl::OkStatus();
}

// The endpoints of `targets` (ResolveEndpoints), or with no `resolve` its
// entries as written (ServerListEntries), dns:/// names checked, not
// resolved.
absl::StatusOr<std::vector<std::string>> ParseEndpoints(
    absl::string_view targets, const Resolver* resolve) {
  std::vector<std::string> out;
  int position = 0;
  for (absl::string_view entry : absl::StrSplit(targets, ',')) {
    // " a:1, b:2" as a shell user writes it.
    entry = absl::StripAsciiWhitespace(entry);
    const std::string what = absl::StrCat(++position);
    if (entry.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "server list '", targets, "': entry ", what,
          " is empty (want host:port or dns:///name:port, separated by "
          "commas)"));
    }
    if (absl::StartsWith(entry, kDnsScheme)) {
      if (resolve == nullptr) {
        std::string host, port;
        if (absl::Status s = SplitHostPort(entry.substr(kDnsScheme.size()),
                                           what, &host, &port);
            !s.ok()) {
          return s;
        }
        out.emplace_back(entry);
        continue;
      }
      if (absl::Status s = Resolve(entry, what, *resolve, &out); !s.ok())
        return s;
      continue;
    }
    if (absl::StartsWith(entry, "dns:")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "server list entry ", what, " '", entry,
          "': only dns:///name:port (no DNS server authority) is supported"));
    }
    std::string host, port;
    if (absl::Status s = SplitHostPort(entry, what, &host, &port); !s.ok()) {
      return s;
    }
    out.emplace_back(entry);
  }
  // The same server named twice would get twice the calls.
  std::vector<std::string> unique;
  for (std::string& e : out) {
    if (std::find(unique.begin(), unique.end(), e) == unique.end()) {
      unique.push_back(std::move(e));
    }
  }
  return unique;
}

}  // namespace

bool IsEndpointList(absl::string_view targets) {
  return absl::StrContains(targets, ',') ||
         absl::StartsWith(absl::StripAsciiWhitespace(targets), kDnsScheme) ||
         absl::StripAsciiWhitespace(targets) != targets;
}

absl::Status CheckServerList(absl::string_view targets) {
  if (absl::StripAsciiWhitespace(targets).empty()) {
    return absl::InvalidArgumentError(
        "empty server address (want host:port, or several separated by "
        "commas, each host:port or dns:///name:port)");
  }
  if (!IsEndpointList(targets)) {
    // Any gRPC target ("unix:/path", "ipv4:...") has a colon; a bare host
    // would be dialed at a default port.
    if (!absl::StrContains(targets, ':')) {
      return absl::InvalidArgumentError(
          absl::StrCat("server list entry 1 '", targets,
                       "' has no port (want host:port or dns:///name:port)"));
    }
    // A gRPC URI (scheme://..., or one of the schemes gRPC takes without
    // the slashes) names its own address form; anything else is
    // host:port, whose port must be a number (or it fails later as a
    // name that does not resolve).
    if (absl::StrContains(targets, "://")) return absl::OkStatus();
    for (absl::string_view scheme :
         {"unix:", "unix-abstract:", "ipv4:", "ipv6:", "dns:", "vsock:"}) {
      if (absl::StartsWith(targets, scheme)) return absl::OkStatus();
    }
    std::string host, port;
    return SplitHostPort(targets, "1", &host, &port);
  }
  return ParseEndpoints(targets, /*resolve=*/nullptr).status();
}

absl::StatusOr<std::vector<std::string>> ResolveWithGetaddrinfo(
    const std::string& host, const std::string& port) {
  struct addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(::gai_strerror(rc));
  }
  std::vector<std::string> out;
  for (struct addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
      out.push_back(absl::StrCat(text, ":", port));
    } else if (a->ai_family == AF_INET6) {
      const auto* in = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      ::inet_ntop(AF_INET6, &in->sin6_addr, text, sizeof(text));
      out.push_back(absl::StrCat("[", text, "]:", port));
    }
  }
  ::freeaddrinfo(found);
  return out;
}

bool HasDnsName(absl::string_view targets) {
  for (absl::string_view entry : absl::StrSplit(targets, ',')) {
    if (absl::StartsWith(absl::StripAsciiWhitespace(entry), kDnsScheme)) {
      return true;
    }
  }
  return false;
}

absl::StatusOr<std::vector<std::string>> ServerListEntries(
    absl::string_view targets) {
  return ParseEndpoints(targets, /*resolve=*/nullptr);
}

absl::StatusOr<std::vector<std::string>> ResolveEndpoints(
    absl::string_view targets, const Resolver& resolver) {
  return ParseEndpoints(targets, &resolver);
}

}  // namespace tensormorph
