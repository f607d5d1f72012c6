// HTTP(S) objects against Debian's nginx (ranges, ETags, If-Match, a
// Hub-like redirect to a second host) and the tests' fault proxy (503
// bursts, dropped connections, short bodies, ignored ranges, delays).
#include "core/io/http_object.h"

#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/io/object_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/io/storage_test_data.h"
#include "tests/support/status_matchers.h"
#include "tests/support/storage_servers.h"
#include "tests/support/test_ca.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::MessageOmits;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr size_t kBlobBytes = 3 << 20;

class HttpObjectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::NginxPath().empty()) GTEST_SKIP() << "nginx is not installed";
    data_ = testing::MakeTempDir();
    blob_ = testing::SeededBytes(kBlobBytes, 1);
    testing::WriteObject(data_ + "/blob.bin", blob_);
    testing::WriteObject(data_ + "/empty.bin", "");
    testing::WriteObject(data_ + "/org/repo/model.bin", blob_);
    nginx_ = std::make_unique<testing::NginxServer>(data_);
    http_ = std::make_shared<HttpClient>(testing::TestHttpOptions());
  }

  absl::StatusOr<std::shared_ptr<const HttpObjectReader>> OpenUrl(
      const std::string& url) {
    HttpSource s;
    s.url = url;
    return HttpObjectReader::Open(http_, s);
  }

  std::string Read(const ObjectReader& r, uint64_t off, uint64_t n) {
    std::string out(n, '\0');
    absl::Status s = r.ReadAt(off, n, out.data());
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  std::string data_;
  std::string blob_;
  std::unique_ptr<testing::NginxServer> nginx_;
  std::shared_ptr<HttpClient> http_;
};

