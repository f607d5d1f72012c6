#include "server/http/peer_fair_server.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <type_traits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/util/error_reason.h"
#include "server/http/connection_stream.h"
#include "server/http/http_status.h"

namespace tensormorph {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// The connection whose request this thread serves (ServedConnectionSocket),
// and whether it is to end after the response (CloseConnectionAfterResponse).
thread_local int served_socket = -1;
thread_local bool close_after_response = false;

// The share key prefix of a trusted proxy's connections: no thread cap.
constexpr absl::string_view kUnsharedKey = "proxy ";

// How often a connection waiting for its next request looks whether the
// server is stopping, so that a stop does not wait out the keep-alive.
constexpr milliseconds kStopCheck{200};

milliseconds Millis(time_t sec, time_t usec) {
  return milliseconds(int64_t{sec} * 1000 + int64_t{usec} / 1000);
}

// The peer's numeric address and "ADDRESS:PORT".
void PeerOf(int fd, sockaddr_storage* address, std::string* host,
            std::string* peer) {
  socklen_t len = sizeof *address;
  int port = -1;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(address), &len) == 0) {
    NumericEndpoint(*address, len, *host, port);
  } else {
    address->ss_family = AF_UNSPEC;
  }
  *peer = absl::StrCat(*host, ":", port);
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

void CloseConnectionAfterResponse() { close_after_response = true; }

// httplib's task queue for its accept loop: each accepted connection is
// admitted at once on the accept thread (process_and_close_socket), and
// served later by this queue's own pool, from the parking.
template <class Base>
class PeerFairServer<Base>::AdmittingQueue final : public httplib::TaskQueue {
 public:
  AdmittingQueue(PeerFairServer& server,
                 std::unique_ptr<ConnectionParking> parking)
      : server_(server),
        pool_(static_cast<size_t>(std::max(server.options_.threads, 1))),
        parking_(std::move(parking)) {
    server_.pool_.store(&pool_);
    server_.parking_.store(parking_.get());
  }
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {
    // Parked and waiting connections close; those served end at their
    // next request (the listening socket is gone).
    if (parking_ != nullptr) parking_->Stop();
    pool_.shutdown();
    server_.parking_.store(nullptr);
    server_.pool_.store(nullptr);
  }

 private:
  PeerFairServer& server_;
  httplib::ThreadPool pool_;
  std::unique_ptr<ConnectionParking> parking_;
};

template <class Base>
httplib::TaskQueue* PeerFairServer<Base>::NewTaskQueue() {
  absl::StatusOr<std::unique_ptr<ConnectionParking>> parking =
      ConnectionParking::Start([this](int fd, const std::string& key,
                                      bool late) { Ready(fd, key, late); },
                               [this](int fd, const std::string& key, bool) {
                                 Close(fd);
                                 Finish(key);
                               });
  if (!parking.ok()) {
    // Every connection is then closed at once (no parking to admit to).
    spdlog::error("HTTP port: {}", std::string(parking.status().message()));
    return new AdmittingQueue(*this, nullptr);
  }
  return new AdmittingQueue(*this, *std::move(parking));
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
  if (held_.fetch_add(1) >= options_.max_connections) {
    held_.fetch_sub(1);
    Refuse(sock, peer, /*per_peer=*/false);
    return false;
  }
  const bool unshared = options_.unshared && options_.unshared(host);
  // A trusted proxy's connections are counted apart from its neighbours'
  // (an IPv6 /64's), under a key that says it is one.
  const std::string key =
      unshared ? absl::StrCat(kUnsharedKey, host) : PeerShareKey(address);
  switch (queue_->Arrive(key, sock, unshared)) {
    case PeerQueue::Verdict::kWait:
      return true;  // parked when a connection of `key` ends
    case PeerQueue::Verdict::kRefuse:
      held_.fetch_sub(1);
      Refuse(sock, peer, /*per_peer=*/true);
      return false;
    case PeerQueue::Verdict::kServe:
      break;
  }
  if (!Park(sock, key)) {
    Close(sock);
    Finish(key);
    return false;
  }
  return true;
}

