// Whether a whole HTTP/1.1 request has arrived on a socket, judged from the
// bytes the kernel holds for it (MSG_PEEK: nothing is taken), so that a
// connection gets a serving thread only once its request is there to be
// read, however slowly a client sends it.
#ifndef TENSORMORPH_SERVER_HTTP_REQUEST_ARRIVAL_H_
#define TENSORMORPH_SERVER_HTTP_REQUEST_ARRIVAL_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace tensormorph {

// Bytes looked at; a request head longer than this is handed on as it is
// (cpp-httplib refuses heads past its own limit).
inline constexpr size_t kArrivalPeekBytes = 16 << 10;

enum class Arrival {
  kIncomplete,  // more bytes are to come: keep waiting
  kReady,       // a thread can read it without waiting on the client
};

// `buffered`: what the socket holds (at most kArrivalPeekBytes). Ready: the
// head is complete (a blank line) and its body has come: Content-Length
// bytes of it, or a chunked body's last chunk. Ready too when `buffered`
// is kArrivalPeekBytes long (a longer head or body: the thread reads the
// rest, under its deadline), the head's length is no number, or the head
// has an Expect (100-continue: its client waits to be told to send the
// body).
Arrival RequestArrival(absl::string_view buffered);

// For a TLS connection: its first record (a ClientHello) whole, by the
// length its 5-byte header gives; kReady too for bytes that are no
// handshake record (SSL_accept refuses them at once).
Arrival TlsHelloArrival(absl::string_view buffered);

// RequestArrival (or with `tls`, TlsHelloArrival) of what `fd` holds; kReady
// too on the peer's close or an error (the thread that reads it sees
// them). Never blocks.
Arrival SocketRequestArrival(int fd, bool tls = false);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_HTTP_REQUEST_ARRIVAL_H_