TEST_F(HttpObjectTest, OpenTakesSizeAndEtagInOneRequest) {
  auto r = OpenUrl(nginx_->Url("/blob.bin"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->size(), kBlobBytes);
  EXPECT_FALSE((*r)->identity().etag.empty());
  EXPECT_FALSE((*r)->identity().last_modified.empty());
  EXPECT_EQ((*r)->stats().requests, 1u);
}

TEST_F(HttpObjectTest, ReadsWithinTheHeadCostNoRequest) {
  auto r = OpenUrl(nginx_->Url("/blob.bin"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Read(**r, 0, 8), blob_.substr(0, 8));
  EXPECT_EQ(Read(**r, 1000, 30000), blob_.substr(1000, 30000));
  EXPECT_EQ((*r)->stats().requests, 1u);
}

TEST_F(HttpObjectTest, EachReadBeyondTheHeadIsOneRangeRequest) {
  auto r = OpenUrl(nginx_->Url("/blob.bin"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Read(**r, 1 << 20, 4), blob_.substr(1 << 20, 4));
  EXPECT_EQ(Read(**r, kBlobBytes - 100, 100), blob_.substr(kBlobBytes - 100));
  EXPECT_EQ(Read(**r, 60000, 2 << 20), blob_.substr(60000, 2 << 20));
  EXPECT_EQ((*r)->stats().requests, 4u);
}

TEST_F(HttpObjectTest, ReadOutsideTheObjectIsOutOfRangeWithoutRequest) {
  auto r = OpenUrl(nginx_->Url("/blob.bin"));
  ASSERT_TRUE(r.ok()) << r.status();
  char c;
  EXPECT_THAT((*r)->ReadAt(kBlobBytes, 1, &c),
              AllOf(HasReason(ErrorReason::kOutOfRange),
                    MessageNames(std::to_string(kBlobBytes))));
  EXPECT_THAT((*r)->ReadAt(UINT64_MAX, 2, &c),
              HasReason(ErrorReason::kOutOfRange));
  EXPECT_EQ((*r)->stats().requests, 1u);
}

TEST_F(HttpObjectTest, EmptyObjectHasSizeZero) {
  auto r = OpenUrl(nginx_->Url("/empty.bin"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->size(), 0u);
}

TEST_F(HttpObjectTest, MissingIsNotFoundAndForbiddenIsPermissionDenied) {
  EXPECT_THAT(OpenUrl(nginx_->Url("/nope.bin")),
              AllOf(HasReason(ErrorReason::kNotFound),
                    MessageNames(nginx_->Url("/nope.bin"))));
  EXPECT_THAT(OpenUrl(nginx_->Url("/private/x.bin")),
              HasReason(ErrorReason::kPermissionDenied));
}

TEST_F(HttpObjectTest, QueryStringOfAPresignedUrlIsNeverInAMessage) {
  auto r = OpenUrl(nginx_->Url(
      "/nope.bin?X-Amz-Signature=SIGSECRET&X-Amz-Security-Token=TOKSECRET"));
  ASSERT_THAT(r, HasReason(ErrorReason::kNotFound));
  EXPECT_THAT(
      r, AllOf(MessageNames(nginx_->Url("/nope.bin")), MessageOmits("SECRET")));
  // ...and a presigned URL that resolves reads as plain HTTP.
  auto ok = OpenUrl(nginx_->Url("/blob.bin?X-Amz-Signature=SIGSECRET"));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->display(), nginx_->Url("/blob.bin"));
  EXPECT_EQ(Read(**ok, 2 << 20, 16), blob_.substr(2 << 20, 16));
}

TEST_F(HttpObjectTest, ObjectReplacedAfterOpenEndsTheReadAborted) {
  auto r = OpenUrl(nginx_->Url("/blob.bin"));
  ASSERT_TRUE(r.ok()) << r.status();
  testing::WriteObject(data_ + "/blob.bin", testing::SeededBytes(kBlobBytes, 2),
                       10);
  std::string out(100, '\0');
  EXPECT_THAT((*r)->ReadAt(1 << 20, 100, out.data()),
              AllOf(HasReason(ErrorReason::kFileChangedDuringRead),
                    HasMetadata("file", nginx_->Url("/blob.bin"))));
}

TEST_F(HttpObjectTest, ObjectReplacedByAnotherSizeEndsTheReadAborted) {
  auto r = OpenUrl(nginx_->Url("/blob.bin"));
  ASSERT_TRUE(r.ok()) << r.status();
  testing::WriteObject(data_ + "/blob.bin",
                       testing::SeededBytes(kBlobBytes / 2, 2), 10);
  std::string out(100, '\0');
  EXPECT_THAT((*r)->ReadAt(1 << 20, 100, out.data()),
              HasReason(ErrorReason::kFileChangedDuringRead));
}

TEST_F(HttpObjectTest, HubTokenReachesTheEndpointAndNeverTheRedirectTarget) {
  StorageOptions o;
  o.http = testing::TestHttpOptions();
  o.env = [&](absl::string_view n) -> std::optional<std::string> {
    if (n == "HF_ENDPOINT") return nginx_->Url("");
    if (n == "HF_TOKEN") return std::string("hf_TOPSECRET");
    return std::nullopt;
  };
  auto store = ObjectStore::Create(std::move(o));
  ASSERT_TRUE(store.ok()) << store.status();
  auto r = (*store)->Open("hf://org/repo/model.bin");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->display(), "hf://org/repo/model.bin");
  EXPECT_EQ((*r)->size(), kBlobBytes);
  EXPECT_EQ(Read(**r, 2 << 20, 64), blob_.substr(2 << 20, 64));
  const std::string log = nginx_->AccessLog();
  const std::string hub_line =
      absl::StrCat(nginx_->port(),
                   " /org/repo/resolve/main/model.bin \"Bearer hf_TOPSECRET\"");
  EXPECT_THAT(log, HasSubstr(hub_line));
  EXPECT_THAT(log, HasSubstr(absl::StrCat(nginx_->cdn_port(),
                                          " /org/repo/model.bin \"-\"")));
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StartsWith(line, absl::StrCat(nginx_->cdn_port(), " "))) {
      EXPECT_THAT(std::string(line), Not(HasSubstr("hf_TOPSECRET")));
    }
  }
  // A missing file names the hf:// URL, never the token.
  auto missing = (*store)->Open("hf://org/repo/nope.bin");
  EXPECT_THAT(missing, AllOf(HasReason(ErrorReason::kNotFound),
                             MessageNames("hf://org/repo/nope.bin"),
                             MessageOmits("TOPSECRET")));
}

