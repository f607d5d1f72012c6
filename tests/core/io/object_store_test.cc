// ObjectStore's dispatch by URL form, without servers: local files and
// directories, and the refusals that need no network.
#include "core/io/object_store.h"

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/io/storage_test_data.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::MessageOmits;
using ::testing::AllOf;

std::shared_ptr<const ObjectStore> NewStore(std::string home) {
  StorageOptions o;
  o.http = testing::TestHttpOptions();
  o.env = [home](absl::string_view n) -> std::optional<std::string> {
    if (n == "HOME") return home;
    return std::nullopt;
  };
  auto s = ObjectStore::Create(std::move(o));
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

TEST(ObjectStoreTest, ListsALocalDirectorysFilesSorted) {
  const std::string dir = testing::MakeTempDir();
  testing::WriteObject(dir + "/b.safetensors", "bb");
  testing::WriteObject(dir + "/a.safetensors", "a");
  std::filesystem::create_directory(dir + "/sub");
  auto listed = NewStore(dir)->List(dir);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].url, dir + "/a.safetensors");
  EXPECT_EQ((*listed)[1].size, 2u);
}

TEST(ObjectStoreTest, AMissingLocalFileIsNotFound) {
  EXPECT_THAT(NewStore(testing::MakeTempDir())->Open("/no/such/file.bin"),
              AllOf(HasReason(ErrorReason::kNotFound),
                    MessageNames("/no/such/file.bin")));
}

TEST(ObjectStoreTest, LocalFilesOutsideTheRootsAreRefused) {
  const std::string root = testing::MakeTempDir();
  const std::string outside = testing::MakeTempDir();
  testing::WriteObject(outside + "/x.bin", "x");
  StorageOptions o;
  auto access =
      FileAccess::Beneath({std::filesystem::canonical(root).string()});
  ASSERT_TRUE(access.ok()) << access.status();
  o.access = *access;
  auto store = ObjectStore::Create(std::move(o));
  ASSERT_TRUE(store.ok());
  EXPECT_THAT((*store)->Open(outside + "/x.bin"),
              HasReason(ErrorReason::kOutsideRoots));
}

TEST(ObjectStoreTest, AnS3PrefixOrBucketIsNoObject) {
  auto store = NewStore(testing::MakeTempDir());
  EXPECT_THAT(store->Open("s3://bucket/dir/"),
              HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(store->Open("s3://bucket"),
              HasReason(ErrorReason::kRequestInvalid));
}

TEST(ObjectStoreTest, AHubRepositoryIsNoFile) {
  EXPECT_THAT(NewStore(testing::MakeTempDir())->Open("hf://org/repo@v1"),
              HasReason(ErrorReason::kRequestInvalid));
}

TEST(ObjectStoreTest, HttpAndHubHaveNoListing) {
  auto store = NewStore(testing::MakeTempDir());
  EXPECT_THAT(store->List("https://h/dir/"),
              HasReason(ErrorReason::kUnimplemented));
  EXPECT_THAT(store->List("hf://org/repo"),
              HasReason(ErrorReason::kUnimplemented));
}

TEST(ObjectStoreTest, AMalformedAwsConfigFailsS3OnlyAndNamesNoSecret) {
  const std::string home = testing::MakeTempDir();
  testing::WriteObject(home + "/.aws/credentials",
                       "aws_secret_access_key = leaked\n");
  auto store = NewStore(home);
  testing::WriteObject(home + "/x.bin", "x");
  EXPECT_TRUE(store->Open(home + "/x.bin").ok());
  auto s3 = store->Open("s3://bucket/key");
  EXPECT_THAT(
      s3, AllOf(HasReason(ErrorReason::kRequestInvalid),
                MessageNames("credentials' line 1"), MessageOmits("leaked")));
}

}  // namespace
}  // namespace tensormorph
