#include "core/io/block_cache.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace tensormorph {
namespace {

// An ObjectReader whose reads go through a BlockCache.
class CachedObjectReader final : public ObjectReader {
 public:
  CachedObjectReader(std::shared_ptr<BlockCache> cache,
                     std::shared_ptr<const ObjectReader> inner)
      : ObjectReader(inner->identity()),
        cache_(std::move(cache)),
        inner_(std::move(inner)),
        key_(identity().CacheKey(inner_->display())),
        counters_(std::make_shared<BlockCache::Counters>()) {}

  const std::string& display() const override { return inner_->display(); }

  absl::Status ReadAt(uint64_t offset, uint64_t length,
                      char* out) const override {
    if (absl::Status s = CheckRange(offset, length); !s.ok()) return s;
    if (length == 0) return absl::OkStatus();
    // A read that starts where the previous one ended is a stream.
    const bool sequential =
        last_end_.exchange(offset + length, std::memory_order_relaxed) ==
        offset;
    if (length >= cache_->options().direct_read_bytes) {
      return cache_->ReadDirect(*inner_, offset, length, out);
    }
    return cache_->ReadBlocks(
        inner_, key_, counters_, offset, length, out,
        sequential ? cache_->options().read_ahead_blocks : 0);
  }

  ReadStats stats() const override {
    ReadStats s = inner_->stats();
    s.cache_hits = counters_->hits.load(std::memory_order_relaxed);
    s.cache_misses = counters_->misses.load(std::memory_order_relaxed);
    return s;
  }

 private:
  std::shared_ptr<BlockCache> cache_;
  std::shared_ptr<const ObjectReader> inner_;
  std::string key_;
  std::shared_ptr<BlockCache::Counters> counters_;
  mutable std::atomic<uint64_t> last_end_{std::numeric_limits<uint64_t>::max()};
};

}  // namespace

absl::StatusOr<std::shared_ptr<BlockCache>> BlockCache::Create(
    BlockCacheOptions options) {
  if (options.block_bytes == 0 || options.ram_bytes < options.block_bytes ||
      options.parallel_fetches < 1 || options.read_ahead_blocks < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block cache: block size ", options.block_bytes, ", RAM budget ",
        options.ram_bytes, ", ", options.parallel_fetches,
        " parallel fetches, ", options.read_ahead_blocks,
        " read-ahead blocks (want a block size > 0, a budget of at least "
        "one block, at least 1 fetch, at least 0 blocks)"));
  }
  auto cache = std::shared_ptr<BlockCache>(new BlockCache(options));
  if (!options.disk_dir.empty()) {
    absl::StatusOr<std::unique_ptr<DiskBlockStore>> disk =
        DiskBlockStore::Open(options.disk_dir, options.disk_bytes);
    if (!disk.ok()) return disk.status();
    cache->disk_ = *std::move(disk);
  }
  for (int i = 0; i < options.parallel_fetches; ++i) {
    cache->workers_.emplace_back([c = cache.get()] { c->Worker(); });
  }
  return cache;
}

BlockCache::BlockCache(BlockCacheOptions options)
    : options_(std::move(options)) {}

BlockCache::~BlockCache() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

std::shared_ptr<const ObjectReader> BlockCache::Wrap(
    std::shared_ptr<const ObjectReader> inner) {
  return std::make_shared<CachedObjectReader>(shared_from_this(),
                                              std::move(inner));
}

ReadStats BlockCache::stats() const {
  ReadStats s;
  s.cache_hits = hits_.load(std::memory_order_relaxed);
  s.cache_misses = misses_.load(std::memory_order_relaxed);
  return s;
}

uint64_t BlockCache::ram_bytes_used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ram_used_;
}

void BlockCache::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    queue_.push_back(std::move(task));
  }
  queue_cv_.notify_one();
}

void BlockCache::Worker() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      // Queued fetches run even when stopping: someone may wait for them.
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    task();
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      --running_;
    }
    idle_cv_.notify_all();
  }
}

void BlockCache::Drain() {
  std::unique_lock<std::mutex> lock(queue_mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
}

BlockCache::Lookup BlockCache::Find(const Key& key, bool create) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = blocks_.find(key); it != blocks_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second.pos);
    return Lookup{it->second.data, {}, nullptr};
  }
  if (auto it = inflight_.find(key); it != inflight_.end()) {
    return Lookup{nullptr, it->second, nullptr};
  }
  if (!create) return Lookup{};
  auto promise = std::make_shared<std::promise<Result>>();
  std::shared_future<Result> future = promise->get_future().share();
  inflight_.emplace(key, future);
  return Lookup{nullptr, std::move(future), std::move(promise)};
}

void BlockCache::Insert(const Key& key, Block data) {
  if (data->size() > options_.ram_bytes) return;
  lru_.push_front(key);
  ram_used_ += data->size();
  blocks_[key] = Entry{std::move(data), lru_.begin()};
  while (ram_used_ > options_.ram_bytes && !lru_.empty()) {
    auto victim = blocks_.find(lru_.back());
    ram_used_ -= victim->second.data->size();
    blocks_.erase(victim);
    lru_.pop_back();
  }
}