TEST_F(HttpObjectTest,
       HubIdentityIsTheLinkedEtagAndReadsAreConditionalOnTheCdns) {
  StorageOptions o;
  o.http = testing::TestHttpOptions();
  o.env = [&](absl::string_view n) -> std::optional<std::string> {
    if (n == "HF_ENDPOINT") return nginx_->Url("");
    if (n == "HF_HOME") return data_ + "/no-hf-home";
    return std::nullopt;
  };
  auto store = ObjectStore::Create(std::move(o));
  ASSERT_TRUE(store.ok()) << store.status();
  auto r = (*store)->Open("hf://org/repo@v2/model.bin");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->identity().etag, "\"linked-etag-1\"");
  EXPECT_EQ(Read(**r, 1 << 20, 8), blob_.substr(1 << 20, 8));
  testing::WriteObject(data_ + "/org/repo/model.bin",
                       testing::SeededBytes(kBlobBytes, 9), 10);
  std::string out(8, '\0');
  EXPECT_THAT((*r)->ReadAt(1 << 20, 8, out.data()),
              AllOf(HasReason(ErrorReason::kFileChangedDuringRead),
                    HasMetadata("file", "hf://org/repo@v2/model.bin")));
}

TEST_F(HttpObjectTest, AnExpiredRedirectIsResolvedAgainWithTheToken) {
  StorageOptions o;
  o.http = testing::TestHttpOptions();
  o.env = [&](absl::string_view n) -> std::optional<std::string> {
    if (n == "HF_ENDPOINT") return nginx_->Url("");
    if (n == "HF_TOKEN") return std::string("hf_TOPSECRET");
    return std::nullopt;
  };
  auto store = ObjectStore::Create(std::move(o));
  ASSERT_TRUE(store.ok()) << store.status();
  auto r = (*store)->Open("hf://org/repo/model.bin");
  ASSERT_TRUE(r.ok()) << r.status();
  nginx_->ExpireRedirects();
  EXPECT_EQ(Read(**r, 2 << 20, 64), blob_.substr(2 << 20, 64));
  // The open (302, 206), the refused read (403), the resolve again (302,
  // 206) and the read from /b/.
  EXPECT_EQ((*r)->stats().requests, 2u + 1u + 2u + 1u);
  const std::string log = nginx_->AccessLog();
  EXPECT_THAT(log, HasSubstr(absl::StrCat(nginx_->cdn_port(),
                                          " /b/org/repo/model.bin \"-\"")));
  EXPECT_THAT(log,
              Not(HasSubstr(absl::StrCat(nginx_->cdn_port(),
                                         " /b/org/repo/model.bin \"Bearer"))));
}

TEST_F(HttpObjectTest, AnExpiredRedirectToOtherBytesIsAborted) {
  StorageOptions o;
  o.http = testing::TestHttpOptions();
  o.env = [&](absl::string_view n) -> std::optional<std::string> {
    if (n == "HF_ENDPOINT") return nginx_->Url("");
    if (n == "HF_HOME") return data_ + "/no-hf-home";
    return std::nullopt;
  };
  auto store = ObjectStore::Create(std::move(o));
  ASSERT_TRUE(store.ok()) << store.status();
  auto r = (*store)->Open("hf://org/repo/model.bin");
  ASSERT_TRUE(r.ok()) << r.status();
  testing::WriteObject(data_ + "/org/repo/model.bin",
                       testing::SeededBytes(kBlobBytes, 5), 10);
  nginx_->ExpireRedirects();
  std::string out(8, '\0');
  EXPECT_THAT((*r)->ReadAt(2 << 20, 8, out.data()),
              HasReason(ErrorReason::kFileChangedDuringRead));
}

TEST_F(HttpObjectTest, HttpsNeedsTheCaThatSslCertFileNames) {
  testing::NginxServer tls(data_, /*tls=*/true);
  const std::string url =
      absl::StrCat("https://127.0.0.1:", tls.tls_port(), "/blob.bin");
  EXPECT_THAT(OpenUrl(url), HasReason(ErrorReason::kUnavailable));
  StorageOptions o;
  o.http = HttpOptions::FromEnvironment(
      [](absl::string_view n) -> std::optional<std::string> {
        if (n == "SSL_CERT_FILE") return testing::TestCaFile("ca.pem");
        return std::nullopt;
      });
  auto store = ObjectStore::Create(std::move(o));
  ASSERT_TRUE(store.ok()) << store.status();
  auto r = (*store)->Open(url);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Read(**r, 2 << 20, 32), blob_.substr(2 << 20, 32));
}

