#include "server/trusted_proxies.h"

#include <arpa/inet.h>

#include <cstring>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace tensormorph {
namespace {

// `text` as a 16-byte address (IPv4 mapped into IPv6), and whether it was
// IPv4.
std::optional<std::pair<std::array<uint8_t, 16>, bool>> ParseAddress(
    absl::string_view text) {
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
  }
  const std::string s(text);
  std::array<uint8_t, 16> out{};
  in_addr v4;
  if (::inet_pton(AF_INET, s.c_str(), &v4) == 1) {
    out[10] = out[11] = 0xff;
    std::memcpy(out.data() + 12, &v4, 4);
    return std::make_pair(out, true);
  }
  in6_addr v6;
  if (::inet_pton(AF_INET6, s.c_str(), &v6) == 1) {
    std::memcpy(out.data(), &v6, 16);
    return std::make_pair(out, false);
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<TrustedProxies> TrustedProxies::Parse(
    const std::vector<std::string>& cidrs) {
  TrustedProxies proxies;
  for (const std::string& cidr : cidrs) {
    const size_t slash = cidr.find('/');
    const auto address = ParseAddress(absl::string_view(cidr).substr(0, slash));
    int bits = -1;
    if (address.has_value()) {
      const int max = address->second ? 32 : 128;
      if (slash == std::string::npos) {
        bits = max;
      } else if (!absl::SimpleAtoi(cidr.substr(slash + 1), &bits) || bits < 0 ||
                 bits > max) {
        bits = -1;
      }
      if (bits >= 0 && address->second) bits += 96;
    }
    if (bits < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("trusted proxy '", cidr,
                       "': expected an IPv4 or IPv6 address with an optional "
                       "/prefix-length (10.0.0.0/8, fd00::/8)"));
    }
    proxies.ranges_.push_back({address->first, bits});
  }
  return proxies;
}

bool TrustedProxies::Contains(absl::string_view address) const {
  const auto parsed = ParseAddress(address);
  if (!parsed.has_value()) return false;
  for (const Range& r : ranges_) {
    int bits = r.prefix_bits;
    bool match = true;
    for (size_t i = 0; i < 16 && bits > 0 && match; ++i, bits -= 8) {
      const uint8_t mask =
          bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
      match = (parsed->first[i] & mask) == (r.address[i] & mask);
    }
    if (match) return true;
  }
  return false;
}

std::string PeerAddress(absl::string_view grpc_peer) {
  absl::string_view rest;
  if (absl::StartsWith(grpc_peer, "ipv4:")) {
    rest = grpc_peer.substr(5);
  } else if (absl::StartsWith(grpc_peer, "ipv6:")) {
    rest = grpc_peer.substr(5);
  } else {
    return "";
  }
  const std::string unescaped =
      absl::StrReplaceAll(rest, {{"%5B", "["}, {"%5D", "]"}, {"%25", "%"}});
  const size_t colon = unescaped.rfind(':');
  if (colon == std::string::npos) return "";
  std::string host = unescaped.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

}  // namespace tensormorph
