// The block cache's disk tier: one file per block in a directory, under a
// size cap, where a damaged file is a miss and never wrong bytes.
#ifndef TENSORMORPH_CORE_IO_DISK_BLOCK_STORE_H_
#define TENSORMORPH_CORE_IO_DISK_BLOCK_STORE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensormorph {

// A block is stored as NAME.blk, NAME the XXH3-64 of its object's cache key
// (ObjectIdentity::CacheKey) and the block index, holding a header (magic,
// key length, index, data length, XXH3-64 of the data), the key itself and
// the data. A file is written under a temporary name and renamed into
// place, so a reader sees a whole file or none; Get checks every header
// field, the key and the checksum against what it asks for, so a short,
// truncated, corrupted or colliding file is a miss (and is removed), never
// other bytes. The checksum guards against damage, not against forgery: the
// directory must be writable only by the process's user.
//
// Blocks already in the directory when it is opened are kept and count
// toward the cap (a restarted server keeps its cache). When a Put takes
// the directory over `cap_bytes`, the least recently used blocks go.
// Failures to write are ignored (the tier only saves fetches).
// Thread safety: thread-safe. Two processes may share a directory: a file
// is replaced whole, and each counts only what it saw.
class DiskBlockStore {
 public:
  static constexpr char kSuffix[] = ".blk";

  // Creates `dir` when missing. Errors: INVALID_ARGUMENT when `dir` is
  // empty or `cap_bytes` is 0; INTERNAL (naming dir and errno's text) when
  // it cannot be created or listed.
  static absl::StatusOr<std::unique_ptr<DiskBlockStore>> Open(
      const std::string& dir, uint64_t cap_bytes);

  // The block's data, or null (a miss) when absent or damaged.
  std::shared_ptr<const std::string> Get(absl::string_view object_key,
                                         uint64_t index,
                                         uint64_t expected_bytes);
  void Put(absl::string_view object_key, uint64_t index,
           absl::string_view data);

  uint64_t bytes() const;
  const std::string& dir() const { return dir_; }
  // The file a block is stored in (tests damage it).
  std::string PathOf(absl::string_view object_key, uint64_t index) const;

 private:
  DiskBlockStore(std::string dir, uint64_t cap)
      : dir_(std::move(dir)), cap_(cap) {}
  void Track(const std::string& name, uint64_t size);  // REQUIRES: mu_ held
  void Forget(const std::string& name);                // REQUIRES: mu_ held
  void EvictOverCap();                                 // REQUIRES: mu_ held

  std::string dir_;
  uint64_t cap_;
  mutable std::mutex mu_;
  uint64_t bytes_ = 0;
  std::list<std::string> lru_;  // front: most recently used
  struct Entry {
    uint64_t size;
    std::list<std::string>::iterator pos;
  };
  absl::flat_hash_map<std::string, Entry> files_;
  uint64_t temp_counter_ = 0;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_DISK_BLOCK_STORE_H_
