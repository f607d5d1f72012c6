// Cancels the gRPC call of an HTTP request whose client went away, so that
// a page that left a view (or a closed tab) frees the worker computing its
// answer instead of leaving it to finish work nobody reads.
//
// cpp-httplib 0.11 (Debian's) neither offers Request::is_connection_closed
// nor hands a handler its socket, so the socket is found among the
// process's own by the request's two endpoints (its local and remote
// address and port, a TCP connection's identity). While the handler runs
// httplib keeps that socket open, so it cannot be another connection's.
#ifndef TENSORMORPH_SERVER_HTTP_DISCONNECT_WATCH_H_
#define TENSORMORPH_SERVER_HTTP_DISCONNECT_WATCH_H_

#include <grpcpp/client_context.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace tensormorph {

// The endpoints of an HTTP request's connection, as httplib reports them
// (numeric host, port); an empty local_addr matches any local address.
struct ConnectionEnds {
  std::string local_addr, remote_addr;
  int local_port = -1, remote_port = -1;
};

// The descriptor of this process's TCP socket with those ends, or -1.
// Cost: a getsockname and getpeername per open descriptor.
int FindConnectionSocket(const ConnectionEnds& ends);

// True when the peer of socket `fd` has closed or reset the connection
// (readable with no bytes, hang-up or error); data still unread from it
// (a pipelined request) is not a close. Never blocks.
bool PeerClosed(int fd);

// One thread that checks the watched connections every `period` and
// cancels (ClientContext::TryCancel) the call of each whose client left.
// A call shorter than one period costs nothing but its registration; its
// socket is looked for on its first check.
// Thread safety: Watch from any thread; the handle may be dropped on any.
class DisconnectWatch {
 public:
  explicit DisconnectWatch(int period_ms = 50);
  ~DisconnectWatch();  // stops the thread; no handle may outlive it

  // Watches `ends` until the returned handle is dropped (drop it before
  // `context` dies, once the call is over).
  std::shared_ptr<void> Watch(const ConnectionEnds& ends,
                              grpc::ClientContext* context);

  // Calls cancelled because their client left, since start.
  int64_t cancelled() const { return cancelled_.load(); }

 private:
  struct Entry {
    ConnectionEnds ends;
    grpc::ClientContext* context;
    int fd = -2;  // -2: not looked for yet; -1: not found
    bool done = false;
  };
  void Run();

  const int period_ms_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::list<Entry> entries_;
  bool stop_ = false;
  std::atomic<int64_t> cancelled_{0};
  std::thread thread_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_HTTP_DISCONNECT_WATCH_H_
