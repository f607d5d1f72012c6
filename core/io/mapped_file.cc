#include "core/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/io/errno_status.h"
#include "core/io/remote_mirror.h"

namespace tensormorph {
namespace {

FileIdentity IdentityOf(const struct stat& st) {
  return FileIdentity{
      .device = static_cast<uint64_t>(st.st_dev),
      .inode = static_cast<uint64_t>(st.st_ino),
      .size = static_cast<uint64_t>(st.st_size),
      .mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 +
                  st.st_mtim.tv_nsec,
      .ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 +
                  st.st_ctim.tv_nsec};
}

}  // namespace

absl::StatusOr<FileIdentity> StatFile(const std::string& path,
                                      const FileAccess& access) {
  absl::StatusOr<struct stat> st = access.Stat(path);
  if (!st.ok()) return st.status();
  return IdentityFromStat(path, *st);
}

absl::StatusOr<FileIdentity> IdentityFromStat(const std::string& path,
                                              const struct stat& st) {
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a regular file"));
  }
  return IdentityOf(st);
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                          uint64_t max_bytes,
                                          const FileAccess& access) {
  absl::StatusOr<UniqueFd> opened = access.Open(path, O_RDONLY | O_NONBLOCK);
  if (!opened.ok()) return opened.status();
  const int fd = opened->get();
  struct stat before;
  if (::fstat(fd, &before) != 0) return ErrnoStatus(errno, "stat", path);
  if (!S_ISREG(before.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(before.st_size);
  if (size > max_bytes) {
    return absl::DataLossError(absl::StrCat("'", path, "' is ", size,
                                            " bytes, over the limit of ",
                                            max_bytes, " for such a file"));
  }
  std::string out(size, '\0');
  uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, out.data() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "read", path);
    if (n == 0) break;
    done += static_cast<uint64_t>(n);
  }
  struct stat after;
  if (::fstat(fd, &after) != 0) return ErrnoStatus(errno, "stat", path);
  if (done != size || !(IdentityOf(after) == IdentityOf(before))) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' changed while it was read (", size,
                     " bytes at the start, ", done, " read, ", after.st_size,
                     " now); try again"));
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const MappedFile>> MappedFile::Open(
    const std::string& path, const FileAccess& access) {
  // O_NONBLOCK keeps a FIFO posing as a checkpoint from blocking the open.
  absl::StatusOr<UniqueFd> opened = access.Open(path, O_RDONLY | O_NONBLOCK);
  if (!opened.ok()) return opened.status();
  const int fd = opened->release();
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint8_t* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "mmap", path);
    }
    // Checkpoints are read in scattered slices as often as whole; let the
    // caller ask for read-ahead where it knows better.
    ::madvise(p, size, MADV_RANDOM);
    data = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // The mapping keeps its own reference to the file.
  return std::shared_ptr<const MappedFile>(
      new MappedFile(path, data, size, IdentityOf(st)));
}

std::shared_ptr<const MappedFile> MappedFile::FromMirror(
    std::string path, std::shared_ptr<const RemoteMirror> mirror) {
  const absl::Span<const uint8_t> bytes = mirror->bytes();
  FileIdentity identity;
  identity.size = mirror->size();
  // The version (ETag or Last-Modified), as a number two opens of the same
  // version agree on: what a cache compares to notice a replaced object.
  identity.inode = std::hash<std::string>()(
      mirror->reader().identity().CacheKey(mirror->reader().display()));
  std::shared_ptr<MappedFile> m(
      new MappedFile(std::move(path), bytes.data(), bytes.size(), identity));
  m->mirror_ = std::move(mirror);
  return m;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr && mirror_ == nullptr) {
    ::munmap(const_cast<uint8_t*>(data_), size_);
  }
}

}  // namespace tensormorph