TEST_F(HttpObjectTest, LocalPathsOpenAsMappedFilesWithoutCopy) {
  auto store = ObjectStore::Create(StorageOptions{});
  ASSERT_TRUE(store.ok()) << store.status();
  auto r = (*store)->Open(data_ + "/blob.bin");
  ASSERT_TRUE(r.ok()) << r.status();
  auto view = (*r)->Read(10, 20, nullptr);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(view->data()), 20),
            blob_.substr(10, 20));
  EXPECT_NE((*r)->identity().file.inode, 0u);
}

class FaultyHttpTest : public HttpObjectTest {
 protected:
  void SetUp() override {
    HttpObjectTest::SetUp();
    if (IsSkipped()) return;
    proxy_ = std::make_unique<testing::FaultProxy>(nginx_->port());
  }
  std::unique_ptr<testing::FaultProxy> proxy_;
};

TEST_F(FaultyHttpTest, A503BurstWithinTheRetryBudgetIsRetried) {
  auto r = OpenUrl(proxy_->Url("/blob.bin"));
  ASSERT_TRUE(r.ok()) << r.status();
  proxy_->Inject("status=503&count=3");
  EXPECT_EQ(Read(**r, 1 << 20, 1000), blob_.substr(1 << 20, 1000));
  EXPECT_EQ((*r)->stats().requests, 1u + 4u);
  EXPECT_EQ((*r)->stats().retries, 3u);
  EXPECT_EQ(proxy_->Requests(), 5);
}

TEST_F(FaultyHttpTest, A503BurstBeyondTheBudgetIsUnavailableNamingTheUrl) {
  auto r = OpenUrl(proxy_->Url("/blob.bin?sig=HIDDEN"));
  ASSERT_TRUE(r.ok()) << r.status();
  proxy_->Inject("status=503&count=4");
  std::string out(10, '\0');
  absl::Status s = (*r)->ReadAt(1 << 20, 10, out.data());
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kUnavailable),
                       MessageNames(proxy_->Url("/blob.bin")),
                       MessageNames("4 attempts"), MessageOmits("HIDDEN")));
}

TEST_F(FaultyHttpTest, DroppedConnectionsAreRetriedThenUnavailable) {
  auto r = OpenUrl(proxy_->Url("/blob.bin"));
  ASSERT_TRUE(r.ok()) << r.status();
  proxy_->Inject("drop=2");
  EXPECT_EQ(Read(**r, 1 << 20, 100000), blob_.substr(1 << 20, 100000));
  proxy_->Inject("drop=4");
  std::string out(100000, '\0');
  EXPECT_THAT((*r)->ReadAt(1 << 20, out.size(), out.data()),
              AllOf(HasReason(ErrorReason::kUnavailable),
                    MessageNames(proxy_->Url("/blob.bin"))));
}

TEST_F(FaultyHttpTest, AShortBodyIsDataLossNamingExpectedAndActual) {
  auto r = OpenUrl(proxy_->Url("/blob.bin"));
  ASSERT_TRUE(r.ok()) << r.status();
  proxy_->Inject("short=1");
  std::string out(1000, '\0');
  EXPECT_THAT((*r)->ReadAt(1 << 20, 1000, out.data()),
              AllOf(HasReason(ErrorReason::kDataLoss), MessageNames("1000"),
                    MessageNames("999")));
}

TEST_F(FaultyHttpTest, AWholeObjectAnswerToARangeIsDataLoss) {
  auto r = OpenUrl(proxy_->Url("/blob.bin"));
  ASSERT_TRUE(r.ok()) << r.status();
  proxy_->Inject("ignore_range=1");
  std::string out(1000, '\0');
  EXPECT_THAT((*r)->ReadAt(1 << 20, 1000, out.data()),
              HasReason(ErrorReason::kDataLoss));
}

