// ParseObjectUrl's forms and refusals, one test per rule, and RedactUrl.
#include "core/io/object_url.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::MessageOmits;

TEST(ObjectUrlTest, PlainPathIsLocal) {
  absl::StatusOr<ObjectUrl> u = ParseObjectUrl("models/llama/model.gguf");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->scheme, UrlScheme::kLocal);
  EXPECT_EQ(u->path, "models/llama/model.gguf");
}

TEST(ObjectUrlTest, FileUrlIsLocalAndAbsolute) {
  absl::StatusOr<ObjectUrl> u = ParseObjectUrl("file:///m/a.safetensors");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->scheme, UrlScheme::kLocal);
  EXPECT_EQ(u->path, "/m/a.safetensors");
  EXPECT_THAT(ParseObjectUrl("file://m/a"),
              HasReason(ErrorReason::kRequestInvalid));
}

TEST(ObjectUrlTest, HttpsKeepsTheUrlAndDisplaysItWithoutQuery) {
  absl::StatusOr<ObjectUrl> u = ParseObjectUrl(
      "https://b.s3.amazonaws.com/"
      "k.bin?X-Amz-Signature=abc&X-Amz-Credential=x");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->scheme, UrlScheme::kHttps);
  EXPECT_THAT(u->http_url, ::testing::HasSubstr("X-Amz-Signature=abc"));
  EXPECT_EQ(u->display, "https://b.s3.amazonaws.com/k.bin");
}

TEST(ObjectUrlTest, SchemeIsCaseInsensitive) {
  absl::StatusOr<ObjectUrl> u = ParseObjectUrl("HTTP://h/x");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->scheme, UrlScheme::kHttp);
}

TEST(ObjectUrlTest, RefusesHttpWithoutHost) {
  EXPECT_THAT(ParseObjectUrl("http:///x"),
              HasReason(ErrorReason::kRequestInvalid));
}

TEST(ObjectUrlTest, RefusesCredentialsInHttpUrlWithoutEchoingThem) {
  absl::StatusOr<ObjectUrl> u = ParseObjectUrl("https://me:hunter2@h/x");
  EXPECT_THAT(u, ::testing::AllOf(HasReason(ErrorReason::kRequestInvalid),
                                  MessageOmits("hunter2")));
}

TEST(ObjectUrlTest, RefusesWhitespace) {
  EXPECT_THAT(ParseObjectUrl("https://h/a b"),
              HasReason(ErrorReason::kRequestInvalid));
}

TEST(ObjectUrlTest, RefusesControlBytesAndEmpty) {
  EXPECT_THAT(ParseObjectUrl(""), HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(ParseObjectUrl(std::string("a\0b", 3)),
              HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(ParseObjectUrl("https://h/a\nb"),
              HasReason(ErrorReason::kRequestInvalid));
}

TEST(ObjectUrlTest, RefusesUnknownScheme) {
  EXPECT_THAT(ParseObjectUrl("ftp://h/x"),
              ::testing::AllOf(HasReason(ErrorReason::kRequestInvalid),
                               MessageNames("'ftp'")));
}

TEST(ObjectUrlTest, S3BucketAndKey) {
  absl::StatusOr<ObjectUrl> u = ParseObjectUrl("s3://my-models/llama/a b.bin");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->scheme, UrlScheme::kS3);
  EXPECT_EQ(u->bucket, "my-models");
  EXPECT_EQ(u->key, "llama/a b.bin");
}

TEST(ObjectUrlTest, S3BucketAlone) {
  absl::StatusOr<ObjectUrl> u = ParseObjectUrl("s3://my-models");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->key, "");
}

TEST(ObjectUrlTest, RefusesS3BucketNames) {
  for (const char* bad : {"s3://ab/x", "s3://Upper/x", "s3://-lead/x",
                          "s3://trail-/x", "s3://under_score/x", "s3:///x"}) {
    EXPECT_THAT(ParseObjectUrl(bad), HasReason(ErrorReason::kRequestInvalid))
        << bad;
  }
}

TEST(ObjectUrlTest, RefusesS3QueryString) {
  EXPECT_THAT(ParseObjectUrl("s3://bucket/k?versionId=1"),
              HasReason(ErrorReason::kRequestInvalid));
}

TEST(ObjectUrlTest, HfWithDefaultRevision) {
  absl::StatusOr<ObjectUrl> u = ParseObjectUrl(
      "hf://meta-llama/Llama-3.1-8B/model-00001-of-00004.safetensors");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->scheme, UrlScheme::kHf);
  EXPECT_EQ(u->repo, "meta-llama/Llama-3.1-8B");
  EXPECT_EQ(u->revision, "main");
  EXPECT_EQ(u->repo_path, "model-00001-of-00004.safetensors");
}

TEST(ObjectUrlTest, HfWithRevisionAndNestedPath) {
  absl::StatusOr<ObjectUrl> u =
      ParseObjectUrl("hf://org/repo@refs%2Fpr%2F3/a/b.gguf");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_EQ(u->revision, "refs%2Fpr%2F3");
  EXPECT_EQ(u->repo_path, "a/b.gguf");
}

TEST(ObjectUrlTest, RefusesHfWithoutRepo) {
  EXPECT_THAT(ParseObjectUrl("hf://org"),
              HasReason(ErrorReason::kRequestInvalid));
}

TEST(ObjectUrlTest, RefusesHfNames) {
  EXPECT_THAT(ParseObjectUrl("hf://../repo/x"),
              HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(ParseObjectUrl("hf://org/re po/x"),
              HasReason(ErrorReason::kRequestInvalid));
}

TEST(ObjectUrlTest, RefusesHfEmptyRevision) {
  EXPECT_THAT(ParseObjectUrl("hf://org/repo@/x"),
              HasReason(ErrorReason::kRequestInvalid));
}

TEST(ObjectUrlTest, RefusesHfPathSegments) {
  for (const char* bad : {"hf://o/r/a//b", "hf://o/r/../x", "hf://o/r/./x",
                          "hf://o/r/a\\b", "hf://o/r/a?b", "hf://o/r/a#b"}) {
    EXPECT_THAT(ParseObjectUrl(bad), HasReason(ErrorReason::kRequestInvalid))
        << bad;
  }
}

TEST(ObjectUrlTest, RedactDropsUserinfoQueryAndFragment) {
  EXPECT_EQ(RedactUrl("https://u:p@h:8/a/b?sig=1#f"), "https://h:8/a/b");
  EXPECT_EQ(RedactUrl("/plain/path"), "/plain/path");
}

TEST(ObjectUrlTest, PercentEncodeIsSigV4Canonical) {
  EXPECT_EQ(PercentEncode("a b/c~d+e", true), "a%20b/c~d%2Be");
  EXPECT_EQ(PercentEncode("a/b", false), "a%2Fb");
}

TEST(ObjectUrlTest, OriginIgnoresPathAndDefaultPortAndCase) {
  EXPECT_EQ(OriginOf("HTTPS://Hub.Example:443/x?y"), "https://hub.example");
  EXPECT_EQ(OriginOf("http://127.0.0.2:81/x"), "http://127.0.0.2:81");
  EXPECT_EQ(OriginOf("s3://b/k"), "");
}

}  // namespace
}  // namespace tensormorph
