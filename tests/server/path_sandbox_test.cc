// Only paths inside the roots are served, however they are spelled.
#include "server/path_sandbox.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::WriteFile;
using ::testing::HasSubstr;

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
    auto r = sandbox_->Resolve(p);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied) << p;
  }
}

TEST_F(PathSandboxTest, AbsolutePathsElsewhereArePermissionDenied) {
  auto r = sandbox_->Resolve(base_ + "/outside.gguf");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("outside the server's roots"));
}

TEST_F(PathSandboxTest, SymlinksOutOfTheRootArePermissionDeniedInsideAreFine) {
  auto out = sandbox_->Resolve("models/link_out.gguf");
  EXPECT_EQ(out.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(out.status().message()),
              HasSubstr("symlinks may not lead out"));
  auto in = sandbox_->Resolve("models/link_in.gguf");
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(*in, root_ + "/models/a.gguf");
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

}  // namespace
}  // namespace tensormorph
