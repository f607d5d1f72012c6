// A connection's bytes as cpp-httplib's request processing reads and writes
// them (httplib::Stream), over a plain socket or a TLS session on one: the
// gateway serves its connections itself (peer_fair_server.h), and Debian's
// cpp-httplib, a compiled library, keeps its own streams out of its header.
//
// Semantics are httplib's SocketStream's and SSLSocketStream's: a read or a
// write waits for the socket at most its timeout and then fails (-1); a
// write also fails once the peer has closed its end, so a response to a
// client that went away stops at its next write.
#ifndef TENSORMORPH_SERVER_HTTP_CONNECTION_STREAM_H_
#define TENSORMORPH_SERVER_HTTP_CONNECTION_STREAM_H_

#include <httplib.h>
#include <openssl/ssl.h>
#include <sys/socket.h>

#include <chrono>
#include <string>
#include <vector>

namespace tensormorph {

struct StreamTimeouts {
  std::chrono::milliseconds read{5000}, write{5000};
};

// What the two streams share: the socket, its timeouts, and a deadline
// for reads: a request must arrive whole (head and body) by it, however its
// bytes trickle (each read's own timeout alone would let a byte every few
// seconds hold the connection for good). Past it, a read takes what has
// come and waits for nothing more.
class ConnectionStream : public httplib::Stream {
 public:
  ConnectionStream(int fd, StreamTimeouts timeouts)
      : fd_(fd), timeouts_(timeouts) {}
  // max() (the default): none.
  void SetReadDeadline(std::chrono::steady_clock::time_point deadline) {
    deadline_ = deadline;
  }

  bool is_writable() const override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

 protected:
  // The read timeout cut to what is left before the deadline (0 past it).
  std::chrono::milliseconds ReadWait() const;

  const int fd_;
  const StreamTimeouts timeouts_;

 private:
  std::chrono::steady_clock::time_point deadline_ =
      std::chrono::steady_clock::time_point::max();
};

// The numeric host ("10.0.0.7", "::1") and port of `address`, as httplib
// reports a request's; left as they are for other families.
void NumericEndpoint(const sockaddr_storage& address, socklen_t len,
                     std::string& ip, int& port);

// True when `fd` turns readable (data, or the peer's close) within
// `timeout`; false on timeout or error. Retries on EINTR.
bool WaitReadable(int fd, std::chrono::milliseconds timeout);

// SSL_accept on `ssl` (set to `fd`) within `within` of now, however the
// client's handshake bytes trickle; false when it fails or takes longer.
// `fd` is left blocking, as it was.
bool AcceptTlsWithin(int fd, SSL* ssl, std::chrono::milliseconds within);

// A plain TCP connection. Reads go through a 4 KiB buffer, as httplib's do:
// its request parser reads a line a few bytes at a time.
class PlainStream final : public ConnectionStream {
 public:
  PlainStream(int fd, StreamTimeouts timeouts);

  // Bytes of the next request already read (a pipelined request), or the
  // socket readable within `timeout`.
  bool RequestWaiting(std::chrono::milliseconds timeout) const;
  // Bytes already read from the socket and not yet taken: they would be
  // lost with this stream.
  bool Buffered() const { return begin_ < end_; }

  bool is_readable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;

 private:
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0;  // unread bytes of buffer_
};

// A TLS session (an accepted SSL on a blocking socket) on `fd`.
class TlsStream final : public ConnectionStream {
 public:
  TlsStream(int fd, SSL* ssl, StreamTimeouts timeouts);

  bool RequestWaiting(std::chrono::milliseconds timeout) const;

  bool is_readable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;

 private:
  SSL* const ssl_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_HTTP_CONNECTION_STREAM_H_
