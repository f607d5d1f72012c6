// S3 objects and listings against npm's s3rver, behind the tests' proxy
// checking every request's SigV4 signature, session token and If-Match
// (s3rver 3.7.1 checks neither V4 signatures nor If-Match itself).
#include "core/io/s3_store.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "core/io/object_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/io/storage_test_data.h"
#include "tests/support/status_matchers.h"
#include "tests/support/storage_servers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::MessageOmits;
using ::testing::AllOf;

constexpr char kBucket[] = "models";
constexpr char kKey[] = "S3RVER";  // s3rver's own access key id
constexpr char kSecret[] = "S3RVER";
constexpr char kToken[] = "session-token-1";

class S3StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string js = testing::S3rverPath();
    if (js.empty()) {
      GTEST_SKIP()
          << "s3rver is not fetched (tests/io/fetch_s3rver.sh BUILD_DIR)";
    }
    s3_ = std::make_unique<testing::S3rverServer>(js, kBucket);
    proxy_ = std::make_unique<testing::FaultProxy>(
        s3_->port(),
        std::vector<std::string>{"--sigv4-key", kKey, "--sigv4-secret", kSecret,
                                 "--sigv4-token", kToken, "--if-match"});
    shard_ = testing::SeededBytes(300000, 3);
    s3_->Put("ckpt/model-00001-of-00002.safetensors", shard_);
  }

  AwsSettings Settings(const std::string& secret = kSecret) {
    AwsSettings a;
    a.access_key = kKey;
    a.secret_key = secret;
    a.session_token = kToken;
    a.endpoint = proxy_->Url("");
    return a;
  }

  absl::StatusOr<std::shared_ptr<const ObjectStore>> Store(
      const std::string& secret) {
    StorageOptions o;
    o.http = testing::TestHttpOptions();
    std::string home = testing::MakeTempDir();
    std::string endpoint = proxy_->Url("");
    o.env = [=](absl::string_view n) -> std::optional<std::string> {
      if (n == "HOME") return home;
      if (n == "AWS_ACCESS_KEY_ID") return std::string(kKey);
      if (n == "AWS_SECRET_ACCESS_KEY") return secret;
      if (n == "AWS_SESSION_TOKEN") return std::string(kToken);
      if (n == "AWS_ENDPOINT_URL") return endpoint;
      return std::nullopt;
    };
    return ObjectStore::Create(std::move(o));
  }

  std::unique_ptr<testing::S3rverServer> s3_;
  std::unique_ptr<testing::FaultProxy> proxy_;
  std::string shard_;
};

TEST_F(S3StoreTest, ReadsSignedRanges) {
  auto store = Store(kSecret);
  ASSERT_TRUE(store.ok()) << store.status();
  auto r = (*store)->Open("s3://models/ckpt/model-00001-of-00002.safetensors");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->size(), shard_.size());
  EXPECT_EQ((*r)->display(),
            "s3://models/ckpt/model-00001-of-00002.safetensors");
  std::string out(50000, '\0');
  ASSERT_TRUE((*r)->ReadAt(200000, out.size(), out.data()).ok());
  EXPECT_EQ(out, shard_.substr(200000, out.size()));
  EXPECT_EQ((*r)->stats().requests, 2u);
}

TEST_F(S3StoreTest, KeysNeedingEncodingAreSignedAsSent) {
  const std::string key = "ckpt/odd name+(1).bin";
  s3_->Put("ckpt/odd%20name%2B%281%29.bin", shard_.substr(0, 1000));
  S3Client client(std::make_shared<HttpClient>(testing::TestHttpOptions()),
                  Settings());
  auto r = client.Open(kBucket, key);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->size(), 1000u);
}

TEST_F(S3StoreTest, AWrongSecretIsPermissionDeniedWithoutSecretOrSignature) {
  auto store = Store("WRONG-SECRET-VALUE");
  ASSERT_TRUE(store.ok()) << store.status();
  auto r = (*store)->Open("s3://models/ckpt/model-00001-of-00002.safetensors");
  EXPECT_THAT(
      r,
      AllOf(HasReason(ErrorReason::kPermissionDenied),
            MessageNames("s3://models/ckpt/model-00001-of-00002.safetensors"),
            MessageNames("SignatureDoesNotMatch")));
  EXPECT_THAT(r, AllOf(MessageOmits("WRONG-SECRET"), MessageOmits("Signature="),
                       MessageOmits(kToken)));
}