TEST_F(FaultyHttpTest, AServerWithoutRangesStillOpensFromItsLength) {
  proxy_->Inject("ignore_range=1");
  auto r = OpenUrl(proxy_->Url("/blob.bin"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->size(), kBlobBytes);
  EXPECT_EQ(Read(**r, 0, 100), blob_.substr(0, 100));
}

TEST_F(FaultyHttpTest, ADelayBeyondTheTimeoutIsRetried) {
  HttpOptions o = testing::TestHttpOptions();
  o.request_timeout = std::chrono::milliseconds(300);
  http_ = std::make_shared<HttpClient>(o);
  auto r = OpenUrl(proxy_->Url("/blob.bin"));
  ASSERT_TRUE(r.ok()) << r.status();
  proxy_->Inject("delay_ms=1500&count=1");
  EXPECT_EQ(Read(**r, 1 << 20, 10), blob_.substr(1 << 20, 10));
  EXPECT_EQ((*r)->stats().requests, 3u);
}

TEST_F(FaultyHttpTest, HttpProxyFromTheEnvironmentCarriesTheRequests) {
  HttpOptions o = HttpOptions::FromEnvironment(
      [&](absl::string_view n) -> std::optional<std::string> {
        if (n == "HTTP_PROXY") return proxy_->Url("");
        return std::nullopt;
      });
  o.max_attempts = 1;
  http_ = std::make_shared<HttpClient>(o);
  auto r = OpenUrl(nginx_->Url("/blob.bin"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Read(**r, 1 << 20, 10), blob_.substr(1 << 20, 10));
  EXPECT_EQ(proxy_->Requests(), 2);
}

TEST_F(FaultyHttpTest, NoProxyNamesHostsThatBypassIt) {
  http_ = std::make_shared<HttpClient>(HttpOptions::FromEnvironment(
      [&](absl::string_view n) -> std::optional<std::string> {
        if (n == "HTTP_PROXY") return proxy_->Url("");
        if (n == "NO_PROXY") return std::string("127.0.0.1");
        return std::nullopt;
      }));
  auto r = OpenUrl(nginx_->Url("/blob.bin"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(proxy_->Requests(), 0);
}

TEST_F(FaultyHttpTest, ParallelRangesOfALargeReadRetryTheirOwnDrops) {
  StorageOptions o;
  o.http = testing::TestHttpOptions();
  o.cache = BlockCacheOptions{};
  o.cache->block_bytes = 256 << 10;
  o.cache->direct_read_bytes = 1 << 20;
  o.cache->parallel_fetches = 4;
  auto store = ObjectStore::Create(std::move(o));
  ASSERT_TRUE(store.ok()) << store.status();
  auto r = (*store)->Open(proxy_->Url("/blob.bin"));
  ASSERT_TRUE(r.ok()) << r.status();
  proxy_->Inject("drop=2");
  EXPECT_EQ(Read(**r, 100, kBlobBytes - 200),
            blob_.substr(100, kBlobBytes - 200));
  EXPECT_EQ((*r)->stats().requests, 1u + 4u + 2u);
  EXPECT_EQ((*r)->stats().retries, 2u);
}

TEST_F(FaultyHttpTest, BackoffDoublesWithJitterAndHonoursRetryAfterUpToItsCap) {
  std::vector<int64_t> waits;  // ms
  std::mutex mu;
  HttpOptions o = testing::TestHttpOptions();
  o.initial_backoff = std::chrono::milliseconds(100);
  o.max_backoff = std::chrono::milliseconds(1500);
  o.sleep = [&](std::chrono::milliseconds w) {
    std::lock_guard<std::mutex> lock(mu);
    waits.push_back(w.count());
  };
  http_ = std::make_shared<HttpClient>(o);
  auto r = OpenUrl(proxy_->Url("/blob.bin"));
  ASSERT_TRUE(r.ok()) << r.status();
  proxy_->Inject("status=503&count=3");
  EXPECT_EQ(Read(**r, 1 << 20, 10), blob_.substr(1 << 20, 10));
  ASSERT_EQ(waits.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {  // 100, 200, 400 ms, less up to half
    const int64_t full = int64_t{100} << i;
    EXPECT_LE(waits[i], full);
    EXPECT_GE(waits[i], full / 2);
  }
  waits.clear();
  proxy_->Inject("status=429&count=1&retry_after=1");
  EXPECT_EQ(Read(**r, 1 << 20, 10), blob_.substr(1 << 20, 10));
  EXPECT_THAT(waits, ::testing::ElementsAre(1000));
  waits.clear();
  proxy_->Inject("status=503&count=1&retry_after=3600");
  EXPECT_EQ(Read(**r, 1 << 20, 10), blob_.substr(1 << 20, 10));
  EXPECT_THAT(waits, ::testing::ElementsAre(1500));
}

TEST_F(FaultyHttpTest, NothingListeningIsUnavailableAfterRetries) {
  const int port = testing::FreeLoopbackPort();
  auto r = OpenUrl(absl::StrCat("http://127.0.0.1:", port, "/x.bin"));
  EXPECT_THAT(r, HasReason(ErrorReason::kUnavailable));
}

}  // namespace
}  // namespace tensormorph
