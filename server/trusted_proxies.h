// The peers whose X-Forwarded-For the log believes (tensormorphd
// --trusted-proxy CIDR): a reverse proxy or load balancer the operator runs.
// From any other peer the header is the client's own word, and a client
// could then log its calls under any address it liked.
#ifndef TENSORMORPH_SERVER_TRUSTED_PROXIES_H_
#define TENSORMORPH_SERVER_TRUSTED_PROXIES_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensormorph {

// A set of address ranges. Thread safety: const methods are thread-safe.
class TrustedProxies {
 public:
  // `cidrs`: "10.0.0.0/8", "192.168.1.7" (one host), "fd00::/8", "::1".
  // Errors: INVALID_ARGUMENT naming the first entry that is not an IPv4 or
  // IPv6 address with an optional prefix length in range.
  static absl::StatusOr<TrustedProxies> Parse(
      const std::vector<std::string>& cidrs);

  // True when `address` ("10.0.0.7", "::1", "[::1]", an IPv4-mapped IPv6
  // address) lies in one of the ranges; false for anything unparsable.
  bool Contains(absl::string_view address) const;
  bool empty() const { return ranges_.empty(); }

 private:
  struct Range {
    std::array<uint8_t, 16> address{};  // IPv4 as IPv4-mapped IPv6
    int prefix_bits = 0;                // of the 128
  };
  std::vector<Range> ranges_;
};

// The address part of a gRPC peer ("ipv4:10.0.0.7:5123" -> "10.0.0.7",
// "ipv6:[::1]:5123" or "ipv6:%5B::1%5D:5123" -> "::1"), or "" for a peer
// with none (in-process, unix sockets).
std::string PeerAddress(absl::string_view grpc_peer);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_TRUSTED_PROXIES_H_
