#include "server/http/connection_stream.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace tensormorph {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// poll for `events` up to `timeout`, the wait resumed after a signal.
bool WaitFor(int fd, short events, milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (true) {
    const auto left =
        std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    pollfd p{fd, events, 0};
    const int n = ::poll(
        &p, 1, static_cast<int>(std::clamp<int64_t>(left.count(), 0, INT_MAX)));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

// False once the peer has closed its end: the socket reads end-of-file (or
// an error). Data waiting to be read is not a close. Never blocks.
bool PeerOpen(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return true;
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 ||
         (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}

void Endpoint(int fd, bool remote, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  auto* sa = reinterpret_cast<sockaddr*>(&a);
  if ((remote ? ::getpeername(fd, sa, &len) : ::getsockname(fd, sa, &len)) ==
      0) {
    NumericEndpoint(a, len, ip, port);
  }
}

constexpr size_t kReadBuffer = 4096;
// A TLS read that took a record without application data (a key update, a
// ticket) is retried while more comes, at most this many times.
constexpr int kTlsReadRetries = 64;

}  // namespace

void NumericEndpoint(const sockaddr_storage& address, socklen_t len,
                     std::string& ip, int& port) {
  if (address.ss_family == AF_INET) {
    port = ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
  } else if (address.ss_family == AF_INET6) {
    port = ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  } else {
    return;
  }
  char host[NI_MAXHOST];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&address), len, host,
                    sizeof host, nullptr, 0, NI_NUMERICHOST) == 0) {
    ip = host;
  }
}

bool WaitReadable(int fd, milliseconds timeout) {
  return WaitFor(fd, POLLIN, timeout);
}

bool AcceptTlsWithin(int fd, SSL* ssl, milliseconds within) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return false;
  const Clock::time_point deadline = Clock::now() + within;
  bool accepted = false;
  while (true) {
    const int r = SSL_accept(ssl);
    if (r == 1) {
      accepted = true;
      break;
    }
    const int error = SSL_get_error(ssl, r);
    const auto left =
        std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 ||
        (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) ||
        !WaitFor(fd, error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, left)) {
      break;
    }
  }
  ::fcntl(fd, F_SETFL, flags);
  return accepted;
}

milliseconds ConnectionStream::ReadWait() const {
  if (deadline_ == Clock::time_point::max()) return timeouts_.read;
  const auto left =
      std::chrono::duration_cast<milliseconds>(deadline_ - Clock::now());
  return std::clamp(left, milliseconds(0), timeouts_.read);
}

bool ConnectionStream::is_writable() const {
  return WaitFor(fd_, POLLOUT, timeouts_.write) && PeerOpen(fd_);
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip,
                                              int& port) const {
  Endpoint(fd_, /*remote=*/true, ip, port);
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  Endpoint(fd_, /*remote=*/false, ip, port);
}

PlainStream::PlainStream(int fd, StreamTimeouts timeouts)
    : ConnectionStream(fd, timeouts), buffer_(kReadBuffer) {}

bool PlainStream::RequestWaiting(milliseconds timeout) const {
  return begin_ < end_ || WaitReadable(fd_, timeout);
}

bool PlainStream::is_readable() const {
  // Past the deadline, what has come can still be read.
  return WaitReadable(fd_, ReadWait());
}

ssize_t PlainStream::read(char* ptr, size_t size) {
  if (begin_ < end_) {
    const size_t n = std::min(size, end_ - begin_);
    std::memcpy(ptr, buffer_.data() + begin_, n);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }
  if (!is_readable()) return -1;
  // A large read goes straight to the caller; a small one fills the buffer.
  const bool direct = size >= buffer_.size();
  ssize_t n;
  do {
    n = direct ? ::recv(fd_, ptr, size, 0)
               : ::recv(fd_, buffer_.data(), buffer_.size(), 0);
  } while (n < 0 && errno == EINTR);
  if (direct || n <= 0) return n;
  begin_ = 0;
  end_ = static_cast<size_t>(n);
  return read(ptr, size);
}

ssize_t PlainStream::write(const char* ptr, size_t size) {
  if (!is_writable()) return -1;
  ssize_t n;
  do {
    n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

TlsStream::TlsStream(int fd, SSL* ssl, StreamTimeouts timeouts)
    : ConnectionStream(fd, timeouts), ssl_(ssl) {}

bool TlsStream::RequestWaiting(milliseconds timeout) const {
  return SSL_pending(ssl_) > 0 || WaitReadable(fd_, timeout);
}

bool TlsStream::is_readable() const {
  return SSL_pending(ssl_) > 0 || WaitReadable(fd_, ReadWait());
}

ssize_t TlsStream::read(char* ptr, size_t size) {
  const int want = static_cast<int>(std::min<size_t>(size, INT_MAX));
  for (int attempt = 0; attempt < kTlsReadRetries; ++attempt) {
    if (!is_readable()) return -1;
    const int n = SSL_read(ssl_, ptr, want);
    if (n > 0) return n;
    if (SSL_get_error(ssl_, n) != SSL_ERROR_WANT_READ) return n == 0 ? 0 : -1;
  }
  return -1;
}

ssize_t TlsStream::write(const char* ptr, size_t size) {
  if (!is_writable()) return -1;
  // A blocking socket: SSL_write sends it all, or fails at the socket's
  // send timeout (SO_SNDTIMEO).
  const int n =
      SSL_write(ssl_, ptr, static_cast<int>(std::min<size_t>(size, INT_MAX)));
  return n > 0 ? n : -1;
}

}  // namespace tensormorph
