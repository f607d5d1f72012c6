#include "server/http/disconnect_watch.h"

#include <poll.h>
#include <sys/socket.h>

#include <chrono>

namespace tensormorph {

bool PeerClosed(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0)
    return true;
  char c;
  return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

DisconnectWatch::DisconnectWatch(int period_ms)
    : period_ms_(period_ms), thread_([this] { Run(); }) {}

DisconnectWatch::~DisconnectWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_ptr<void> DisconnectWatch::Watch(int fd,
                                             grpc::ClientContext* context) {
  if (fd < 0) return nullptr;
  std::list<Entry>::iterator it;
  {
    std::lock_guard<std::mutex> lock(mu_);
    it = entries_.insert(entries_.end(), Entry{fd, context});
  }
  wake_.notify_all();
  // The entry goes under the lock, so a check never races the call's end.
  return std::shared_ptr<void>(nullptr, [this, it](void*) {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.erase(it);
  });
}

void DisconnectWatch::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (entries_.empty()) {
      wake_.wait(lock, [this] { return stop_ || !entries_.empty(); });
      continue;
    }
    wake_.wait_for(lock, std::chrono::milliseconds(period_ms_),
                   [this] { return stop_; });
    for (Entry& e : entries_) {
      if (e.done) continue;
      if (PeerClosed(e.fd)) {
        e.done = true;
        e.context->TryCancel();
        cancelled_.fetch_add(1);
      }
    }
  }
}

}  // namespace tensormorph
