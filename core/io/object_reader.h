// One object of a storage (a local file, an HTTP resource, an S3 object, a
// file on the Hub) opened for reading by range, like LevelDB's
// RandomAccessFile: the object's size and identity are taken once at open,
// and every read is of those bytes or fails.
#ifndef TENSORMORPH_CORE_IO_OBJECT_READER_H_
#define TENSORMORPH_CORE_IO_OBJECT_READER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/io/mapped_file.h"

namespace tensormorph {

// What names one version of an object's bytes. Remote objects carry the
// validator their server gave (the ETag, else Last-Modified) and the size;
// local files their FileIdentity.
struct ObjectIdentity {
  uint64_t size = 0;
  std::string etag;           // as sent, quotes and any "W/" included
  std::string last_modified;  // an HTTP-date, as sent
  FileIdentity file;          // local files only
  // A string equal for two opens exactly when they name the same version of
  // the same object (the block cache's key): `display` (never a secret)
  // with the validator and the size.
  std::string CacheKey(absl::string_view display) const;
  bool operator==(const ObjectIdentity&) const = default;
};

// What reading has cost so far, for tests and logs.
struct ReadStats {
  uint64_t requests = 0;       // requests sent to the storage (retries too)
  uint64_t retries = 0;        // of those, the ones that repeated a failure
  uint64_t bytes_fetched = 0;  // body bytes received from it
  uint64_t cache_hits = 0;     // blocks found in RAM or on disk
  uint64_t cache_misses = 0;   // blocks that had to be fetched
};

// Thread safety: every method is const and thread-safe.
class ObjectReader {
 public:
  virtual ~ObjectReader() = default;

  // What errors name: a path, or a URL without credentials or query string.
  virtual const std::string& display() const = 0;
  const ObjectIdentity& identity() const { return identity_; }
  uint64_t size() const { return identity_.size; }

  // Copies bytes [offset, offset + length) into `out`.
  // REQUIRES: `out` holds `length` bytes.
  // Errors: OUT_OF_RANGE when the range does not lie within size() (checked
  // without overflow); ABORTED naming the object when it was replaced since
  // open (its validator or size changed); DATA_LOSS when the storage
  // returned other bytes than asked (a short body, a range other than the
  // one asked), naming expected and actual; PERMISSION_DENIED, NOT_FOUND,
  // UNAVAILABLE (after retries) as the storage answered. Never a mix of two
  // versions of the object.
  virtual absl::Status ReadAt(uint64_t offset, uint64_t length,
                              char* out) const = 0;

  // The same bytes as a view: local files return their mapping (no copy);
  // others fill `scratch` and return a view of it.
  // REQUIRES: `scratch` holds `length` bytes and outlives the view.
  virtual absl::StatusOr<absl::Span<const uint8_t>> Read(uint64_t offset,
                                                         uint64_t length,
                                                         char* scratch) const;

  virtual ReadStats stats() const { return {}; }

 protected:
  explicit ObjectReader(ObjectIdentity identity)
      : identity_(std::move(identity)) {}

  // OK when [offset, offset + length) lies within size(); else OUT_OF_RANGE
  // naming the object, the range and the size.
  absl::Status CheckRange(uint64_t offset, uint64_t length) const;

 private:
  ObjectIdentity identity_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_OBJECT_READER_H_
