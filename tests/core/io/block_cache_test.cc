// The block cache over objects served by nginx, held to counts: requests
// made and blocks fetched, hit or missed.
#include "core/io/block_cache.h"

#include <filesystem>
#include <fstream>
#include <thread>

#include "core/io/http_object.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/io/storage_test_data.h"
#include "tests/support/status_matchers.h"
#include "tests/support/storage_servers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasReason;

constexpr uint64_t kBlock = 64 << 10;
constexpr uint64_t kObjectBytes = 64 * kBlock;  // 4 MiB

class BlockCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::NginxPath().empty()) GTEST_SKIP() << "nginx is not installed";
    data_ = testing::MakeTempDir();
    bytes_ = testing::SeededBytes(kObjectBytes, 7);
    testing::WriteObject(data_ + "/obj.bin", bytes_);
    nginx_ = std::make_unique<testing::NginxServer>(data_);
    http_ = std::make_shared<HttpClient>(testing::TestHttpOptions());
    options_.block_bytes = kBlock;
    options_.ram_bytes = 16 * kBlock;
    options_.read_ahead_blocks = 4;
    options_.parallel_fetches = 4;
    options_.direct_read_bytes = 16 * kBlock;
  }

  // Opened with a 1-byte head, so every block is fetched through the cache.
  std::shared_ptr<const ObjectReader> Open(BlockCache& cache) {
    HttpSource s;
    s.url = nginx_->Url("/obj.bin");
    auto r = HttpObjectReader::Open(http_, s, 1);
    EXPECT_TRUE(r.ok()) << r.status();
    return cache.Wrap(*r);
  }

  std::shared_ptr<BlockCache> NewCache() {
    auto c = BlockCache::Create(options_);
    EXPECT_TRUE(c.ok()) << c.status();
    return *c;
  }

  void ExpectRead(const ObjectReader& r, uint64_t off, uint64_t n) {
    std::string out(n, '\0');
    ASSERT_TRUE(r.ReadAt(off, n, out.data()).ok());
    EXPECT_EQ(out, bytes_.substr(off, n)) << "at " << off;
  }

  std::string data_;
  std::string bytes_;
  std::unique_ptr<testing::NginxServer> nginx_;
  std::shared_ptr<HttpClient> http_;
  BlockCacheOptions options_;
};

TEST_F(BlockCacheTest, AScalarReadFetchesOneBlockOrTwoAcrossABoundary) {
  auto cache = NewCache();
  auto r = Open(*cache);
  ExpectRead(*r, 10 * kBlock + 100, 4);
  EXPECT_EQ(r->stats().cache_misses, 1u);
  ExpectRead(*r, 20 * kBlock - 2, 4);
  EXPECT_EQ(r->stats().cache_misses, 3u);
  EXPECT_EQ(r->stats().requests, 1u + 3u);  // the open, then one per block
}

TEST_F(BlockCacheTest, ARepeatedReadIsAHitWithoutRequest) {
  auto cache = NewCache();
  auto r = Open(*cache);
  ExpectRead(*r, 5 * kBlock, 8);
  ExpectRead(*r, 5 * kBlock + 8, 8 - 1);  // continues: a stream, read-ahead
  cache->Drain();
  const uint64_t requests = r->stats().requests;
  ExpectRead(*r, 5 * kBlock, 8);
  EXPECT_EQ(r->stats().requests, requests);
  EXPECT_GE(r->stats().cache_hits, 2u);
}

TEST_F(BlockCacheTest, SequentialReadsTriggerReadAheadAndScatteredOnesDoNot) {
  auto cache = NewCache();
  auto r = Open(*cache);
  ExpectRead(*r, 30 * kBlock, 10);
  ExpectRead(*r, 40 * kBlock, 10);
  EXPECT_EQ(r->stats().cache_misses, 2u);  // scattered: no read-ahead
  ExpectRead(*r, 0, kBlock);
  ExpectRead(*r, kBlock, kBlock);  // continues the last read: blocks 2-5 ahead
  cache->Drain();
  // Blocks 2-5 were fetched without being read...
  EXPECT_EQ(r->stats().cache_misses, 2u + 6u);
  EXPECT_EQ(r->stats().requests, 1u + 2u + 6u);
  // ...so reading them (backwards: no stream, no more read-ahead) costs
  // nothing.
  for (uint64_t b = 5; b >= 2; --b) ExpectRead(*r, b * kBlock, kBlock);
  EXPECT_EQ(r->stats().requests, 1u + 2u + 6u);
  EXPECT_EQ(r->stats().cache_hits, 4u);
}

