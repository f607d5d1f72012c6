// A client that stops reading its replies, for tests of the server's limits
// and fair shares: a ReadSlice that takes its first chunk, then reads no
// more until released.
#ifndef TENSORMORPH_TESTS_SUPPORT_STALLED_READER_H_
#define TENSORMORPH_TESTS_SUPPORT_STALLED_READER_H_

#include <atomic>
#include <memory>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "client/client.h"

namespace tensormorph::testing {

// Runs `request` on `client` (give it a connection of its own, so that only
// the server's limits can end the call) on a thread of its own.
// Thread safety: one owning thread calls the methods.
class StalledReader {
 public:
  static std::unique_ptr<StalledReader> Start(std::unique_ptr<Client> client,
                                              v1::ReadSliceRequest request) {
    std::unique_ptr<StalledReader> r(new StalledReader(std::move(client)));
    StalledReader* p = r.get();
    r->thread_ = std::thread([p, request = std::move(request)] {
      p->status_ = p->client_->ReadSlice(request, [p](const v1::SliceChunk&) {
        if (!p->first_chunk_.HasBeenNotified()) {
          p->first_chunk_.Notify();
          p->release_.WaitForNotification();
        }
        return true;
      });
      p->ended_.store(true);
      if (!p->first_chunk_.HasBeenNotified()) p->first_chunk_.Notify();
    });
    return r;
  }
  ~StalledReader() { Release(); }
  StalledReader(const StalledReader&) = delete;
  StalledReader& operator=(const StalledReader&) = delete;

  // Until it holds its first chunk, or its call ended without one.
  void WaitForFirstChunk() { first_chunk_.WaitForNotification(); }
  // Whether the call has ended (by now it would only end from the server).
  bool ended() const { return ended_.load(); }
  // Lets it read on to its call's end, and waits for that.
  void Release() {
    if (!release_.HasBeenNotified()) release_.Notify();
    if (thread_.joinable()) thread_.join();
  }
  // How the call ended. REQUIRES: ended(), or Release() returned.
  const absl::Status& status() const { return status_; }

 private:
  explicit StalledReader(std::unique_ptr<Client> client)
      : client_(std::move(client)) {}

  std::unique_ptr<Client> client_;
  absl::Notification first_chunk_, release_;
  std::atomic<bool> ended_{false};
  absl::Status status_;
  std::thread thread_;
};

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_STALLED_READER_H_
