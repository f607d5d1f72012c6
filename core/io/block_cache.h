// A bounded cache of fixed-size blocks of remote objects, in RAM and
// optionally on disk, with read-ahead for readers that stream: scalar
// lookups fetch only their blocks, sequential reads find their next blocks
// already fetched, and large reads go to the storage in parallel ranges.
#ifndef TENSORMORPH_CORE_IO_BLOCK_CACHE_H_
#define TENSORMORPH_CORE_IO_BLOCK_CACHE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/io/disk_block_store.h"
#include "core/io/object_reader.h"

namespace tensormorph {

struct BlockCacheOptions {
  uint64_t block_bytes = uint64_t{1} << 20;
  // RAM budget for blocks (least recently used go first).
  uint64_t ram_bytes = uint64_t{256} << 20;
  // The disk tier (disk_block_store.h) when set, capped at disk_bytes.
  std::string disk_dir;
  uint64_t disk_bytes = uint64_t{10} << 30;
  // Blocks fetched ahead of a reader whose read continues its previous one.
  int read_ahead_blocks = 8;
  // Threads fetching blocks in the background (read-ahead, the blocks of a
  // read after its first) and ranges of a large read in parallel.
  int parallel_fetches = 4;
  // A read at least this long goes straight to the storage, split into
  // `parallel_fetches` ranges of at least block_bytes fetched at once into
  // the caller's buffer, and does not pass through (or evict) the blocks:
  // a tensor read once is not worth the blocks of the lookups around it.
  uint64_t direct_read_bytes = uint64_t{8} << 20;
};

// Blocks are keyed by (ObjectIdentity::CacheKey, block index), so a
// replaced object (other validator) never meets the old one's blocks.
// Concurrent readers of a block not yet cached wait for one fetch. Fetch
// errors are not cached.
// Thread safety: thread-safe; so are the readers Wrap returns.
class BlockCache : public std::enable_shared_from_this<BlockCache> {
 public:
  // Errors: INVALID_ARGUMENT for a block size of 0, a RAM budget smaller
  // than one block, parallel_fetches < 1 or read_ahead_blocks < 0; those of
  // DiskBlockStore::Open.
  static absl::StatusOr<std::shared_ptr<BlockCache>> Create(
      BlockCacheOptions options);
  ~BlockCache();

  // `inner` read through this cache. The reader's stats() are inner's
  // requests and bytes with the reader's own block hits and misses.
  std::shared_ptr<const ObjectReader> Wrap(
      std::shared_ptr<const ObjectReader> inner);

  const BlockCacheOptions& options() const { return options_; }
  // Block hits and misses over every object.
  ReadStats stats() const;
  uint64_t ram_bytes_used() const;
  // Waits until no background fetch is queued or running (tests count
  // after it; a shutdown may call it to finish writing the disk tier).
  void Drain();

  // Used by the wrapping reader (block_cache.cc).
  using Block = std::shared_ptr<const std::string>;
  struct Counters {
    std::atomic<uint64_t> hits{0};
    std::atomic<uint64_t> misses{0};
  };
  // Bytes [offset, offset + length) of `inner` through the blocks; then
  // `prefetch` blocks after the last one read are fetched in the
  // background.
  // REQUIRES: the range lies within inner's size, length > 0.
  absl::Status ReadBlocks(const std::shared_ptr<const ObjectReader>& inner,
                          const std::string& key,
                          const std::shared_ptr<Counters>& counters,
                          uint64_t offset, uint64_t length, char* out,
                          int prefetch);
  // The same straight from the storage in parallel ranges.
  absl::Status ReadDirect(const ObjectReader& inner, uint64_t offset,
                          uint64_t length, char* out);

 private:
  using Key = std::pair<std::string, uint64_t>;
  using Result = absl::StatusOr<Block>;
  struct Entry {
    Block data;
    std::list<Key>::iterator pos;
  };
  // A block found (data), being fetched (future), or to be fetched by the
  // caller (future with `promise` set).
  struct Lookup {
    Block data;
    std::shared_future<Result> future;
    std::shared_ptr<std::promise<Result>> promise;
  };

  explicit BlockCache(BlockCacheOptions options);
  Lookup Find(const Key& key, bool create);
  void Fetch(const ObjectReader& inner, const Key& key,
             const std::shared_ptr<std::promise<Result>>& promise,
             Counters* counters);
  // Starts the fetch of an owned block on a worker.
  void PostFetch(const std::shared_ptr<const ObjectReader>& inner, Key key,
                 std::shared_ptr<std::promise<Result>> promise,
                 std::shared_ptr<Counters> counters);
  void Insert(const Key& key, Block data);  // REQUIRES: mu_ held
  void Post(std::function<void()> task);
  void Worker();

  BlockCacheOptions options_;
  std::unique_ptr<DiskBlockStore> disk_;
  mutable std::mutex mu_;
  std::list<Key> lru_;  // front: most recently used
  absl::flat_hash_map<Key, Entry> blocks_;
  absl::flat_hash_map<Key, std::shared_future<Result>> inflight_;
  uint64_t ram_used_ = 0;
  std::atomic<uint64_t> hits_{0};
  std::atomic<uint64_t> misses_{0};

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  int running_ = 0;  // tasks taken off the queue and not yet done
  std::condition_variable idle_cv_;
  std::vector<std::thread> workers_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_BLOCK_CACHE_H_
