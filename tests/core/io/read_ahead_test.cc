// ReadAhead gives a region the kernel's read-ahead (MADV_NORMAL) while a
// reader goes through it front to back, and gives it back MADV_RANDOM (as
// MappedFile maps) when the reader is done; scattered reads change nothing,
// and nothing is ever read. The advice in force is read from the mapping's
// VmFlags in /proc/self/smaps ("rr": random read).
#include "core/io/read_ahead.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/io/mapped_file.h"
#include "gtest/gtest.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

std::shared_ptr<const MappedFile> MapFile(size_t bytes) {
  const std::string path = testing::MakeTempDir() + "/f.bin";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(bytes)), 0);
  ::close(fd);
  return *MappedFile::Open(path);
}

// Whether the page holding `p` is mapped with MADV_RANDOM now.
bool RandomAt(const uint8_t* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    // A mapping's first line: "start-end perms ...".
    std::vector<std::string> range =
        absl::StrSplit(line.substr(0, line.find(' ')), '-');
    uint64_t begin = 0, end = 0;
    if (range.size() == 2 && absl::SimpleHexAtoi(range[0], &begin) &&
        absl::SimpleHexAtoi(range[1], &end)) {
      inside = addr >= begin && addr < end;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line.find(" rr") != std::string::npos;
    }
  }
  ADD_FAILURE() << "no mapping holds " << static_cast<const void*>(p);
  return false;
}

TEST(ReadAheadTest, ASequentialReaderGetsTheKernelsReadAheadUntilItEnds) {
  auto file = MapFile(16 * kMiB);
  const absl::Span<const uint8_t> all = file->bytes();
  // A stored tensor in the middle of the file.
  const absl::Span<const uint8_t> tensor = all.subspan(4 * kMiB, 8 * kMiB);
  ASSERT_TRUE(RandomAt(tensor.data()));  // as MappedFile maps
  {
    ReadAhead ahead(tensor);
    ahead.Reading(tensor.subspan(0, kMiB));  // one long read: sequential
    EXPECT_TRUE(ahead.sequential());
    EXPECT_FALSE(RandomAt(tensor.data()));
    EXPECT_FALSE(RandomAt(tensor.data() + 8 * kMiB - 1));
    // The rest of the file keeps its advice.
    EXPECT_TRUE(RandomAt(all.data()));
    EXPECT_TRUE(RandomAt(all.data() + 15 * kMiB));
  }
  EXPECT_TRUE(RandomAt(tensor.data()));
  EXPECT_TRUE(RandomAt(tensor.data() + 8 * kMiB - 1));
}

TEST(ReadAheadTest, ShortReadsBackToBackAreSequentialToo) {
  auto file = MapFile(8 * kMiB);
  ReadAhead ahead(file->bytes());
  ahead.Reading(file->bytes().subspan(0, 4096));  // alone: not yet
  EXPECT_FALSE(ahead.sequential());
  ahead.Reading(file->bytes().subspan(4096, 4096));  // where it ended
  EXPECT_TRUE(ahead.sequential());
  EXPECT_FALSE(RandomAt(file->bytes().data()));
}

TEST(ReadAheadTest, ScatteredShortReadsChangeNothing) {
  auto file = MapFile(16 * kMiB);
  ReadAhead ahead(file->bytes());
  for (size_t at = 0; at < 16 * kMiB; at += kMiB) {
    ahead.Reading(file->bytes().subspan(at, 4096));
  }
  EXPECT_FALSE(ahead.sequential());
  EXPECT_TRUE(RandomAt(file->bytes().data()));
}

TEST(ReadAheadTest, AMovedReaderEndsTheReadAheadOnce) {
  auto file = MapFile(8 * kMiB);
  ReadAhead first(file->bytes());
  first.Reading(file->bytes().subspan(0, kMiB));
  ReadAhead second = std::move(first);
  EXPECT_TRUE(second.sequential());
  EXPECT_FALSE(RandomAt(file->bytes().data()));
  second = ReadAhead();
  EXPECT_TRUE(RandomAt(file->bytes().data()));
}

TEST(ReadAheadTest, ElementsMapToTheSameFractionOfEveryPart) {
  auto file = MapFile(16 * kMiB);
  // Two parts of one tensor of 1 M elements: 12 MiB of blocks, then 4 MiB
  // of scales. A quarter of the elements is 3 MiB of one and 1 MiB of the
  // other: long reads, so both parts turn sequential.
  const auto blocks = file->bytes().subspan(0, 12 * kMiB);
  const auto scales = file->bytes().subspan(12 * kMiB, 4 * kMiB);
  {
    ElementReadAhead ahead({blocks, scales}, int64_t{1} << 20);
    ahead.Reading(0, int64_t{1} << 18);
    EXPECT_FALSE(RandomAt(blocks.data()));
    EXPECT_FALSE(RandomAt(scales.data()));
  }
  EXPECT_TRUE(RandomAt(blocks.data()));
  EXPECT_TRUE(RandomAt(scales.data()));
}

TEST(ReadAheadTest, MemoryThatIsNotAMappingIsLeftAlone) {
  std::vector<uint8_t> heap(4 * kMiB, 7);
  {
    ReadAhead ahead(heap);
    ahead.Reading(absl::MakeConstSpan(heap).subspan(0, kMiB));
  }
  EXPECT_EQ(heap[kMiB], 7);
}

}  // namespace
}  // namespace tensormorph
