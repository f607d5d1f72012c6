// Where the HTTP port's admitted connections wait for their requests
// without a serving thread: one epoll set on one thread. A connection is
// handed on when its request has arrived whole (request_arrival.h), or its
// first bytes for a TLS one, or it closes; or when its deadline passes
// first.
//
// Why: cpp-httplib gives a connection a thread from its accept on; silent
// connections from a few addresses then held every thread while the
// bystanders' connections queued behind them.
#ifndef TENSORMORPH_SERVER_HTTP_CONNECTION_PARKING_H_
#define TENSORMORPH_SERVER_HTTP_CONNECTION_PARKING_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace tensormorph {

// Thread safety: Park and Stop may be called from any thread; the
// callbacks run on the parking thread (or Stop's caller), never under a
// lock of this class, so they may Park again.
class ConnectionParking {
 public:
  // fd, the key it was parked with, and for `ready` whether its request's
  // time ran out with part of it come (the serving thread answers what
  // came, waiting for no more).
  using Handoff =
      std::function<void(int fd, const std::string& key, bool late)>;
  // Starts the thread. `ready`: fd's request came (or part of it, late);
  // `expired`: nothing came before its deadline, or Stop was called. Each
  // parked fd goes to exactly one.
  // Errors: INTERNAL when epoll or eventfd cannot be made.
  static absl::StatusOr<std::unique_ptr<ConnectionParking>> Start(
      Handoff ready, Handoff expired);
  ~ConnectionParking();  // Stop()

  struct Times {
    // Until which the first bytes may take.
    std::chrono::steady_clock::time_point first_bytes;
    // 0: hand on at the first bytes. Else wait for the whole request
    // (SocketRequestArrival), up to this long after its first bytes and
    // `byte_gap` after its last ones.
    std::chrono::milliseconds request{0}, byte_gap{0};
    bool tls = false;  // the request is a TLS handshake's first record
  };
  // Waits for `fd` as `times` say. False (nothing done) after Stop: the
  // caller still owns fd.
  bool Park(int fd, std::string key, Times times);
  // Hands every parked fd to `expired` and ends the thread. Idempotent.
  void Stop();

 private:
  struct Parked {
    std::string key;
    Times times;
    std::chrono::steady_clock::time_point deadline;  // the next one
    std::chrono::steady_clock::time_point request_end{};
    bool bytes_seen = false;
  };
  // For an event on a parked fd (under mu_): true when it is to be handed
  // on, false when it stays for the rest of its request.
  bool Arrived(int fd, uint32_t events, Parked& parked);
  ConnectionParking(int epoll_fd, int wake_fd, Handoff ready, Handoff expired);
  void Run();

  const int epoll_fd_, wake_fd_;
  const Handoff ready_, expired_;
  std::mutex mu_;
  bool stopped_ = false;
  absl::flat_hash_map<int, Parked> parked_;
  std::thread thread_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_HTTP_CONNECTION_PARKING_H_
