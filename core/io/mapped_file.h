// A read-only memory mapping of a whole file.
#ifndef TENSORMORPH_CORE_IO_MAPPED_FILE_H_
#define TENSORMORPH_CORE_IO_MAPPED_FILE_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/io/file_access.h"

namespace tensormorph {

class RemoteMirror;

// Identity of a file on disk, used to notice that a path now names other
// bytes (== compares everything; SameBytes only what a write changes). The
// status-change time also moves on chmod, chown and link: a cached file
// whose permissions changed is opened again, and so checked again.
struct FileIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

// Same file, same size, same modification time: no write happened in
// between (to the resolution of the file system's timestamps).
inline bool SameBytes(const FileIdentity& a, const FileIdentity& b) {
  return a.device == b.device && a.inode == b.inode && a.size == b.size &&
         a.mtime_ns == b.mtime_ns;
}

// Reads the identity of `path` (following symlinks), through `access`.
// Errors: NOT_FOUND when the path does not exist; INVALID_ARGUMENT when it is
// not a regular file; those of FileAccess::Stat; INTERNAL for other stat
// failures.
absl::StatusOr<FileIdentity> StatFile(const std::string& path,
                                      const FileAccess& access);
inline absl::StatusOr<FileIdentity> StatFile(const std::string& path) {
  return StatFile(path, *FileAccess::Anywhere());
}

// The same from a stat already taken of `path` (which names it in the
// error): what StatFile would return had it taken that stat.
absl::StatusOr<FileIdentity> IdentityFromStat(const std::string& path,
                                              const struct stat& st);

// Reads all of a small regular file (an index, a config) with read(2) into
// memory. Unlike a mapping, a file that shrinks or is rewritten while it is
// read cannot raise SIGBUS: the change is seen and reported instead.
// Errors: NOT_FOUND, PERMISSION_DENIED, INVALID_ARGUMENT (not a regular file),
// DATA_LOSS (larger than `max_bytes`, naming both), FAILED_PRECONDITION (the
// file changed while it was read), INTERNAL (other I/O errors).
// The file is opened through `access` (see FileAccess for the roots).
absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                          uint64_t max_bytes,
                                          const FileAccess& access);
inline absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                                 uint64_t max_bytes) {
  return ReadWholeFile(path, max_bytes, *FileAccess::Anywhere());
}

// Owns one read-only, private mapping of a regular file. The mapping is made
// once at open and never changes; bytes() stays valid for the object's life.
// Thread safety: immutable after Open; safe to share across threads.
class MappedFile {
 public:
  // Maps `path` read-only, opened through `access`. An empty file yields an
  // empty span (no mapping).
  // Errors: NOT_FOUND (no such file), INVALID_ARGUMENT (not a regular file),
  // PERMISSION_DENIED (unreadable, or refused by `access`), INTERNAL (mmap
  // failed).
  static absl::StatusOr<std::shared_ptr<const MappedFile>> Open(
      const std::string& path, const FileAccess& access);
  static absl::StatusOr<std::shared_ptr<const MappedFile>> Open(
      const std::string& path) {
    return Open(path, *FileAccess::Anywhere());
  }

  // A remote object's mirror (remote_mirror.h) as a mapping, named `path`
  // (the URL as given, which the mirror's reader prints redacted): bytes()
  // fetch what they touch. identity() holds the object's size, and a hash
  // of its version (ETag or Last-Modified) as `inode`; device and times are
  // 0. Reads are conditional on that version (remote()).
  static std::shared_ptr<const MappedFile> FromMirror(
      std::string path, std::shared_ptr<const RemoteMirror> mirror);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  absl::Span<const uint8_t> bytes() const { return {data_, size_}; }
  uint64_t size() const { return size_; }
  const FileIdentity& identity() const { return identity_; }
  // Mirrored from remote storage: no stat can tell its version, and every
  // fetch of its bytes is conditional on the version taken at open, so a
  // replaced object fails reads (ABORTED) instead of mixing versions.
  bool remote() const { return mirror_ != nullptr; }
  const RemoteMirror* mirror() const { return mirror_.get(); }

 private:
  MappedFile(std::string path, const uint8_t* data, uint64_t size,
             FileIdentity identity)
      : path_(std::move(path)), data_(data), size_(size), identity_(identity) {}

  std::string path_;
  const uint8_t* data_;
  uint64_t size_;
  FileIdentity identity_;
  std::shared_ptr<const RemoteMirror> mirror_;  // owns the bytes when set
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_MAPPED_FILE_H_
