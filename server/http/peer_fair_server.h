// cpp-httplib's server (plain or TLS) that admits its connections itself:
// each client address has a share of the connections and of the serving
// threads, a connection holds a thread only once its request has come,
// and a request must arrive whole within kRequestArrival.
//
// httplib's accept loop stays: it accepts, sets the socket's timeouts and
// hands the connection to its task queue, which is ours (AdmittingQueue in
// the .cc): it calls process_and_close_socket, overridden here, at once on
// the accept thread, where the connection is admitted without blocking:
//   - past max_connections held in all, or past its address's share and
//     waiting line (peer_queue.h): answered 429 (RESOURCE_EXHAUSTED
//     LIMIT_EXCEEDED, limit "http_connections" or
//     "http_connections_per_peer"; TLS: closed before any handshake);
//   - beyond its address's share: it waits in that address's line;
//   - else parked (connection_parking.h) until its whole request has come
//     (request_arrival.h; a TLS one: its ClientHello), then queued for a
//     serving thread (first come, first served; at most threads_per_peer
//     of one address at once), and parked again between requests. A connection
//     that sends nothing within the keep-alive timeout, or not its whole
//     request within kRequestArrival of its first bytes, is closed.
// When a connection ends, the next in its address's line is parked in its
// place. The requests go to httplib's own routing (Server::process_request),
// so every handler, limit and header check is unchanged.
#ifndef TENSORMORPH_SERVER_HTTP_PEER_FAIR_SERVER_H_
#define TENSORMORPH_SERVER_HTTP_PEER_FAIR_SERVER_H_

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "server/http/connection_parking.h"
#include "server/http/peer_queue.h"

namespace tensormorph {

// How long a request (head and body, or a TLS handshake's first record)
// may take to arrive from its first byte. The rest of a TLS handshake,
// once its first record has come, has the read timeout.
inline constexpr std::chrono::seconds kRequestArrival{20};

struct PeerFairOptions {
  int threads = 64;  // serving threads
  int share = 16;    // connections one client address has open at once
  int waiting = 32;  // and has waiting beyond them; past that, 429
  // Connections held in all (parked, waiting, served); past it, 429: each
  // holds a descriptor, which the gRPC port and the files need too.
  int max_connections = 4096;
  // Serving threads one client address has at once; its further requests
  // that have come wait, holding none, for one of them (a browser keeps at
  // most six connections to a host, so a page is never held back).
  int threads_per_peer = 8;
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
// Ends the connection this thread serves once the response is written
// (its request's body was not read: what follows is no request).
void CloseConnectionAfterResponse();

// Base: httplib::Server or httplib::SSLServer (both instantiated in the .cc).
template <class Base>
class PeerFairServer final : public Base {
 public:
  template <class... Args>
  explicit PeerFairServer(PeerFairOptions options, Args&&... args)
      : Base(std::forward<Args>(args)...),
        options_(std::move(options)),
        queue_(std::make_unique<PeerQueue>(options_.share, options_.waiting)) {
    this->new_task_queue = [this] { return NewTaskQueue(); };
  }

  // Lets pending connections queue in the kernel as a busy server's should:
  // httplib listens with a backlog of 5, past which a burst's connections
  // wait a second for their SYN to be sent again. Call after binding.
  void WidenBacklog();

 private:
  class AdmittingQueue;
  httplib::TaskQueue* NewTaskQueue();
  // On the accept thread (AdmittingQueue::enqueue): admits, parks, lines up
  // or refuses `sock`; never blocks.
  bool process_and_close_socket(socket_t sock) override;
  // A parked connection's request came (or its time ran out with part of
  // it come: `late`): a serving thread takes it, or it waits for one of
  // its key's threads_per_peer.
  void Ready(int fd, const std::string& key, bool late);
  // Serves it on a thread of `pool`; then the key's next waiting request.
  void Dispatch(httplib::TaskQueue* pool, int fd, const std::string& key,
                bool late);
  // A connection of `key` ended (served, or expired while parked): the next
  // in its line is parked in its place.
  void Finish(const std::string& key);
  void Close(int fd);
  // Parks `fd` (admitted, of `key`) until its request comes; false after
  // the parking stopped.
  bool Park(int fd, const std::string& key);
  // A connection's requests on a serving thread, then its close; or true,
  // with `fd` left open, when a plain connection is to wait for its next
  // request parked.
  bool Serve(int fd, bool late);
  template <class Stream>
  bool ServeRequests(Stream& stream, SSL* ssl, bool late);
  bool AcceptTls(int fd, SSL* ssl);
  void Refuse(int fd, const std::string& peer, bool per_peer);

  const PeerFairOptions options_;
  std::unique_ptr<PeerQueue> queue_;
  // Set while httplib's listen loop runs (its task queue's lifetime).
  std::atomic<httplib::TaskQueue*> pool_{nullptr};
  std::atomic<ConnectionParking*> parking_{nullptr};
  std::atomic<int> held_{0};  // connections admitted and not yet closed
  // Per share key: requests on serving threads, and those come and waiting
  // for one (fd, late).
  struct PeerThreads {
    int serving = 0;
    std::deque<std::pair<int, bool>> ready;
  };
  std::mutex threads_mu_;
  absl::flat_hash_map<std::string, PeerThreads> peer_threads_;
  std::mutex refusal_mu_;
  std::chrono::steady_clock::time_point last_refusal_logged_{};
};

extern template class PeerFairServer<httplib::Server>;
extern template class PeerFairServer<httplib::SSLServer>;

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_HTTP_PEER_FAIR_SERVER_H_
