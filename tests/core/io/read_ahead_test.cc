// ReadAhead asks the kernel for the bytes ahead of a reader that goes front
// to back, and for nothing when reads are scattered; it never reads a byte
// itself. Seen with mincore on a real file evicted from the page cache (a
// file system that cannot evict, as tmpfs, skips these tests).
#include "core/io/read_ahead.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/io/mapped_file.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// A fresh file of `bytes` written to disk and dropped from the page cache,
// mapped as checkpoints are (MappedFile: MADV_RANDOM).
class ColdFile {
 public:
  explicit ColdFile(size_t bytes) {
    path_ = testing::MakeTempDir() + "/cold.bin";
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char> block(kMiB, 'x');
    for (size_t done = 0; done < bytes; done += block.size()) {
      EXPECT_EQ(::write(fd, block.data(), block.size()),
                static_cast<ssize_t>(block.size()));
    }
    ::fsync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    mapping_ = *MappedFile::Open(path_);
  }
  absl::Span<const uint8_t> bytes() const { return mapping_->bytes(); }

  // Pages of [begin, end) in the page cache.
  size_t Resident(size_t begin, size_t end) const {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> in((end - begin + page - 1) / page);
    ::mincore(const_cast<uint8_t*>(bytes().data() + begin), end - begin,
              in.data());
    size_t n = 0;
    for (unsigned char c : in) n += c & 1;
    return n;
  }
  size_t Pages(size_t begin, size_t end) const {
    return (end - begin) / static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  }

 private:
  std::string path_;
  std::shared_ptr<const MappedFile> mapping_;
};

// Waits up to 20 s (the reads are asynchronous) for every page of the range.
bool EventuallyResident(const ColdFile& f, size_t begin, size_t end) {
  for (int i = 0; i < 2000; ++i) {
    if (f.Resident(begin, end) == f.Pages(begin, end)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(ReadAheadTest, ASequentialReaderGetsItsWindowAhead) {
  ColdFile f(16 * kMiB);
  if (f.Resident(0, 16 * kMiB) != 0) GTEST_SKIP() << "cannot evict here";
  ReadAhead ahead(f.bytes(), /*window=*/4 * kMiB);
  ahead.Reading(f.bytes().subspan(0, kMiB));  // one long read: sequential
  EXPECT_TRUE(EventuallyResident(f, 0, 5 * kMiB));
  // Nothing past the window was asked for (and nothing read it).
  EXPECT_EQ(f.Resident(6 * kMiB, 16 * kMiB), 0u);
  // Reading on, the window moves with the reader, at least half of it
  // ahead at every read.
  for (size_t at = kMiB; at < 8 * kMiB; at += kMiB) {
    ahead.Reading(f.bytes().subspan(at, kMiB));
  }
  EXPECT_TRUE(EventuallyResident(f, 0, 10 * kMiB));
}

TEST(ReadAheadTest, ShortReadsBackToBackAreSequentialToo) {
  ColdFile f(8 * kMiB);
  if (f.Resident(0, 8 * kMiB) != 0) GTEST_SKIP() << "cannot evict here";
  ReadAhead ahead(f.bytes(), /*window=*/2 * kMiB);
  ahead.Reading(f.bytes().subspan(0, 4096));     // alone: not yet
  ahead.Reading(f.bytes().subspan(4096, 4096));  // where it ended: sequential
  EXPECT_TRUE(EventuallyResident(f, 4096, 2 * kMiB));
}

TEST(ReadAheadTest, ScatteredShortReadsAskForNothing) {
  ColdFile f(16 * kMiB);
  if (f.Resident(0, 16 * kMiB) != 0) GTEST_SKIP() << "cannot evict here";
  ReadAhead ahead(f.bytes());
  for (size_t at = 0; at < 16 * kMiB; at += kMiB) {
    ahead.Reading(f.bytes().subspan(at, 4096));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(f.Resident(0, 16 * kMiB), 0u);
}

TEST(ReadAheadTest, ElementsMapToTheSameFractionOfEveryPart) {
  ColdFile f(16 * kMiB);
  if (f.Resident(0, 16 * kMiB) != 0) GTEST_SKIP() << "cannot evict here";
  // Two parts of one tensor of 1 M elements: 12 MiB of blocks, then 4 MiB
  // of scales. Reading the first quarter of the elements, with a window of
  // one byte, brings in the first quarter of each part and no more.
  const auto blocks = f.bytes().subspan(0, 12 * kMiB);
  const auto scales = f.bytes().subspan(12 * kMiB, 4 * kMiB);
  ElementReadAhead ahead({blocks, scales}, int64_t{1} << 20, /*window=*/1);
  ahead.Reading(0, int64_t{1} << 18);
  EXPECT_TRUE(EventuallyResident(f, 0, 3 * kMiB));
  EXPECT_TRUE(EventuallyResident(f, 12 * kMiB, 13 * kMiB));
  EXPECT_EQ(f.Resident(3 * kMiB + 4096 * 4, 12 * kMiB), 0u);
  EXPECT_EQ(f.Resident(13 * kMiB + 4096 * 4, 16 * kMiB), 0u);
}

TEST(ReadAheadTest, HintsOutsideAFileMappingAreHarmless) {
  std::vector<uint8_t> heap(4 * kMiB, 7);
  WillNeed(heap);
  WillNeed({});
  ReadAhead ahead(heap);
  ahead.Reading(absl::MakeConstSpan(heap).subspan(0, kMiB));
  EXPECT_EQ(heap[kMiB], 7);
}

}  // namespace
}  // namespace tensormorph
