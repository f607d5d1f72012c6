// FileAccess::Beneath opens only what lies beneath its roots, whatever the
// path, the symlinks on the way, or what changes between two opens.
#include "core/io/file_access.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::WriteFile;
using ::testing::HasSubstr;
using ::testing::Not;

namespace fs = std::filesystem;

std::string ReadAll(int fd) {
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  return out;
}

class FileAccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::canonical(MakeTempDir()).string();
    root_ = base_ + "/root";
    fs::create_directories(root_ + "/m/sub");
    WriteFile(root_ + "/m/a.txt", "inside");
    WriteFile(base_ + "/secret.txt", "PRIVATE");
    auto a = FileAccess::Beneath({root_});
    ASSERT_TRUE(a.ok()) << a.status();
    access_ = *a;
  }
  absl::StatusCode OpenCode(const std::string& path) const {
    return access_->Open(path, O_RDONLY).status().code();
  }
  std::string base_, root_;
  std::shared_ptr<const FileAccess> access_;
};

TEST_F(FileAccessTest, OpensFilesBeneathTheRoot) {
  auto fd = access_->Open(root_ + "/m/a.txt", O_RDONLY);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(ReadAll(fd->get()), "inside");
  EXPECT_TRUE(access_->Stat(root_).ok());
  EXPECT_TRUE(access_->Stat(root_ + "/m").ok());
}

TEST_F(FileAccessTest, PathsOutsideEveryRootAreRefused) {
  EXPECT_EQ(OpenCode(base_ + "/secret.txt"),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(OpenCode(base_ + "/rootx/a.txt"),  // a prefix is no parent
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(OpenCode("m/a.txt"), absl::StatusCode::kPermissionDenied);
}

TEST_F(FileAccessTest, DotDotOutOfTheRootIsRefused) {
  EXPECT_EQ(OpenCode(root_ + "/m/../../secret.txt"),
            absl::StatusCode::kPermissionDenied);
  // `..` that stays beneath is fine.
  EXPECT_TRUE(access_->Open(root_ + "/m/sub/../a.txt", O_RDONLY).ok());
}

TEST_F(FileAccessTest, SymlinksOutOfTheRootAreRefusedRelativeOrAbsolute) {
  fs::create_symlink("../../secret.txt", root_ + "/m/rel_out");
  fs::create_symlink(base_ + "/secret.txt", root_ + "/m/abs_out");
  fs::create_directory_symlink(base_, root_ + "/m/dir_out");
  for (const char* name :
       {"/m/rel_out", "/m/abs_out", "/m/dir_out/secret.txt"}) {
    SCOPED_TRACE(name);
    auto fd = access_->Open(root_ + name, O_RDONLY);
    EXPECT_EQ(fd.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(std::string(fd.status().message()), Not(HasSubstr("PRIVATE")));
    EXPECT_EQ(access_->Stat(root_ + name).status().code(),
              absl::StatusCode::kPermissionDenied);
  }
}

TEST_F(FileAccessTest, SymlinksThatStayBeneathAreFollowedRelativeOrAbsolute) {
  fs::create_symlink("a.txt", root_ + "/m/rel_in");
  fs::create_symlink(root_ + "/m/a.txt", root_ + "/m/abs_in");
  fs::create_directory_symlink("..", root_ + "/m/sub/up");
  for (const char* name : {"/m/rel_in", "/m/abs_in", "/m/sub/up/a.txt"}) {
    SCOPED_TRACE(name);
    auto fd = access_->Open(root_ + name, O_RDONLY);
    ASSERT_TRUE(fd.ok()) << fd.status();
    EXPECT_EQ(ReadAll(fd->get()), "inside");
  }
}

TEST_F(FileAccessTest, MagicLinksAreRefused) {
  const int outside = ::open((base_ + "/secret.txt").c_str(), O_RDONLY);
  ASSERT_GE(outside, 0);
  fs::create_symlink("/proc/self/fd/" + std::to_string(outside),
                     root_ + "/m/magic");
  EXPECT_EQ(OpenCode(root_ + "/m/magic"), absl::StatusCode::kPermissionDenied);
  ::close(outside);
}

TEST_F(FileAccessTest, NulBytesAndOverlongPathsAreInvalid) {
  EXPECT_EQ(OpenCode(root_ + std::string("/m/a.txt\0/../../secret.txt", 27)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenCode(root_ + "/" + std::string(5000, 'a')),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenCode(""), absl::StatusCode::kInvalidArgument);
}

TEST_F(FileAccessTest, WritingIsRefused) {
  for (int flags : {O_WRONLY, O_RDWR, O_RDONLY | O_CREAT, O_RDONLY | O_TRUNC}) {
    EXPECT_EQ(access_->Open(root_ + "/m/new", flags).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_FALSE(fs::exists(root_ + "/m/new"));
}

TEST_F(FileAccessTest, ARootRenamedAwayIsStillServedThroughItsFd) {
  fs::rename(root_, base_ + "/moved");
  fs::create_directories(root_ + "/m");
  WriteFile(root_ + "/m/a.txt", "replacement");
  auto fd = access_->Open(root_ + "/m/a.txt", O_RDONLY);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(ReadAll(fd->get()), "inside");
}

TEST_F(FileAccessTest, ListsDirectoriesBeneathOnly) {
  auto names = access_->ListDirectory(root_ + "/m");
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, ::testing::UnorderedElementsAre("a.txt", "sub"));
  fs::create_directory_symlink(base_, root_ + "/m/dir_out");
  EXPECT_EQ(access_->ListDirectory(root_ + "/m/dir_out").status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(FileAccessTest, PathOfNamesWhatWasOpened) {
  fs::create_symlink("a.txt", root_ + "/m/rel_in");
  auto fd = access_->Open(root_ + "/m/rel_in", O_PATH);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(FileAccess::PathOf(fd->get()).value_or(""), root_ + "/m/a.txt");
}

TEST_F(FileAccessTest, RootsMustBeCanonicalDirectories) {
  EXPECT_FALSE(FileAccess::Beneath({"relative"}).ok());
  EXPECT_FALSE(FileAccess::Beneath({root_ + "/m/a.txt"}).ok());
  EXPECT_FALSE(FileAccess::Beneath({root_ + "/m/../m"}).ok());
  fs::create_directory_symlink(root_, base_ + "/link");
  EXPECT_FALSE(FileAccess::Beneath({base_ + "/link"}).ok());
}

TEST(FileAccessAnywhereTest, OpensAnyPathReadOnly) {
  const std::string dir = fs::canonical(MakeTempDir()).string();
  WriteFile(dir + "/f", "x");
  const auto anywhere = FileAccess::Anywhere();
  EXPECT_FALSE(anywhere->restricted());
  EXPECT_TRUE(anywhere->Open(dir + "/f", O_RDONLY).ok());
  EXPECT_EQ(anywhere->Open(dir + "/f", O_WRONLY).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(anywhere->Open(dir + "/none", O_RDONLY).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tensormorph
