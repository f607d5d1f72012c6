// A file's identity, read by path or from a stat already taken, is one
// thing: what the registry compares to notice a checkpoint changed.
#include "core/io/mapped_file.h"

#include <sys/stat.h>

#include <string>

#include "gtest/gtest.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

TEST(FileIdentityTest, FromAStatTakenIsWhatStatFileReads) {
  const std::string dir = testing::MakeTempDir();
  const std::string path = dir + "/f.bin";
  testing::WriteFile(path, "abc");
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  auto by_path = StatFile(path);
  auto by_stat = IdentityFromStat(path, st);
  ASSERT_TRUE(by_path.ok()) << by_path.status();
  ASSERT_TRUE(by_stat.ok()) << by_stat.status();
  EXPECT_EQ(*by_path, *by_stat);
  EXPECT_EQ(by_stat->size, 3u);
  // A rewrite is another identity.
  testing::WriteFile(path, "abcd");
  EXPECT_FALSE(*StatFile(path) == *by_stat);
  // Not a regular file: refused by both, naming it.
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(IdentityFromStat(dir, st).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StatFile(dir).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(IdentityFromStat(dir, st).status().message().find(dir),
            std::string::npos);
}

}  // namespace
}  // namespace tensormorph
