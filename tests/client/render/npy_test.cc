// NpyFileWriter: a .npy written as its data arrives, whole or not at all.
#include "client/render/npy.h"

#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/npy_reader.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::StatusIs;

TEST(NpyFileWriterTest, WritesTheHeaderThenTheChunksInOrder) {
  const std::string path = testing::MakeTempDir() + "/a.npy";
  auto w = NpyFileWriter::Create(path);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Begin("F32", {2, 2}, 16).ok());
  ASSERT_TRUE((*w)->Append(std::string(8, '\x01')).ok());
  ASSERT_TRUE((*w)->Append(std::string(8, '\x02')).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  w->reset();
  const testing::NpyArray npy = testing::ReadNpy(path);
  EXPECT_EQ(npy.descr, "<f4");
  EXPECT_EQ(npy.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(npy.data, std::string(8, '\x01') + std::string(8, '\x02'));
}

TEST(NpyFileWriterTest, BlockDtypesAreStoredBytesARowPerRow) {
  const std::string path = testing::MakeTempDir() + "/q.npy";
  auto w = NpyFileWriter::Create(path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Begin("Q8_0", {2, 32}, 68).ok());
  EXPECT_EQ((*w)->layout().descr, "|u1");
  EXPECT_EQ((*w)->layout().shape, (std::vector<int64_t>{2, 34}));
}

TEST(NpyFileWriterTest, AShortOrLongStreamIsRefusedAndLeavesNoFile) {
  const std::string dir = testing::MakeTempDir();
  {
    auto w = NpyFileWriter::Create(dir + "/short.npy");
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Begin("F32", {4}, 16).ok());
    ASSERT_TRUE((*w)->Append(std::string(8, '\0')).ok());
    EXPECT_THAT((*w)->Finish(),
                StatusIs(absl::StatusCode::kDataLoss, "8 bytes short"));
  }
  EXPECT_NE(::access((dir + "/short.npy").c_str(), F_OK), 0);
  {
    auto w = NpyFileWriter::Create(dir + "/long.npy");
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Begin("F32", {1}, 4).ok());
    EXPECT_THAT((*w)->Append(std::string(8, '\0')),
                StatusIs(absl::StatusCode::kOutOfRange, "8 bytes where 4"));
    EXPECT_THAT((*w)->Finish(), StatusIs(absl::StatusCode::kDataLoss, ""));
  }
  EXPECT_NE(::access((dir + "/long.npy").c_str(), F_OK), 0);
}

TEST(NpyFileWriterTest, DataBeforeItsHeaderIsRefused) {
  auto w = NpyFileWriter::Create(testing::MakeTempDir() + "/x.npy");
  ASSERT_TRUE(w.ok());
  EXPECT_THAT((*w)->Append("abcd"),
              StatusIs(absl::StatusCode::kFailedPrecondition, "before"));
}

TEST(NpyFileWriterTest, ANonRegularOutputIsNeverRemoved) {
  auto w = NpyFileWriter::Create("/dev/null");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Begin("F32", {1}, 4).ok());
  w->reset();  // unfinished
  EXPECT_EQ(::access("/dev/null", F_OK), 0);
}

TEST(NpyFileWriterTest, AnUnopenableFileNamesItsPath) {
  EXPECT_THAT(NpyFileWriter::Create("/nonexistent-dir/x.npy").status(),
              StatusIs(absl::StatusCode::kNotFound, "/nonexistent-dir/x.npy"));
}

}  // namespace
}  // namespace tensormorph
