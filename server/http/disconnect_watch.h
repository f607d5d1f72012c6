// Cancels the gRPC call of an HTTP request whose client went away, so that
// a page that left a view (or a closed tab) frees the worker computing its
// answer instead of leaving it to finish work nobody reads.
//
// cpp-httplib 0.11 (Debian's) neither offers Request::is_connection_closed
// nor hands a handler its socket; the gateway serves its connections itself
// (peer_fair_server.h), and a handler finds its own with
// ServedConnectionSocket. While the handler runs that socket stays open, so
// it cannot be another connection's.
#ifndef TENSORMORPH_SERVER_HTTP_DISCONNECT_WATCH_H_
#define TENSORMORPH_SERVER_HTTP_DISCONNECT_WATCH_H_

#include <grpcpp/client_context.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

namespace tensormorph {

// True when the peer of socket `fd` has closed or reset the connection
// (readable with no bytes, hang-up or error); data still unread from it
// (a pipelined request) is not a close. Never blocks.
bool PeerClosed(int fd);

// One thread that checks the watched connections every `period` and
// cancels (ClientContext::TryCancel) the call of each whose client left.
// A call shorter than one period costs nothing but its registration.
// Thread safety: Watch from any thread; the handle may be dropped on any.
class DisconnectWatch {
 public:
  explicit DisconnectWatch(int period_ms = 50);
  ~DisconnectWatch();  // stops the thread; no handle may outlive it

  // Watches socket `fd` until the returned handle is dropped (drop it before
  // `context` dies, once the call is over). A negative fd is not watched.
  std::shared_ptr<void> Watch(int fd, grpc::ClientContext* context);

  // Calls cancelled because their client left, since start.
  int64_t cancelled() const { return cancelled_.load(); }

 private:
  struct Entry {
    int fd;
    grpc::ClientContext* context;
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
