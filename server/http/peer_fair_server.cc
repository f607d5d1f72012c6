#include "server/http/peer_fair_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "core/util/error_reason.h"
#include "server/http/connection_stream.h"
#include "server/http/http_status.h"

namespace tensormorph {
namespace {

using std::chrono::milliseconds;

// The socket whose request this thread serves (ServedConnectionSocket).
thread_local int served_socket = -1;

// How often a connection waiting for its next request looks whether the
// server is stopping, so that a stop does not wait out the keep-alive.
constexpr milliseconds kStopCheck{200};

milliseconds Millis(time_t sec, time_t usec) {
  return milliseconds(int64_t{sec} * 1000 + int64_t{usec} / 1000);
}

// The peer's numeric address and "ADDRESS:PORT".
void PeerOf(int fd, sockaddr_storage* address, std::string* host,
            std::string* peer) {
  PlainStream probe(fd, StreamTimeouts{});
  int port = -1;
  probe.get_remote_ip_and_port(*host, port);
  *peer = absl::StrCat(*host, ":", port);
  socklen_t len = sizeof *address;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(address), &len) != 0) {
    address->ss_family = AF_UNSPEC;
  }
}

}  // namespace

int ServedConnectionSocket() { return served_socket; }

std::string ServedPeerKey() {
  sockaddr_storage address{};
  socklen_t len = sizeof address;
  if (served_socket < 0 ||
      ::getpeername(served_socket, reinterpret_cast<sockaddr*>(&address),
                    &len) != 0) {
    return "";
  }
  return PeerShareKey(address);
}

template <class Base>
void PeerFairServer<Base>::WidenBacklog() {
  const socket_t listening = this->svr_sock_;
  if (listening != INVALID_SOCKET) ::listen(listening, SOMAXCONN);
}

template <class Base>
bool PeerFairServer<Base>::process_and_close_socket(socket_t sock) {
  sockaddr_storage address{};
  std::string host, peer;
  PeerOf(sock, &address, &host, &peer);
  const std::string key = PeerShareKey(address);
  const bool unshared = options_.unshared && options_.unshared(host);
  switch (queue_->Arrive(key, sock, unshared)) {
    case PeerQueue::Verdict::kWait:
      return true;  // served by the thread that ends a connection of `key`
    case PeerQueue::Verdict::kRefuse:
      Refuse(sock, peer);
      return false;
    case PeerQueue::Verdict::kServe:
      break;
  }
  for (int fd = sock; fd >= 0; fd = queue_->Release(key)) Serve(fd);
  return true;
}

template <class Base>
template <class Stream>
void PeerFairServer<Base>::ServeRequests(Stream& stream, SSL* ssl) {
  const milliseconds keep_alive(int64_t{this->keep_alive_timeout_sec_} * 1000);
  bool served = false;
  for (size_t left = this->keep_alive_max_count_; left > 0; --left) {
    // The next request, or the keep-alive's end, or the server's stop.
    const auto deadline = std::chrono::steady_clock::now() + keep_alive;
    bool waiting = false;
    while (!waiting && this->svr_sock_ != INVALID_SOCKET) {
      const auto rest = std::chrono::duration_cast<milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (rest.count() <= 0) break;
      waiting = stream.RequestWaiting(std::min(rest, kStopCheck));
    }
    if (!waiting) break;
    bool closed = false;
    served_socket = stream.socket();
    served =
        this->process_request(stream, /*close_connection=*/left == 1, closed,
                              [ssl](httplib::Request& req) { req.ssl = ssl; });
    served_socket = -1;
    if (!served || closed) break;
  }
  if constexpr (std::is_same_v<Base, httplib::SSLServer>) {
    // A clean end says so (close_notify); a broken one just closes.
    if (served) SSL_shutdown(ssl);
  }
}

template <class Base>
void PeerFairServer<Base>::Serve(int fd) {
  const StreamTimeouts timeouts{
      Millis(this->read_timeout_sec_, this->read_timeout_usec_),
      Millis(this->write_timeout_sec_, this->write_timeout_usec_)};
  if constexpr (std::is_same_v<Base, httplib::SSLServer>) {
    // The socket blocks, bounded by the receive and send timeouts httplib's
    // accept loop set on it: a handshake that stalls ends at one of them.
    SSL* ssl = SSL_new(this->ssl_context());
    if (ssl != nullptr && SSL_set_fd(ssl, fd) == 1 && SSL_accept(ssl) == 1) {
      TlsStream stream(fd, ssl, timeouts);
      ServeRequests(stream, ssl);
    }
    SSL_free(ssl);
  } else {
    PlainStream stream(fd, timeouts);
    ServeRequests(stream, nullptr);
  }
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

template <class Base>
void PeerFairServer<Base>::Refuse(int fd, const std::string& peer) {
  const int asked = queue_->share() + queue_->waiting() + 1;
  const absl::Status status = LimitExceededError(
      absl::StrCat("the HTTP port holds ", queue_->share(),
                   " connections of this client address served and ",
                   queue_->waiting(),
                   " waiting, its limit (tensormorphd "
                   "--http-connections-per-peer): reuse or close idle "
                   "connections, or retry later"),
      "http_connections_per_peer", asked - 1, asked);
  if constexpr (!std::is_same_v<Base, httplib::SSLServer>) {
    // What the client already sent is read first: closing a socket with
    // unread bytes resets the connection, and the reset could discard the
    // answer before the client reads it.
    char sink[4096];
    for (int i = 0; i < 16 && ::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0;
         ++i) {
    }
    const std::string body = ErrorJson(status);
    const std::string response = absl::StrCat(
        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
        "Retry-After: 1\r\nConnection: close\r\nContent-Length: ",
        body.size(), "\r\n\r\n", body);
    (void)::send(fd, response.data(), response.size(),
                 MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
  if (!options_.on_refused) return;
  {
    // A flood is told once a second, not once a connection.
    std::lock_guard<std::mutex> lock(refusal_mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now - last_refusal_logged_ < std::chrono::seconds(1)) return;
    last_refusal_logged_ = now;
  }
  options_.on_refused(peer, std::string(status.message()));
}

template class PeerFairServer<httplib::Server>;
template class PeerFairServer<httplib::SSLServer>;

}  // namespace tensormorph
