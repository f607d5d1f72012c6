// Only paths inside the roots are served, however they are spelled.
#include "server/path_sandbox.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;

namespace fs = std::filesystem;

class PathSandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::canonical(MakeTempDir()).string();
    root_ = base_ + "/root";
    fs::create_directories(root_ + "/models/sub");
    WriteFile(root_ + "/models/a.gguf", "x");
    WriteFile(base_ + "/outside.gguf", "x");
    fs::create_symlink(base_ + "/outside.gguf",
                       root_ + "/models/link_out.gguf");
    fs::create_symlink(root_ + "/models/a.gguf",
                       root_ + "/models/link_in.gguf");
    ::mkfifo((root_ + "/models/fifo").c_str(), 0600);
    auto s = PathSandbox::Create({root_});
    ASSERT_TRUE(s.ok()) << s.status();
    sandbox_.emplace(*s);
  }
  std::string base_, root_;
  std::optional<PathSandbox> sandbox_;
};

TEST_F(PathSandboxTest, RelativePathsResolveAgainstTheRoot) {
  auto p = sandbox_->Resolve("models/a.gguf");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, root_ + "/models/a.gguf");
}

TEST_F(PathSandboxTest, AbsolutePathsInsideARootAreServed) {
  EXPECT_TRUE(sandbox_->Resolve(root_ + "/models/sub/../a.gguf").ok());
}

TEST_F(PathSandboxTest, DotDotOutOfTheRootIsPermissionDenied) {
  for (const std::string p : {"../outside.gguf", "models/../../outside.gguf",
                              "models/sub/../../../outside.gguf"}) {
    EXPECT_THAT(sandbox_->Resolve(p), HasReason(ErrorReason::kOutsideRoots))
        << p;
  }
}

TEST_F(PathSandboxTest, AbsolutePathsElsewhereArePermissionDenied) {
  EXPECT_THAT(sandbox_->Resolve(base_ + "/outside.gguf"),
              AllOf(HasReason(ErrorReason::kOutsideRoots),
                    HasMetadata("path", base_ + "/outside.gguf")));
}

TEST_F(PathSandboxTest, SymlinksOutOfTheRootArePermissionDeniedInsideAreFine) {
  EXPECT_THAT(sandbox_->Resolve("models/link_out.gguf"),
              AllOf(HasReason(ErrorReason::kOutsideRoots),
                    MessageNames("link_out.gguf")));
  auto in = sandbox_->Resolve("models/link_in.gguf");
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(*in, root_ + "/models/a.gguf");
}

TEST_F(PathSandboxTest, ResolveAndStatStatsTheFileItResolvedTo) {
  struct stat want;
  ASSERT_EQ(::stat((root_ + "/models/a.gguf").c_str(), &want), 0);
  // Without a symlink on the way (one walk of the path) and through one
  // (realpath's way): the same file, the same stat.
  for (const std::string p : {"models/a.gguf", "models/link_in.gguf"}) {
    auto r = sandbox_->ResolveAndStat(p);
    ASSERT_TRUE(r.ok()) << p << ": " << r.status();
    EXPECT_EQ(r->path, root_ + "/models/a.gguf") << p;
    EXPECT_EQ(r->st.st_ino, want.st_ino) << p;
    EXPECT_EQ(r->st.st_dev, want.st_dev) << p;
    EXPECT_EQ(r->st.st_size, want.st_size) << p;
  }
}