template <class Base>
bool PeerFairServer<Base>::Park(int fd, const std::string& key) {
  ConnectionParking* parking = parking_.load();
  ConnectionParking::Times times;
  times.first_bytes =
      Clock::now() + std::chrono::seconds(this->keep_alive_timeout_sec_);
  // A plain connection waits for its whole request, a TLS one for its
  // handshake's first record (the rest is encrypted: its thread reads it),
  // their bytes at most a read timeout apart.
  times.request = kRequestArrival;
  times.byte_gap = Millis(this->read_timeout_sec_, this->read_timeout_usec_);
  times.tls = std::is_same_v<Base, httplib::SSLServer>;
  return parking != nullptr && parking->Park(fd, key, times);
}

template <class Base>
void PeerFairServer<Base>::Ready(int fd, const std::string& key, bool late) {
  httplib::TaskQueue* pool = pool_.load();
  // A handshake whose first record did not come in time gets no thread:
  // there is nothing to answer it with.
  if (pool == nullptr || (late && std::is_same_v<Base, httplib::SSLServer>)) {
    Close(fd);
    Finish(key);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(threads_mu_);
    PeerThreads& peer = peer_threads_[key];
    if (peer.serving >= options_.threads_per_peer &&
        !absl::StartsWith(key, kUnsharedKey)) {
      peer.ready.emplace_back(fd, late);
      return;
    }
    ++peer.serving;
  }
  Dispatch(pool, fd, key, late);
}

template <class Base>
void PeerFairServer<Base>::Dispatch(httplib::TaskQueue* pool, int fd,
                                    const std::string& key, bool late) {
  pool->enqueue([this, pool, fd, key, late] {
    // A kept-alive connection waits for its next request parked again.
    if (Serve(fd, late)) {
      if (!Park(fd, key)) {
        Close(fd);  // stopping
        Finish(key);
      }
    } else {
      Finish(key);
    }
    // The thread passes to the key's next request that has come.
    std::pair<int, bool> next{-1, false};
    {
      std::lock_guard<std::mutex> lock(threads_mu_);
      auto it = peer_threads_.find(key);
      if (it == peer_threads_.end()) return;
      if (it->second.ready.empty()) {
        if (--it->second.serving <= 0) peer_threads_.erase(it);
        return;
      }
      next = it->second.ready.front();
      it->second.ready.pop_front();
    }
    Dispatch(pool, next.first, key, next.second);
  });
}

template <class Base>
void PeerFairServer<Base>::Finish(const std::string& key) {
  held_.fetch_sub(1);
  for (int next = queue_->Release(key); next >= 0;
       next = queue_->Release(key)) {
    if (Park(next, key)) return;
    Close(next);  // stopping: the line closes too
    held_.fetch_sub(1);
  }
}

