#include "server/http/disconnect_watch.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

namespace tensormorph {
namespace {

// The numeric host and port of a socket address, as httplib formats
// Request::remote_addr (getnameinfo with NI_NUMERICHOST).
bool HostPort(const sockaddr_storage& a, socklen_t len, std::string* host,
              int* port) {
  char buf[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, buf, sizeof(buf),
                  nullptr, 0, NI_NUMERICHOST) != 0) {
    return false;
  }
  *host = buf;
  if (a.ss_family == AF_INET) {
    *port = ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
  } else if (a.ss_family == AF_INET6) {
    *port = ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
  } else {
    return false;
  }
  return true;
}

bool HasEnds(int fd, const ConnectionEnds& ends) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  std::string host;
  int port = -1;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
      !HostPort(a, len, &host, &port) || port != ends.remote_port ||
      host != ends.remote_addr) {
    return false;
  }
  len = sizeof(a);
  return getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 &&
         HostPort(a, len, &host, &port) && port == ends.local_port &&
         (ends.local_addr.empty() || host == ends.local_addr);
}

}  // namespace

int FindConnectionSocket(const ConnectionEnds& ends) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  const int own = dirfd(dir);
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    if (HasEnds(static_cast<int>(fd), ends)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

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

std::shared_ptr<void> DisconnectWatch::Watch(const ConnectionEnds& ends,
                                             grpc::ClientContext* context) {
  std::list<Entry>::iterator it;
  {
    std::lock_guard<std::mutex> lock(mu_);
    it = entries_.insert(entries_.end(), Entry{ends, context});
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
      if (e.fd == -2) e.fd = FindConnectionSocket(e.ends);
      if (e.fd >= 0 && PeerClosed(e.fd)) {
        e.done = true;
        e.context->TryCancel();
        cancelled_.fetch_add(1);
      }
    }
  }
}

}  // namespace tensormorph