TEST_F(BlockCacheTest, ConcurrentReadersOfOneBlockWaitForOneFetch) {
  auto cache = NewCache();
  auto r = Open(*cache);
  std::vector<std::thread> readers;
  for (int i = 0; i < 8; ++i) {
    readers.emplace_back([&, i] { ExpectRead(*r, 12 * kBlock + i * 100, 50); });
  }
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(r->stats().requests, 1u + 1u);
  EXPECT_EQ(r->stats().cache_misses, 1u);
}

TEST_F(BlockCacheTest, ALargeReadGoesDirectInParallelRanges) {
  auto cache = NewCache();
  auto r = Open(*cache);
  ExpectRead(*r, 3, 32 * kBlock);
  EXPECT_EQ(r->stats().requests, 1u + 4u);  // parallel_fetches ranges
  EXPECT_EQ(r->stats().cache_misses, 0u);
  EXPECT_EQ(cache->ram_bytes_used(), 0u);
}

TEST_F(BlockCacheTest, RamStaysWithinItsBudget) {
  auto cache = NewCache();
  auto r = Open(*cache);
  for (uint64_t b = 0; b < 40; b += 2) ExpectRead(*r, b * kBlock + 1, 1);
  EXPECT_LE(cache->ram_bytes_used(), options_.ram_bytes);
}

TEST_F(BlockCacheTest, TheDiskTierSurvivesANewCacheAndRefusesDamagedFiles) {
  options_.disk_dir = testing::MakeTempDir() + "/blocks";
  options_.disk_bytes = 64 * kBlock;
  {
    auto cache = NewCache();
    auto r = Open(*cache);
    ExpectRead(*r, 9 * kBlock + 5, 10);
    EXPECT_EQ(r->stats().requests, 2u);
  }
  {
    auto cache = NewCache();  // a restarted process: RAM is empty
    auto r = Open(*cache);
    ExpectRead(*r, 9 * kBlock + 5, 10);
    EXPECT_EQ(r->stats().requests, 1u);  // the open only
    EXPECT_EQ(r->stats().cache_hits, 1u);
  }
  // Damage the block file: one flipped byte of data, then a truncation.
  std::string path;
  for (const auto& e : std::filesystem::directory_iterator(options_.disk_dir)) {
    path = e.path();
  }
  ASSERT_FALSE(path.empty());
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-100, std::ios::end);
    f.put('\x5a' ^ bytes_[10 * kBlock - 100]);
  }
  {
    auto cache = NewCache();
    auto r = Open(*cache);
    ExpectRead(*r, 9 * kBlock + 5, 10);
    ExpectRead(*r, 10 * kBlock - 100, 1);
    EXPECT_EQ(r->stats().requests, 2u);  // refetched once, then in RAM
    EXPECT_EQ(r->stats().cache_misses, 1u);
  }
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1);
  {
    auto cache = NewCache();
    auto r = Open(*cache);
    ExpectRead(*r, 9 * kBlock + 5, 10);
    EXPECT_EQ(r->stats().cache_misses, 1u);
  }
}

TEST_F(BlockCacheTest, TheDiskTierStaysUnderItsCap) {
  options_.disk_dir = testing::MakeTempDir() + "/blocks";
  options_.disk_bytes = 4 * kBlock + 4 * 4096;  // four blocks with headers
  auto cache = NewCache();
  auto r = Open(*cache);
  for (uint64_t b = 0; b < 20; b += 2) ExpectRead(*r, b * kBlock, 1);
  uint64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(options_.disk_dir)) {
    total += e.file_size();
  }
  EXPECT_LE(total, options_.disk_bytes);
  EXPECT_GT(total, 0u);
}

TEST_F(BlockCacheTest, AReplacedObjectNeverMeetsTheOldBlocks) {
  auto cache = NewCache();
  auto old_reader = Open(*cache);
  ExpectRead(*old_reader, 7 * kBlock, 10);
  bytes_ = testing::SeededBytes(kObjectBytes, 8);
  testing::WriteObject(data_ + "/obj.bin", bytes_, 10);
  auto r = Open(*cache);
  ExpectRead(*r, 7 * kBlock, 10);
  EXPECT_EQ(r->stats().cache_misses, 1u);
  std::string out(10, '\0');
  EXPECT_THAT(old_reader->ReadAt(8 * kBlock, 10, out.data()),
              HasReason(ErrorReason::kFileChangedDuringRead));
}

TEST_F(BlockCacheTest, RefusesNonsenseOptions) {
  options_.block_bytes = 0;
  EXPECT_THAT(BlockCache::Create(options_),
              HasReason(ErrorReason::kRequestInvalid));
}

}  // namespace
}  // namespace tensormorph