void BlockCache::Fetch(const ObjectReader& inner, const Key& key,
                       const std::shared_ptr<std::promise<Result>>& promise,
                       Counters* counters) {
  const uint64_t start = key.second * options_.block_bytes;
  const uint64_t bytes = std::min(options_.block_bytes, inner.size() - start);
  Block block = disk_ ? disk_->Get(key.first, key.second, bytes) : nullptr;
  absl::Status status;
  if (block != nullptr) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    counters->hits.fetch_add(1, std::memory_order_relaxed);
  } else {
    misses_.fetch_add(1, std::memory_order_relaxed);
    counters->misses.fetch_add(1, std::memory_order_relaxed);
    auto data = std::make_shared<std::string>(bytes, '\0');
    status = inner.ReadAt(start, bytes, data->data());
    if (status.ok()) {
      if (disk_) disk_->Put(key.first, key.second, *data);
      block = std::move(data);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    inflight_.erase(key);
    if (status.ok()) Insert(key, block);
  }
  if (status.ok()) {
    promise->set_value(std::move(block));
  } else {
    promise->set_value(status);
  }
}

void BlockCache::PostFetch(const std::shared_ptr<const ObjectReader>& inner,
                           Key key,
                           std::shared_ptr<std::promise<Result>> promise,
                           std::shared_ptr<Counters> counters) {
  Post([this, inner, key = std::move(key), promise = std::move(promise),
        counters = std::move(counters)] {
    Fetch(*inner, key, promise, counters.get());
  });
}

absl::Status BlockCache::ReadBlocks(
    const std::shared_ptr<const ObjectReader>& inner, const std::string& key,
    const std::shared_ptr<Counters>& counters, uint64_t offset, uint64_t length,
    char* out, int prefetch) {
  const uint64_t b = options_.block_bytes;
  const uint64_t first = offset / b;
  const uint64_t last = (offset + length - 1) / b;
  std::vector<Lookup> lookups;
  lookups.reserve(last - first + 1);
  for (uint64_t i = first; i <= last; ++i) {
    lookups.push_back(Find({key, i}, true));
    if (lookups.back().data != nullptr) {
      hits_.fetch_add(1, std::memory_order_relaxed);
      counters->hits.fetch_add(1, std::memory_order_relaxed);
    }
  }
  // The first block this reader must fetch is fetched here, the others by
  // the workers meanwhile.
  int inline_index = -1;
  for (size_t i = 0; i < lookups.size(); ++i) {
    if (lookups[i].promise == nullptr) continue;
    if (inline_index < 0) {
      inline_index = static_cast<int>(i);
    } else {
      PostFetch(inner, {key, first + i}, lookups[i].promise, counters);
    }
  }
  const uint64_t blocks = (inner->size() + b - 1) / b;
  for (uint64_t j = last + 1;
       j < blocks && j <= last + static_cast<uint64_t>(prefetch); ++j) {
    Lookup ahead = Find({key, j}, true);
    if (ahead.promise != nullptr) {
      PostFetch(inner, {key, j}, ahead.promise, counters);
    }
  }
  if (inline_index >= 0) {
    Fetch(*inner, {key, first + inline_index}, lookups[inline_index].promise,
          counters.get());
  }
  for (size_t i = 0; i < lookups.size(); ++i) {
    Block block = lookups[i].data;
    if (block == nullptr) {
      const Result& r = lookups[i].future.get();
      if (!r.ok()) return r.status();
      block = *r;
    }
    const uint64_t start = (first + i) * b;
    const uint64_t from = std::max(offset, start);
    const uint64_t to = std::min(offset + length, start + block->size());
    if (to < from || block->size() != std::min(b, inner->size() - start)) {
      return absl::InternalError(absl::StrCat("'", inner->display(),
                                              "': block ", first + i, " holds ",
                                              block->size(), " bytes"));
    }
    std::memcpy(out + (from - offset), block->data() + (from - start),
                to - from);
  }
  return absl::OkStatus();
}

absl::Status BlockCache::ReadDirect(const ObjectReader& inner, uint64_t offset,
                                    uint64_t length, char* out) {
  const uint64_t parts = static_cast<uint64_t>(options_.parallel_fetches);
  const uint64_t b = options_.block_bytes;
  // Whole blocks per range, so ranges stay aligned as the storage's are.
  uint64_t chunk = (length + parts - 1) / parts;
  chunk = std::max(b, (chunk + b - 1) / b * b);
  const uint64_t n = (length + chunk - 1) / chunk;
  std::vector<absl::Status> status(n);
  auto run = [&](uint64_t i) {
    const uint64_t from = i * chunk;
    const uint64_t bytes = std::min(chunk, length - from);
    status[i] = inner.ReadAt(offset + from, bytes, out + from);
  };
  std::vector<std::thread> threads;
  for (uint64_t i = 1; i < n; ++i) threads.emplace_back(run, i);
  run(0);
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace tensormorph
