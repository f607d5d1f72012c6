#include "server/http/request_arrival.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace tensormorph {

Arrival RequestArrival(absl::string_view buffered) {
  if (buffered.size() >= kArrivalPeekBytes) return Arrival::kReady;
  const size_t blank = buffered.find("\r\n\r\n");
  if (blank == absl::string_view::npos) return Arrival::kIncomplete;
  const size_t head_end = blank + 4;
  const absl::string_view body = buffered.substr(head_end);
  // The framing headers (CheckFraming refuses two of one, and both, once
  // the thread reads the head).
  bool chunked = false, expect = false;
  absl::string_view length_text;
  for (absl::string_view line :
       absl::StrSplit(buffered.substr(0, blank), "\r\n")) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    const absl::string_view name = line.substr(0, colon);
    if (absl::EqualsIgnoreCase(name, "Expect")) expect = true;
    if (absl::EqualsIgnoreCase(name, "Transfer-Encoding")) chunked = true;
    if (absl::EqualsIgnoreCase(name, "Content-Length") && length_text.empty()) {
      length_text = absl::StripAsciiWhitespace(line.substr(colon + 1));
    }
  }
  // The client sends its body only once told to go on (100 Continue),
  // which the thread does.
  if (expect) return Arrival::kReady;
  if (chunked) {
    // Its end: the blank line after the last chunk (with or without an
    // extension or trailers). A false find inside the data only hands it
    // on early; a body past the bytes looked at, once they are full.
    return absl::StrContains(body, "\r\n\r\n") ? Arrival::kReady
                                               : Arrival::kIncomplete;
  }
  if (length_text.empty()) return Arrival::kReady;  // no body
  uint64_t length = 0;
  if (!absl::SimpleAtoi(length_text, &length)) {
    return Arrival::kReady;  // the thread refuses it
  }
  // A body longer than the bytes looked at is handed on once they are full
  // (above): a thread then reads the rest at the client's speed.
  return body.size() >= length ? Arrival::kReady : Arrival::kIncomplete;
}

Arrival TlsHelloArrival(absl::string_view buffered) {
  if (buffered.size() >= kArrivalPeekBytes) return Arrival::kReady;
  if (buffered.empty()) return Arrival::kIncomplete;
  constexpr unsigned char kHandshake = 0x16;
  if (static_cast<unsigned char>(buffered[0]) != kHandshake) {
    return Arrival::kReady;
  }
  if (buffered.size() < 5) return Arrival::kIncomplete;
  const size_t length =
      static_cast<size_t>((static_cast<unsigned char>(buffered[3]) << 8) |
                          static_cast<unsigned char>(buffered[4]));
  return buffered.size() >= 5 + length ? Arrival::kReady : Arrival::kIncomplete;
}

Arrival SocketRequestArrival(int fd, bool tls) {
  // One buffer per thread (the parking's): looked at on every arrival.
  thread_local std::string buffer(kArrivalPeekBytes, '\0');
  ssize_t n;
  do {
    n = ::recv(fd, buffer.data(), buffer.size(), MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    return Arrival::kIncomplete;
  }
  if (n <= 0) return Arrival::kReady;  // closed, or an error
  const absl::string_view buffered(buffer.data(), static_cast<size_t>(n));
  return tls ? TlsHelloArrival(buffered) : RequestArrival(buffered);
}

}  // namespace tensormorph
