#include "server/http/connection_parking.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/http/request_arrival.h"

namespace tensormorph {
namespace {

using Clock = std::chrono::steady_clock;

// How often deadlines are looked at: a connection may be handed to
// `expired` up to this late.
constexpr int kDeadlineCheckMs = 100;

}  // namespace

absl::StatusOr<std::unique_ptr<ConnectionParking>> ConnectionParking::Start(
    Handoff ready, Handoff expired) {
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) {
    return absl::InternalError(
        absl::StrCat("cannot make the HTTP port's epoll set: errno ", errno));
  }
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = wake;
  if (wake < 0 || ::epoll_ctl(ep, EPOLL_CTL_ADD, wake, &e) != 0) {
    const int error = errno;
    ::close(ep);
    if (wake >= 0) ::close(wake);
    return absl::InternalError(absl::StrCat(
        "cannot make the HTTP port's wake-up event: errno ", error));
  }
  return std::unique_ptr<ConnectionParking>(
      new ConnectionParking(ep, wake, std::move(ready), std::move(expired)));
}

ConnectionParking::ConnectionParking(int epoll_fd, int wake_fd, Handoff ready,
                                     Handoff expired)
    : epoll_fd_(epoll_fd),
      wake_fd_(wake_fd),
      ready_(std::move(ready)),
      expired_(std::move(expired)),
      thread_([this] { Run(); }) {}

ConnectionParking::~ConnectionParking() {
  Stop();
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

bool ConnectionParking::Park(int fd, std::string key, Times times) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) return false;
  // Edge-triggered: an event for each arrival of bytes (or the close),
  // not one for as long as unread bytes wait (the request's own, which
  // stay in the socket until a serving thread reads them).
  epoll_event e{};
  e.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
  e.data.fd = fd;
  parked_[fd] = Parked{std::move(key), times, times.first_bytes};
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e) != 0) {
    parked_[fd].deadline = Clock::time_point::min();  // handed on at once
  }
  return true;
}

void ConnectionParking::Stop() {
  std::vector<std::pair<int, std::string>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    for (auto& [fd, p] : parked_) {
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
      left.emplace_back(fd, std::move(p.key));
    }
    parked_.clear();
  }
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  for (const auto& [fd, key] : left) expired_(fd, key, false);
}

bool ConnectionParking::Arrived(int fd, uint32_t events, Parked& parked) {
  // A close or an error is the serving thread's to see.
  if (parked.times.request.count() <= 0 ||
      (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0 ||
      SocketRequestArrival(fd, parked.times.tls) == Arrival::kReady) {
    return true;
  }
  const Clock::time_point now = Clock::now();
  if (!parked.bytes_seen) {
    parked.bytes_seen = true;
    parked.request_end = now + parked.times.request;
  }
  parked.deadline = std::min(now + parked.times.byte_gap, parked.request_end);
  return false;
}

void ConnectionParking::Run() {
  epoll_event events[64];
  while (true) {
    const int n = ::epoll_wait(epoll_fd_, events, 64, kDeadlineCheckMs);
    std::vector<std::pair<int, std::string>> ready, late, expired;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        auto it = parked_.find(fd);
        if (fd == wake_fd_ || it == parked_.end()) continue;
        if (!Arrived(fd, events[i].events, it->second)) continue;
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
        ready.emplace_back(fd, std::move(it->second.key));
        parked_.erase(it);
      }
      const Clock::time_point now = Clock::now();
      for (auto it = parked_.begin(); it != parked_.end();) {
        if (it->second.deadline > now) {
          ++it;
          continue;
        }
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->first, nullptr);
        (it->second.bytes_seen ? late : expired)
            .emplace_back(it->first, std::move(it->second.key));
        parked_.erase(it++);
      }
    }
    for (const auto& [fd, key] : ready) ready_(fd, key, false);
    for (const auto& [fd, key] : late) ready_(fd, key, true);
    for (const auto& [fd, key] : expired) expired_(fd, key, false);
  }
}

}  // namespace tensormorph
