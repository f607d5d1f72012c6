// Owns one file descriptor.
#ifndef TENSORMORPH_CORE_IO_UNIQUE_FD_H_
#define TENSORMORPH_CORE_IO_UNIQUE_FD_H_

#include <unistd.h>

#include <utility>

namespace tensormorph {

// Closes its descriptor when destroyed; movable, not copyable. -1 is "none".
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership without closing.
  int release() { return std::exchange(fd_, -1); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_UNIQUE_FD_H_
