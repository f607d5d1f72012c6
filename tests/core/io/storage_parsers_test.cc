// The parsers of untrusted text in core/io: the AWS shared files' INI, the
// S3 XML, Content-Range; and where AWS and Hub settings come from.
#include <fstream>
#include <map>
#include <random>

#include "core/io/aws_config.h"
#include "core/io/hf_hub.h"
#include "core/io/http_object.h"
#include "core/io/ini_file.h"
#include "core/io/s3_store.h"
#include "core/io/xml_document.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::MessageOmits;
using ::testing::AllOf;

EnvLookup FakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](
             absl::string_view n) -> std::optional<std::string> {
    auto it = vars.find(std::string(n));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// --- INI ---

TEST(IniFileTest, SectionsKeysCommentsAndNestedBlocks) {
  absl::StatusOr<IniSections> s = ParseIni("f", R"(# comment
[default]
aws_access_key_id = AKID
Region: eu-west-1
s3 =
  max_concurrent_requests = 20
; another
[profile dev]
region=us-east-2
)");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)["default"]["aws_access_key_id"], "AKID");
  EXPECT_EQ((*s)["default"]["region"], "eu-west-1");
  EXPECT_EQ((*s)["default"].count("max_concurrent_requests"), 0u);
  EXPECT_EQ((*s)["profile dev"]["region"], "us-east-2");
}

TEST(IniFileTest, RefusesKeyOutsideSectionNamingLineNotContent) {
  absl::StatusOr<IniSections> s =
      ParseIni("creds", "aws_secret_access_key = s3cr3t\n");
  EXPECT_THAT(s, HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(s, AllOf(MessageNames("'creds' line 1"), MessageOmits("s3cr3t")));
}

TEST(IniFileTest, RefusesUnclosedHeader) {
  EXPECT_THAT(ParseIni("f", "[default\n"),
              HasReason(ErrorReason::kRequestInvalid));
}

TEST(IniFileTest, RefusesTextAfterHeaderAndEmptyName) {
  EXPECT_THAT(ParseIni("f", "[a] b\n"),
              HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(ParseIni("f", "[ ]\n"), HasReason(ErrorReason::kRequestInvalid));
}

TEST(IniFileTest, RefusesLineThatIsNothing) {
  EXPECT_THAT(
      ParseIni("f", "[a]\njunk\n"),
      AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames("line 2")));
}

TEST(IniFileTest, RefusesEmptyKeyNulAndSize) {
  EXPECT_THAT(ParseIni("f", "[a]\n = v\n"),
              HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(ParseIni("f", std::string("[a]\nk=\0v\n", 9)),
              HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(ParseIni("f", std::string(kMaxIniBytes + 1, '#')),
              HasReason(ErrorReason::kRequestInvalid));
}

TEST(IniFileTest, RefusesTooManySections) {
  std::string text;
  for (size_t i = 0; i <= kMaxIniSections; ++i)
    text += "[s" + std::to_string(i) + "]\n";
  EXPECT_THAT(ParseIni("f", text), HasReason(ErrorReason::kRequestInvalid));
}

// --- XML ---

TEST(XmlDocumentTest, ParsesElementsTextEntitiesAndCdata) {
  absl::StatusOr<XmlElement> x = ParseXml(
      "<?xml version=\"1.0\"?>\n<!-- c --><a x='1'><b>&quot;e&amp;&#65;&#x42;"
      "</b><c/><d><![CDATA[<raw>]]></d></a>\n");
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_EQ(x->name, "a");
  ASSERT_NE(x->Child("b"), nullptr);
  EXPECT_EQ(x->Child("b")->text, "\"e&AB");
  EXPECT_NE(x->Child("c"), nullptr);
  EXPECT_EQ(x->Child("d")->text, "<raw>");
}

TEST(XmlDocumentTest, RefusesDoctype) {
  EXPECT_THAT(ParseXml("<!DOCTYPE a [<!ENTITY x \"y\">]><a>&x;</a>"),
              HasReason(ErrorReason::kDataLoss));
}

TEST(XmlDocumentTest, RefusesUnknownEntityAndBadReferences) {
  EXPECT_THAT(ParseXml("<a>&x;</a>"), HasReason(ErrorReason::kDataLoss));
  EXPECT_THAT(ParseXml("<a>&#0;</a>"), HasReason(ErrorReason::kDataLoss));
  EXPECT_THAT(ParseXml("<a>&#xD800;</a>"), HasReason(ErrorReason::kDataLoss));
  EXPECT_THAT(ParseXml("<a>&#x110000;</a>"), HasReason(ErrorReason::kDataLoss));
  EXPECT_THAT(ParseXml("<a>&amp</a>"), HasReason(ErrorReason::kDataLoss));
}

TEST(XmlDocumentTest, RefusesMismatchedAndUnclosed) {
  EXPECT_THAT(ParseXml("<a><b></a>"), HasReason(ErrorReason::kDataLoss));
  EXPECT_THAT(ParseXml("<a>"), HasReason(ErrorReason::kDataLoss));
}

TEST(XmlDocumentTest, RefusesDepthBeyondLimit) {
  std::string deep;
  for (int i = 0; i <= kMaxXmlDepth; ++i) deep += "<a>";
  EXPECT_THAT(ParseXml(deep), HasReason(ErrorReason::kDataLoss));
}

TEST(XmlDocumentTest, RefusesTrailingContentAndNoRoot) {
  EXPECT_THAT(ParseXml("<a/><b/>"), HasReason(ErrorReason::kDataLoss));
  EXPECT_THAT(ParseXml("  "), HasReason(ErrorReason::kDataLoss));
}

TEST(XmlDocumentTest, RefusesMalformedAttributes) {
  EXPECT_THAT(ParseXml("<a x=1/>"), HasReason(ErrorReason::kDataLoss));
  EXPECT_THAT(ParseXml("<a x/>"), HasReason(ErrorReason::kDataLoss));
  EXPECT_THAT(ParseXml("<a x='<'/>"), HasReason(ErrorReason::kDataLoss));
}

// --- ListObjectsV2 ---

constexpr char kPage[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
    "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
    "<IsTruncated>true</IsTruncated><NextContinuationToken>t+1/=</"
    "NextContinuationToken>"
    "<Contents><Key>m/a.safetensors</Key><Size>12</Size><ETag>&quot;e1&quot;</"
    "ETag></Contents>"
    "<Contents><Key>m/b.safetensors</Key><Size>18446744073709551615</Size></"
    "Contents>"
    "</ListBucketResult>";

TEST(ListObjectsV2Test, ParsesContentsAndContinuation) {
  absl::StatusOr<S3ListPage> p = ParseListObjectsV2("s3://b/m/", kPage);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->objects.size(), 2u);
  EXPECT_EQ(p->objects[0].key, "m/a.safetensors");
  EXPECT_EQ(p->objects[0].size, 12u);
  EXPECT_EQ(p->objects[0].etag, "\"e1\"");
  EXPECT_EQ(p->objects[1].size, UINT64_MAX);
  EXPECT_TRUE(p->truncated);
  EXPECT_EQ(p->next_token, "t+1/=");
}

TEST(ListObjectsV2Test, RefusesWrongRoot) {
  EXPECT_THAT(ParseListObjectsV2("s3://b/", "<Error><Code>X</Code></Error>"),
              HasReason(ErrorReason::kDataLoss));
}

TEST(ListObjectsV2Test, RefusesContentsWithoutKeyOrWithBadSize) {
  EXPECT_THAT(ParseListObjectsV2("s3://b/",
                                 "<ListBucketResult><Contents><Size>1</Size></"
                                 "Contents></ListBucketResult>"),
              HasReason(ErrorReason::kDataLoss));
  for (const char* size :
       {"-1", "1e3", "", "18446744073709551616", "123456789012345678901"}) {
    EXPECT_THAT(
        ParseListObjectsV2(
            "s3://b/",
            std::string("<ListBucketResult><Contents><Key>k</Key><Size>") +
                size + "</Size></Contents></ListBucketResult>"),
        HasReason(ErrorReason::kDataLoss))
        << size;
  }
}

TEST(ListObjectsV2Test, RefusesTruncatedWithoutToken) {
  EXPECT_THAT(
      ParseListObjectsV2("s3://b/",
                         "<ListBucketResult><IsTruncated>true</IsTruncated></"
                         "ListBucketResult>"),
      HasReason(ErrorReason::kDataLoss));
  EXPECT_THAT(ParseListObjectsV2("s3://b/",
                                 "<ListBucketResult><IsTruncated>yes</"
                                 "IsTruncated></ListBucketResult>"),
              HasReason(ErrorReason::kDataLoss));
}

// --- Content-Range ---

TEST(ContentRangeTest, ParsesRangesAndUnsatisfied) {
  uint64_t f, l, t;
  ASSERT_TRUE(ParseContentRange("bytes 10-19/100", &f, &l, &t));
  EXPECT_EQ(f, 10u);
  EXPECT_EQ(l, 19u);
  EXPECT_EQ(t, 100u);
  ASSERT_TRUE(ParseContentRange("bytes */0", &f, &l, &t));
  EXPECT_EQ(t, 0u);
  for (const char* bad :
       {"bytes 19-10/100", "bytes 0-100/100", "bytes 1-2", "items 1-2/3",
        "bytes -1-2/3", "bytes */*", "bytes 1-2/99999999999999999999999"}) {
    EXPECT_FALSE(ParseContentRange(bad, &f, &l, &t)) << bad;
  }
}

// --- AWS settings ---

TEST(AwsConfigTest, EnvironmentWinsOverFiles) {
  const std::string home = testing::MakeTempDir();
  absl::StatusOr<AwsSettings> s = LoadAwsSettings(
      FakeEnv({{"HOME", home},
               {"AWS_ACCESS_KEY_ID", "AK"},
               {"AWS_SECRET_ACCESS_KEY", "SK"},
               {"AWS_SESSION_TOKEN", "TOK"},
               {"AWS_REGION", "eu-central-1"},
               {"AWS_ENDPOINT_URL", "http://127.0.0.1:9000/"}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->access_key, "AK");
  EXPECT_EQ(s->secret_key, "SK");
  EXPECT_EQ(s->session_token, "TOK");
  EXPECT_EQ(s->region, "eu-central-1");
  EXPECT_EQ(s->endpoint, "http://127.0.0.1:9000");
}

TEST(AwsConfigTest, ProfileFromSharedFiles) {
  const std::string home = testing::MakeTempDir();
  WriteFile(home + "/credentials",
            "[default]\naws_access_key_id=D\naws_secret_access_key=DS\n"
            "[dev]\naws_access_key_id = DEV\naws_secret_access_key = DEVS\n"
            "aws_session_token = DEVT\n");
  WriteFile(home + "/config",
            "[profile dev]\nregion = ap-south-1\n"
            "endpoint_url = https://minio.local\n");
  absl::StatusOr<AwsSettings> s = LoadAwsSettings(
      FakeEnv({{"HOME", home},
               {"AWS_PROFILE", "dev"},
               {"AWS_SHARED_CREDENTIALS_FILE", home + "/credentials"},
               {"AWS_CONFIG_FILE", home + "/config"}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->access_key, "DEV");
  EXPECT_EQ(s->secret_key, "DEVS");
  EXPECT_EQ(s->session_token, "DEVT");
  EXPECT_EQ(s->region, "ap-south-1");
  EXPECT_EQ(s->endpoint, "https://minio.local");
}

TEST(AwsConfigTest, NoFilesNoCredentialsIsAnonymousInUsEast1) {
  absl::StatusOr<AwsSettings> s =
      LoadAwsSettings(FakeEnv({{"HOME", testing::MakeTempDir()}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->access_key, "");
  EXPECT_EQ(s->region, "us-east-1");
}

TEST(AwsConfigTest, RefusesUnknownNamedProfile) {
  EXPECT_THAT(
      LoadAwsSettings(
          FakeEnv({{"HOME", testing::MakeTempDir()}, {"AWS_PROFILE", "nope"}})),
      AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames("'nope'")));
}

TEST(AwsConfigTest, RefusesKeyWithoutSecretNamingNoValue) {
  absl::StatusOr<AwsSettings> s =
      LoadAwsSettings(FakeEnv({{"HOME", testing::MakeTempDir()},
                               {"AWS_ACCESS_KEY_ID", "AKIASECRETISH"}}));
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kRequestInvalid),
                       MessageOmits("AKIASECRETISH")));
}

TEST(AwsConfigTest, RefusesMalformedFileWithoutEchoingIt) {
  const std::string home = testing::MakeTempDir();
  WriteFile(home + "/credentials", "aws_secret_access_key = leaked\n");
  absl::StatusOr<AwsSettings> s = LoadAwsSettings(
      FakeEnv({{"HOME", home},
               {"AWS_SHARED_CREDENTIALS_FILE", home + "/credentials"}}));
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kRequestInvalid),
                       MessageNames("line 1"), MessageOmits("leaked")));
}

TEST(AwsConfigTest, RefusesBadRegionAndEndpoint) {
  const std::string home = testing::MakeTempDir();
  EXPECT_THAT(
      LoadAwsSettings(FakeEnv({{"HOME", home}, {"AWS_REGION", "US_EAST"}})),
      AllOf(HasReason(ErrorReason::kRequestInvalid),
            MessageNames("'US_EAST'")));
  EXPECT_THAT(LoadAwsSettings(
                  FakeEnv({{"HOME", home}, {"AWS_ENDPOINT_URL", "ftp://x"}})),
              HasReason(ErrorReason::kRequestInvalid));
}

// --- Hub settings ---

TEST(HubSettingsTest, TokenFromEnvironmentThenFile) {
  const std::string home = testing::MakeTempDir();
  WriteFile(home + "/token", "hf_file_token\n");
  absl::StatusOr<HubSettings> a =
      LoadHubSettings(FakeEnv({{"HF_TOKEN", "hf_env"},
                               {"HF_HOME", home},
                               {"HF_ENDPOINT", "http://h:1/"}}));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->token, "hf_env");
  EXPECT_EQ(a->endpoint, "http://h:1");
  absl::StatusOr<HubSettings> b = LoadHubSettings(FakeEnv({{"HF_HOME", home}}));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->token, "hf_file_token");
  EXPECT_EQ(b->endpoint, kDefaultHubEndpoint);
}

TEST(HubSettingsTest, RefusesBadEndpoint) {
  EXPECT_THAT(LoadHubSettings(FakeEnv({{"HF_ENDPOINT", "https://u:p@h"},
                                       {"HF_HOME", testing::MakeTempDir()}})),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("HF_ENDPOINT"), MessageOmits("u:p")));
}

