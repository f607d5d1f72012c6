#include "server/change_watch.h"

#include <errno.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cstring>

namespace tensormorph {
namespace {

// Everything that can make a file of a checkpoint another file, or its
// bytes other bytes: writes (IN_MODIFY for each, IN_CLOSE_WRITE at the
// end), truncation and chmod (IN_ATTRIB), names coming and going, and the
// directory itself moved or deleted.
constexpr uint32_t kMask = IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | IN_CREATE |
                           IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                           IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;

}  // namespace

ChangeWatch::Watched::~Watched() {
  if (owner_ != nullptr) owner_->Release(*this);
}

std::shared_ptr<ChangeWatch> ChangeWatch::Create() {
  const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) return nullptr;
  std::shared_ptr<ChangeWatch> w(new ChangeWatch(fd));
  w->self_ = w;
  return w;
}

ChangeWatch::~ChangeWatch() { ::close(fd_); }

std::unique_ptr<ChangeWatch::Watched> ChangeWatch::Watch(
    absl::Span<const std::string> directories) {
  std::unique_ptr<Watched> w(new Watched(self_.lock()));
  absl::MutexLock lock(&mu_);
  // Events queued before this watch belong to an earlier state.
  DrainLocked();
  w->overflows_ = overflows_;
  for (const std::string& d : directories) {
    const int wd = ::inotify_add_watch(fd_, d.c_str(), kMask);
    if (wd < 0) {
      ReleaseLocked(*w);
      w->owner_ = nullptr;
      return nullptr;
    }
    Dir& dir = dirs_[wd];
    if (dir.gone) {
      // A wd number the kernel reuses: a new generation, so that whoever
      // held the old watch sees a change, never a match.
      dir.gone = false;
      ++dir.generation;
    }
    ++dir.users;
    w->watches_.emplace_back(wd, dir.generation);
  }
  return w;
}

bool ChangeWatch::Changed(const Watched& w) {
  absl::MutexLock lock(&mu_);
  DrainLocked();
  if (overflows_ != w.overflows_) return true;
  for (const auto& [wd, generation] : w.watches_) {
    auto it = dirs_.find(wd);
    if (it == dirs_.end() || it->second.gone ||
        it->second.generation != generation) {
      return true;
    }
  }
  return false;
}

uint64_t ChangeWatch::events_read() const {
  absl::MutexLock lock(&mu_);
  return events_read_;
}

void ChangeWatch::DrainLocked() {
  alignas(inotify_event) char buffer[16 * 1024];
  for (;;) {
    const ssize_t n = ::read(fd_, buffer, sizeof buffer);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return;  // EAGAIN: nothing queued
    }
    for (ssize_t at = 0;
         at + static_cast<ssize_t>(sizeof(inotify_event)) <= n;) {
      inotify_event e;
      std::memcpy(&e, buffer + at, sizeof e);
      at += static_cast<ssize_t>(sizeof e) + e.len;
      ++events_read_;
      if (e.mask & IN_Q_OVERFLOW) {
        ++overflows_;
        continue;
      }
      auto it = dirs_.find(e.wd);
      if (it == dirs_.end()) continue;
      ++it->second.generation;
      if (e.mask & IN_IGNORED) it->second.gone = true;
    }
  }
}

void ChangeWatch::Release(const Watched& w) {
  absl::MutexLock lock(&mu_);
  ReleaseLocked(w);
}

void ChangeWatch::ReleaseLocked(const Watched& w) {
  for (const auto& [wd, generation] : w.watches_) {
    auto it = dirs_.find(wd);
    if (it == dirs_.end() || --it->second.users > 0) continue;
    if (!it->second.gone) ::inotify_rm_watch(fd_, wd);
    dirs_.erase(it);
  }
}

}  // namespace tensormorph
