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

namespace tensormorph {
namespace {

constexpr absl::string_view kDnsScheme = "dns:///";

// "host:port" or "[v6]:port" split at the port's colon.
absl::Status SplitHostPort(absl::string_view entry, absl::string_view what,
                           std::string* host, std::string* port) {
  const size_t colon = entry.rfind(':');
  uint32_t number = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(entry.substr(colon + 1), &number) || number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("server list entry ", what, " '", entry,
                     "' is not host:port (a port from 0 to 65535)"));
  }
  *host = std::string(entry.substr(0, colon));
  *port = std::string(entry.substr(colon + 1));
  return absl::OkStatus();
}

absl::Status Resolve(absl::string_view entry, absl::string_view what,
                     std::vector<std::string>* out) {
  absl::string_view name = entry.substr(kDnsScheme.size());
  std::string host, port;
  if (absl::Status s = SplitHostPort(name, what, &host, &port); !s.ok()) {
    return s;
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  struct addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("server list entry ", what, " '", entry,
                     "' does not resolve: ", ::gai_strerror(rc)));
  }
  for (struct addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
      out->push_back(absl::StrCat(text, ":", port));
    } else if (a->ai_family == AF_INET6) {
      const auto* in = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      ::inet_ntop(AF_INET6, &in->sin6_addr, text, sizeof(text));
      out->push_back(absl::StrCat("[", text, "]:", port));
    }
  }
  ::freeaddrinfo(found);
  return absl::OkStatus();
}

}  // namespace

bool IsEndpointList(absl::string_view targets) {
  return absl::StrContains(targets, ',') ||
         absl::StartsWith(targets, kDnsScheme);
}

absl::StatusOr<std::vector<std::string>> ResolveEndpoints(
    absl::string_view targets) {
  std::vector<std::string> out;
  int position = 0;
  for (absl::string_view entry : absl::StrSplit(targets, ',')) {
    const std::string what = absl::StrCat(++position);
    if (entry.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "server list '", targets, "': entry ", what,
          " is empty (want host:port or dns:///name:port, separated by "
          "commas)"));
    }
    if (absl::StartsWith(entry, kDnsScheme)) {
      if (absl::Status s = Resolve(entry, what, &out); !s.ok()) return s;
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

}  // namespace tensormorph