TEST(HubSettingsTest, ResolveUrlAndTokenOrigin) {
  HubSettings hub{"http://127.0.0.1:8", "tok"};
  absl::StatusOr<ObjectUrl> u = ParseObjectUrl("hf://o/r@v1/dir/a b.gguf");
  ASSERT_TRUE(u.ok());
  HttpSource s = HubSource(hub, *u);
  EXPECT_EQ(s.url, "http://127.0.0.1:8/o/r/resolve/v1/dir/a%20b.gguf");
  EXPECT_EQ(s.bearer_origin, "http://127.0.0.1:8");
  EXPECT_EQ(s.display, "hf://o/r@v1/dir/a b.gguf");
}

// --- Hostile input: every parser, on seeded garbage and mutations of valid
// documents, returns a status (the sanitizer build checks the rest). ---

std::string Mutate(std::string s, std::mt19937& rng) {
  const int edits = 1 + static_cast<int>(rng() % 8);
  for (int e = 0; e < edits && !s.empty(); ++e) {
    const size_t at = rng() % s.size();
    switch (rng() % 3) {
      case 0:
        s[at] = static_cast<char>(rng());
        break;
      case 1:
        s.erase(at, 1 + rng() % 16);
        break;
      default:
        s.insert(at, s.substr(rng() % s.size(), 1 + rng() % 32));
        break;
    }
  }
  return s;
}

TEST(HostileStorageInputTest, ParsersReturnAStatusOnMutatedDocuments) {
  std::mt19937 rng(32);
  const std::string ini =
      "[default]\naws_access_key_id = A\ns3 =\n  x = 1\n[profile "
      "p]\nregion=r\n";
  int parsed = 0;
  for (int i = 0; i < 3000; ++i) {
    parsed += ParseXml(Mutate(kPage, rng)).ok();
    parsed += ParseListObjectsV2("s3://b/", Mutate(kPage, rng)).ok();
    parsed += ParseIni("f", Mutate(ini, rng)).ok();
    parsed += ParseObjectUrl(Mutate("hf://org/repo@rev/a/b.gguf", rng)).ok();
    parsed += ParseObjectUrl(Mutate("s3://bucket/k/x.bin", rng)).ok();
    uint64_t f, l, t;
    parsed += ParseContentRange(Mutate("bytes 10-19/100", rng), &f, &l, &t);
  }
  EXPECT_GT(parsed, 0);  // some mutations stay valid: the loop ran
}

}  // namespace
}  // namespace tensormorph