TEST_F(PathSandboxTest, EveryCallResolvesAfresh) {
  // A file served once, then replaced by a symlink out of the root: the
  // next call is refused, not served from anything remembered.
  ASSERT_TRUE(sandbox_->Resolve("models/sub/../a.gguf").ok());
  fs::remove(root_ + "/models/a.gguf");
  fs::create_symlink(base_ + "/outside.gguf", root_ + "/models/a.gguf");
  EXPECT_THAT(sandbox_->Resolve("models/a.gguf"),
              HasReason(ErrorReason::kOutsideRoots));
  // A directory on the way replaced by a symlink out: refused as well.
  fs::create_directories(base_ + "/elsewhere");
  WriteFile(base_ + "/elsewhere/b.gguf", "x");
  WriteFile(root_ + "/models/sub/b.gguf", "x");
  ASSERT_TRUE(sandbox_->Resolve("models/sub/b.gguf").ok());
  fs::remove_all(root_ + "/models/sub");
  fs::create_directory_symlink(base_ + "/elsewhere", root_ + "/models/sub");
  EXPECT_EQ(sandbox_->Resolve("models/sub/b.gguf").status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(PathSandboxTest, FifosAndDevicesAreRefused) {
  EXPECT_EQ(sandbox_->Resolve("models/fifo").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto dev = PathSandbox::Create({"/dev"});
  ASSERT_TRUE(dev.ok());
  EXPECT_EQ(dev->Resolve("null").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(PathSandboxTest, MissingPathsAreNotFoundAndEmptyIsInvalid) {
  EXPECT_EQ(sandbox_->Resolve("models/none.gguf").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(sandbox_->Resolve("").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(PathSandboxTest, RootsMustBeDirectories) {
  EXPECT_EQ(PathSandbox::Create({root_ + "/models/a.gguf"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PathSandbox::Create({}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(PathSandboxTest, RootPrefixOfASiblingDoesNotCount) {
  fs::create_directories(base_ + "/root2");
  WriteFile(base_ + "/root2/x.gguf", "x");
  EXPECT_EQ(sandbox_->Resolve(base_ + "/root2/x.gguf").status().code(),
            absl::StatusCode::kPermissionDenied);
}

// `--root /models` where /models (or a directory above it) is a symlink, as on
// GPU boxes (/models -> /nvme/models): the root answers to both spellings,
// and where a request resolves is still what decides.
class SymlinkedRootTest : public PathSandboxTest {
 protected:
  void SetUp() override {
    PathSandboxTest::SetUp();
    link_ = base_ + "/models_link";  // the root is a symlink
    fs::create_directory_symlink(root_, link_);
    above_ = base_ + "/above";  // a directory above the root is one
    fs::create_directory_symlink(base_, above_);
    auto s = PathSandbox::Create({link_});
    ASSERT_TRUE(s.ok()) << s.status();
    linked_.emplace(*s);
  }
  std::string link_, above_;
  std::optional<PathSandbox> linked_;
};

TEST_F(SymlinkedRootTest, AGivenSpellingStandsForTheRootOpenedAtStart) {
  // The root's symlink replaced by a real directory after the server
  // started: the given spelling still names the directory the server opened
  // (its fd), never the replacement.
  fs::remove(link_);
  fs::create_directories(link_ + "/models");
  WriteFile(link_ + "/models/only_in_replacement.gguf", "x");
  auto r = linked_->Resolve(link_ + "/models/a.gguf");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, root_ + "/models/a.gguf");
  EXPECT_EQ(linked_->Resolve(link_ + "/models/only_in_replacement.gguf")
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

TEST_F(PathSandboxTest, PathsWithNulBytesOrPastPathMaxAreInvalid) {
  for (const std::string& p :
       {std::string("models/..\0/../../outside.gguf", 29),
        std::string("models/a.gguf\0", 14), std::string(5000, 'a')}) {
    EXPECT_EQ(sandbox_->Resolve(p).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

// A path is spelled as listings spell it: bytes that are not UTF-8 (which
// no API string carries) as \xHH. The escaped spelling of a NUL is still a
// NUL, refused as the raw byte is; `..` spelled by escapes is still `..`.
TEST_F(PathSandboxTest, PathsAreTheirEscapedSpellings) {
  WriteFile(root_ + "/models/c\xFF\xFE.gguf", "x");
  auto p = sandbox_->Resolve("models/c\\xFF\\xFE.gguf");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, root_ + "/models/c\xFF\xFE.gguf");
  EXPECT_EQ(sandbox_->Resolve("models/a.gguf\\x00").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(sandbox_->Resolve("models/\\x2E\\x2E/../outside.gguf").status(),
              HasReason(ErrorReason::kOutsideRoots));
}

TEST_F(SymlinkedRootTest, AbsolutePathsUnderTheGivenSpellingAreServed) {
  auto p = linked_->Resolve(link_ + "/models/a.gguf");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, root_ + "/models/a.gguf");
  auto dotted = linked_->Resolve(link_ + "/models/sub/../a.gguf");
  ASSERT_TRUE(dotted.ok()) << dotted.status();
  EXPECT_EQ(*dotted, root_ + "/models/a.gguf");
}

TEST_F(SymlinkedRootTest, AbsolutePathsUnderTheResolvedSpellingAreServed) {
  auto p = linked_->Resolve(root_ + "/models/a.gguf");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, root_ + "/models/a.gguf");
}

TEST_F(SymlinkedRootTest, RelativePathsResolveAgainstTheRoot) {
  auto p = linked_->Resolve("models/a.gguf");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, root_ + "/models/a.gguf");
}

TEST_F(SymlinkedRootTest, AnAncestorThatIsASymlinkWorksTheSame) {
  auto s = PathSandbox::Create({above_ + "/root/"});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->roots(), std::vector<std::string>{above_ + "/root"});
  for (const std::string& p :
       {above_ + "/root/models/a.gguf", root_ + "/models/a.gguf",
        std::string("models/a.gguf")}) {
    auto r = s->Resolve(p);
    ASSERT_TRUE(r.ok()) << p << ": " << r.status();
    EXPECT_EQ(*r, root_ + "/models/a.gguf") << p;
  }
  EXPECT_EQ(s->Resolve(above_ + "/outside.gguf").status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(SymlinkedRootTest, DotDotOutOfEitherSpellingIsPermissionDenied) {
  for (const std::string& p :
       {link_ + "/../outside.gguf", link_ + "/models/../../outside.gguf",
        root_ + "/../outside.gguf", std::string("../outside.gguf"),
        std::string("models/../../outside.gguf")}) {
    EXPECT_THAT(linked_->Resolve(p), HasReason(ErrorReason::kOutsideRoots))
        << p;
  }
}

TEST_F(SymlinkedRootTest, SymlinksOutOfTheRootArePermissionDenied) {
  for (const std::string& p :
       {link_ + "/models/link_out.gguf", root_ + "/models/link_out.gguf",
        std::string("models/link_out.gguf")}) {
    EXPECT_THAT(linked_->Resolve(p),
                AllOf(HasReason(ErrorReason::kOutsideRoots),
                      MessageNames("link_out.gguf")))
        << p;
  }
}

TEST_F(SymlinkedRootTest, FifosAreRefusedUnderEitherSpelling) {
  for (const std::string& p : {link_ + "/models/fifo", root_ + "/models/fifo",
                               std::string("models/fifo")}) {
    EXPECT_EQ(linked_->Resolve(p).status().code(),
              absl::StatusCode::kInvalidArgument)
        << p;
  }
}

TEST_F(SymlinkedRootTest, ErrorsShowTheRootAsGivenAndAsResolved) {
  EXPECT_EQ(linked_->roots(), std::vector<std::string>{link_});
  EXPECT_THAT(linked_->Resolve(base_ + "/outside.gguf"),
              AllOf(HasReason(ErrorReason::kOutsideRoots),
                    MessageNames(absl::StrCat("(", link_, " (resolved: ", root_,
                                              "))"))));
  // A root spelled without symlinks is shown once.
  EXPECT_THAT(sandbox_->Resolve(base_ + "/outside.gguf"),
              MessageNames(absl::StrCat("(", root_, ")")));
}

TEST_F(SymlinkedRootTest, ARelativeRootIsGivenAgainstTheWorkingDirectory) {
  const fs::path cwd = fs::current_path();
  fs::current_path(base_);
  auto s = PathSandbox::Create({"models_link/./"});
  fs::current_path(cwd);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->roots(), std::vector<std::string>{link_});
  auto p = s->Resolve(link_ + "/models/a.gguf");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, root_ + "/models/a.gguf");
}

TEST_F(SymlinkedRootTest, ShardsAreCheckedAgainstTheResolvedSpelling) {
  EXPECT_TRUE(linked_->CheckInside(root_ + "/models/a.gguf").ok());
  // The given spelling is not a canonical path: CheckInside takes realpaths.
  EXPECT_EQ(linked_->CheckInside(link_ + "/models/a.gguf").code(),
            absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace tensormorph
