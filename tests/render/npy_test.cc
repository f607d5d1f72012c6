// NpyFileWriter: a .npy written as its data arrives, refused when the data
// does not match its header. (Whole or not at all is the CLI's OutputFile's:
// tests/client/cli/output_file_test.cc.)
#include "render/npy.h"

#include <fcntl.h>
#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/npy_reader.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::testing::AllOf;

// A file open for writing, closed when the test's scope ends.
class OpenFile {
 public:
  explicit OpenFile(const std::string& path)
      : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                   0666)) {}
  ~OpenFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

TEST(NpyFileWriterTest, WritesTheHeaderThenTheChunksInOrder) {
  const std::string path = testing::MakeTempDir() + "/a.npy";
  {
    OpenFile f(path);
    ASSERT_GE(f.fd(), 0);
    NpyFileWriter w(f.fd(), path);
    ASSERT_TRUE(w.Begin("F32", {2, 2}, 16).ok());
    ASSERT_TRUE(w.Append(std::string(8, '\x01')).ok());
    ASSERT_TRUE(w.Append(std::string(8, '\x02')).ok());
    ASSERT_TRUE(w.Finish().ok());
  }
  const testing::NpyArray npy = testing::ReadNpy(path);
  EXPECT_EQ(npy.descr, "<f4");
  EXPECT_EQ(npy.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(npy.data, std::string(8, '\x01') + std::string(8, '\x02'));
}

TEST(NpyFileWriterTest, BlockDtypesAreStoredBytesARowPerRow) {
  const std::string path = testing::MakeTempDir() + "/q.npy";
  OpenFile f(path);
  NpyFileWriter w(f.fd(), path);
  ASSERT_TRUE(w.Begin("Q8_0", {2, 32}, 68).ok());
  EXPECT_EQ(w.layout().descr, "|u1");
  EXPECT_EQ(w.layout().shape, (std::vector<int64_t>{2, 34}));
}

TEST(NpyFileWriterTest, AShortOrLongStreamIsRefused) {
  const std::string dir = testing::MakeTempDir();
  {
    OpenFile f(dir + "/short.npy");
    NpyFileWriter w(f.fd(), dir + "/short.npy");
    ASSERT_TRUE(w.Begin("F32", {4}, 16).ok());
    ASSERT_TRUE(w.Append(std::string(8, '\0')).ok());
    EXPECT_THAT(w.Finish(), AllOf(HasReason(ErrorReason::kDataLoss),
                                  MessageNames("8 bytes")));
  }
  {
    OpenFile f(dir + "/long.npy");
    NpyFileWriter w(f.fd(), dir + "/long.npy");
    ASSERT_TRUE(w.Begin("F32", {1}, 4).ok());
    EXPECT_THAT(w.Append(std::string(8, '\0')),
                AllOf(HasReason(ErrorReason::kOutOfRange), MessageNames("8"),
                      MessageNames("4")));
    EXPECT_THAT(w.Finish(), HasReason(ErrorReason::kDataLoss));
  }
}

TEST(NpyFileWriterTest, DataBeforeItsHeaderIsRefused) {
  OpenFile f("/dev/null");
  NpyFileWriter w(f.fd(), "/dev/null");
  EXPECT_THAT(w.Append("abcd"), HasReason(ErrorReason::kFailedPrecondition));
}

TEST(NpyFileWriterTest, AFileThatCannotTakeTheBytesNamesItsPath) {
  NpyFileWriter w(-1, "x.npy");  // a closed fd: EBADF
  EXPECT_THAT(w.Begin("F32", {1}, 4),
              AllOf(HasReason(ErrorReason::kFailedPrecondition),
                    MessageNames("'x.npy'")));
}

}  // namespace
}  // namespace tensormorph
