// cpp-httplib's server (plain or TLS) whose connections are served in each
// client's share of the threads (peer_queue.h), each connection waiting for
// its next request in one poll rather than httplib's loop of 10 ms waits.
//
// httplib's accept loop stays: it accepts, sets the socket's timeouts and
// queues the connection for a thread, which calls process_and_close_socket,
// overridden here. That thread asks the PeerQueue first: a connection within
// its client's share is served; one beyond waits in its client's line,
// served by the thread that ends one of that client's connections; one past
// the line is answered 429 (RESOURCE_EXHAUSTED LIMIT_EXCEEDED, limit
// "http_connections_per_peer") and closed, without reading its request. The
// requests themselves go to httplib's own routing (Server::process_request),
// so every handler, limit and header check is unchanged.
#ifndef TENSORMORPH_SERVER_HTTP_PEER_FAIR_SERVER_H_
#define TENSORMORPH_SERVER_HTTP_PEER_FAIR_SERVER_H_

#include <httplib.h>

#include <functional>
#include <memory>
#include <string>

#include "server/http/peer_queue.h"

namespace tensormorph {

struct PeerFairOptions {
  int share = 16;     // connections one client address has served at once
  int waiting = 256;  // and has waiting beyond them; past that, 429
  // Addresses ("10.0.0.7", "::1") served without a share: a proxy the
  // operator trusts, whose connections are many clients'. Empty = none.
  std::function<bool(const std::string& address)> unshared;
  // Told of a refused connection ("ADDRESS:PORT", the message), of one a
  // second at most (a flood is not logged line by line); may be called from
  // many threads at once.
  std::function<void(const std::string& peer, const std::string& message)>
      on_refused;
};

// The socket of the connection whose request this thread is serving (in a
// handler a PeerFairServer runs), or -1 on any other thread.
int ServedConnectionSocket();
// The share key (PeerShareKey) of that connection's client, "" elsewhere.
std::string ServedPeerKey();

// Base: httplib::Server or httplib::SSLServer (both instantiated in the .cc).
template <class Base>
class PeerFairServer final : public Base {
 public:
  template <class... Args>
  explicit PeerFairServer(PeerFairOptions options, Args&&... args)
      : Base(std::forward<Args>(args)...),
        options_(std::move(options)),
        queue_(std::make_unique<PeerQueue>(options_.share, options_.waiting)) {}

  // Lets pending connections queue in the kernel as a busy server's should:
  // httplib listens with a backlog of 5, past which a burst's connections
  // wait a second for their SYN to be sent again. Call after binding.
  void WidenBacklog();

 private:
  bool process_and_close_socket(socket_t sock) override;
  // One connection's requests, then its close.
  void Serve(int fd);
  template <class Stream>
  void ServeRequests(Stream& stream, SSL* ssl);
  void Refuse(int fd, const std::string& peer);

  const PeerFairOptions options_;
  std::unique_ptr<PeerQueue> queue_;
  std::mutex refusal_mu_;
  std::chrono::steady_clock::time_point last_refusal_logged_{};
};

extern template class PeerFairServer<httplib::Server>;
extern template class PeerFairServer<httplib::SSLServer>;

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_HTTP_PEER_FAIR_SERVER_H_