TEST_F(S3StoreTest, AnUnknownKeyIdIsPermissionDenied) {
  AwsSettings a = Settings();
  a.access_key = "AKIDUNKNOWN";
  S3Client client(std::make_shared<HttpClient>(testing::TestHttpOptions()), a);
  EXPECT_THAT(client.Open(kBucket, "ckpt/model-00001-of-00002.safetensors"),
              AllOf(HasReason(ErrorReason::kPermissionDenied),
                    MessageNames("InvalidAccessKeyId")));
}

TEST_F(S3StoreTest, AMissingSessionTokenIsPermissionDenied) {
  AwsSettings a = Settings();
  a.session_token = "";
  S3Client client(std::make_shared<HttpClient>(testing::TestHttpOptions()), a);
  EXPECT_THAT(client.Open(kBucket, "ckpt/model-00001-of-00002.safetensors"),
              AllOf(HasReason(ErrorReason::kPermissionDenied),
                    MessageNames("InvalidToken")));
}

TEST_F(S3StoreTest, AMissingKeyIsNotFound) {
  S3Client client(std::make_shared<HttpClient>(testing::TestHttpOptions()),
                  Settings());
  EXPECT_THAT(client.Open(kBucket, "ckpt/nope.bin"),
              AllOf(HasReason(ErrorReason::kNotFound),
                    MessageNames("s3://models/ckpt/nope.bin")));
}

TEST_F(S3StoreTest, AnObjectReplacedAfterOpenIsAborted) {
  S3Client client(std::make_shared<HttpClient>(testing::TestHttpOptions()),
                  Settings());
  auto r = client.Open(kBucket, "ckpt/model-00001-of-00002.safetensors");
  ASSERT_TRUE(r.ok()) << r.status();
  s3_->Put("ckpt/model-00001-of-00002.safetensors",
           testing::SeededBytes(300000, 4));
  std::string out(10, '\0');
  EXPECT_THAT(
      (*r)->ReadAt(100000, 10, out.data()),
      AllOf(HasReason(ErrorReason::kFileChangedDuringRead),
            HasMetadata("file",
                        "s3://models/ckpt/model-00001-of-00002.safetensors")));
}

TEST_F(S3StoreTest, ListingFollowsContinuationTokens) {
  for (int i = 2; i <= 7; ++i) {
    s3_->Put(absl::StrCat("ckpt/part-", i, ".bin"), std::string(i, 'x'));
  }
  s3_->Put("other/x.bin", "x");
  S3Client client(std::make_shared<HttpClient>(testing::TestHttpOptions()),
                  Settings());
  auto listed = client.List(kBucket, "ckpt/", 3);
  ASSERT_TRUE(listed.ok()) << listed.status();
  std::vector<std::string> keys;
  for (const S3ObjectInfo& o : *listed) keys.push_back(o.key);
  EXPECT_THAT(keys,
              ::testing::ElementsAre("ckpt/model-00001-of-00002.safetensors",
                                     "ckpt/part-2.bin", "ckpt/part-3.bin",
                                     "ckpt/part-4.bin", "ckpt/part-5.bin",
                                     "ckpt/part-6.bin", "ckpt/part-7.bin"));
  EXPECT_EQ((*listed)[2].size, 3u);
  EXPECT_EQ(client.list_counters().requests.load(), 3u);  // pages of 3, 3, 1
}

TEST_F(S3StoreTest, TheStoreListsAPrefixAsOpenableUrls) {
  auto store = Store(kSecret);
  ASSERT_TRUE(store.ok()) << store.status();
  auto listed = (*store)->List("s3://models/ckpt/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].url,
            "s3://models/ckpt/model-00001-of-00002.safetensors");
  EXPECT_TRUE((*store)->Open((*listed)[0].url).ok());
}

}  // namespace
}  // namespace tensormorph