template <class Base>
void PeerFairServer<Base>::Close(int fd) {
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

template <class Base>
template <class Stream>
bool PeerFairServer<Base>::ServeRequests(Stream& stream, SSL* ssl, bool late) {
  const milliseconds keep_alive(int64_t{this->keep_alive_timeout_sec_} * 1000);
  bool served = false;
  for (size_t left = this->keep_alive_max_count_; left > 0; --left) {
    // A plain connection with nothing of a next request read yet waits for
    // it parked (the caller parks it), holding no thread, even when some of
    // it is in the socket: the parking judges whether all of it is.
    if constexpr (!std::is_same_v<Base, httplib::SSLServer>) {
      if (served && !stream.Buffered()) return true;
    }
    // The next request, or the keep-alive's end, or the server's stop.
    const auto deadline = Clock::now() + keep_alive;
    bool waiting = false;
    while (!waiting && this->svr_sock_ != INVALID_SOCKET) {
      const auto rest =
          std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (rest.count() <= 0) break;
      waiting = stream.RequestWaiting(std::min(rest, kStopCheck));
    }
    if (!waiting) break;
    // A late request is answered from what came: no read waits.
    stream.SetReadDeadline(late ? Clock::now()
                                : Clock::now() + kRequestArrival);
    late = false;
    bool closed = false;
    served_socket = stream.socket();
    close_after_response = false;
    served =
        this->process_request(stream, /*close_connection=*/left == 1, closed,
                              [ssl](httplib::Request& req) { req.ssl = ssl; });
    served_socket = -1;
    if (!served || closed || close_after_response) break;
  }
  if constexpr (std::is_same_v<Base, httplib::SSLServer>) {
    // A clean end says so (close_notify); a broken one just closes.
    if (served) SSL_shutdown(ssl);
  }
  return false;
}

template <class Base>
bool PeerFairServer<Base>::Serve(int fd, bool late) {
  const StreamTimeouts timeouts{
      Millis(this->read_timeout_sec_, this->read_timeout_usec_),
      Millis(this->write_timeout_sec_, this->write_timeout_usec_)};
  if constexpr (std::is_same_v<Base, httplib::SSLServer>) {
    SSL* ssl = SSL_new(this->ssl_context());
    if (ssl != nullptr && SSL_set_fd(ssl, fd) == 1 &&
        AcceptTlsWithin(fd, ssl, timeouts.read)) {
      TlsStream stream(fd, ssl, timeouts);
      ServeRequests(stream, ssl, /*late=*/false);
    }
    SSL_free(ssl);
  } else {
    PlainStream stream(fd, timeouts);
    if (ServeRequests(stream, nullptr, late)) return true;
  }
  Close(fd);
  return false;
}

template <class Base>
void PeerFairServer<Base>::Refuse(int fd, const std::string& peer,
                                  bool per_peer) {
  const absl::Status status =
      per_peer
          ? LimitExceededError(
                absl::StrCat(
                    "the HTTP port holds ", queue_->share(),
                    " connections of this client address served and ",
                    queue_->waiting(),
                    " waiting, its limit (tensormorphd "
                    "--http-connections-per-peer): reuse or close idle "
                    "connections, or retry later"),
                "http_connections_per_peer",
                queue_->share() + queue_->waiting(),
                queue_->share() + queue_->waiting() + 1)
          : LimitExceededError(
                absl::StrCat("the HTTP port holds ", options_.max_connections,
                             " connections, its most; retry later"),
                "http_connections", options_.max_connections,
                options_.max_connections + 1);
  if constexpr (!std::is_same_v<Base, httplib::SSLServer>) {
    // What the client already sent is read first: closing a socket with
    // unread bytes resets the connection, and the reset could discard the
    // answer before the client reads it. Nothing here waits.
    char sink[4096];
    for (int i = 0; i < 16 && ::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0;
         ++i) {
    }
    const std::string body = ErrorJson(status);
    const std::string response = absl::StrCat(
        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
        "Retry-After: 1\r\nConnection: close\r\nX-Content-Type-Options: "
        "nosniff\r\nX-Frame-Options: DENY\r\nContent-Security-Policy: "
        "frame-ancestors 'none'\r\nContent-Length: ",
        body.size(), "\r\n\r\n", body);
    (void)::send(fd, response.data(), response.size(),
                 MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  Close(fd);
  if (!options_.on_refused) return;
  {
    // A flood is told once a second, not once a connection.
    std::lock_guard<std::mutex> lock(refusal_mu_);
    const auto now = Clock::now();
    if (now - last_refusal_logged_ < std::chrono::seconds(1)) return;
    last_refusal_logged_ = now;
  }
  options_.on_refused(peer, std::string(status.message()));
}

template class PeerFairServer<httplib::Server>;
template class PeerFairServer<httplib::SSLServer>;

}  // namespace tensormorph
