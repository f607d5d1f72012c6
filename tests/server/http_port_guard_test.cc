// tensormorphd's HTTP port as a browser-facing server must be, tried with
// the bytes an attacker sends: a page on another site reaching the
// localhost server through DNS rebinding (a foreign Host), framing it, a
// request smuggled behind ambiguous lengths; and a drain that tells probes
// and refuses new calls on both ports from its first moment while what is
// in flight finishes.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensormorph/v1/tensormorph.grpc.pb.h"
#include "tests/support/process.h"
#include "tests/support/raw_http.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::Bytes;
using ::tensormorph::testing::HeldResponse;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::RawGet;
using ::tensormorph::testing::RawHttpExchange;
using ::tensormorph::testing::RawResponse;
using ::tensormorph::testing::ServerProcess;
using ::tensormorph::testing::WriteFile;
using ::testing::HasSubstr;
using Json = nlohmann::json;

std::string SmallRoot() {
  static const std::string* dir = [] {
    auto* d = new std::string(MakeTempDir());
    WriteFile(
        *d + "/m.safetensors",
        BuildSafetensors(
            {{"w", "F32", {2, 2}, Bytes(std::vector<float>{1, 2, 3, 4})}}));
    return d;
  }();
  return *dir;
}

// The reason of grpc-gateway's error body (details[0], an ErrorInfo).
std::string ReasonOf(const RawResponse& r) {
  const Json j = Json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("details") || !j["details"].is_array() ||
      j["details"].empty() || !j["details"][0].is_object()) {
    return "";
  }
  return j["details"][0].value("reason", "");
}

std::string Header(const RawResponse& r, const std::string& name) {
  auto it = r.headers.find(name);
  return it == r.headers.end() ? "" : it->second;
}

class HttpPortGuardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess(
        {SmallRoot()}, {"--http-listen", "127.0.0.1:0", "--http-allow-host",
                        "inspector.example"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static int port() { return server_->http_port(); }
  // A POST of GetServerInfo; with `keep_alive`, the connection ends only
  // if the server ends it.
  static std::string Post(const std::string& host, const std::string& extra,
                          const std::string& body, bool keep_alive = false) {
    return "POST /v1/GetServerInfo HTTP/1.1\r\nHost: " + host +
           "\r\nContent-Type: application/json\r\n" +
           (keep_alive ? "" : "Connection: close\r\n") + extra + "\r\n" + body;
  }
  static ServerProcess* server_;
};
ServerProcess* HttpPortGuardTest::server_ = nullptr;

TEST_F(HttpPortGuardTest, AForeignHostIsRefusedOnEveryEndpoint) {
  const std::string npy = "/v1/tensor.npy?checkpoint=m.safetensors&tensor=w";
  for (const std::string& path :
       {std::string("/"), npy, std::string("/metrics")}) {
    for (const std::string& host :
         {std::string("rebound.example"),
          absl::StrCat("rebound.example:", port()), std::string("127.0.0.2"),
          std::string("localhost.rebound.example")}) {
      const RawResponse r = RawGet(port(), path, host);
      EXPECT_EQ(r.status, 421) << path << " Host: " << host;
      EXPECT_EQ(ReasonOf(r), "PERMISSION_DENIED") << r.body;
    }
  }
  const auto post = RawHttpExchange(
      port(), Post("rebound.example", "Content-Length: 2\r\n", "{}"));
  ASSERT_EQ(post.size(), 1u);
  EXPECT_EQ(post[0].status, 421);
  // No Host at all, or two of them.
  EXPECT_EQ(RawHttpExchange(port(),
                            "GET / HTTP/1.1\r\nConnection: close"
                            "\r\n\r\n")[0]
                .status,
            421);
  EXPECT_EQ(RawHttpExchange(port(),
                            "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: "
                            "rebound.example\r\nConnection: close\r\n\r\n")[0]
                .status,
            421);
}

TEST_F(HttpPortGuardTest, TheServersOwnNamesAreAnswered) {
  const std::string p = absl::StrCat(":", port());
  for (const std::string& host : std::vector<std::string>{
           "localhost", "localhost" + p, "LocalHost.", "127.0.0.1",
           "127.0.0.1" + p, "[::1]", "[::1]" + p, "inspector.example",
           "Inspector.Example:443"}) {
    EXPECT_EQ(RawGet(port(), "/", host).status, 200) << "Host: " << host;
  }
  const auto post = RawHttpExchange(
      port(), Post("localhost" + p, "Content-Length: 2\r\n", "{}"));
  ASSERT_EQ(post.size(), 1u);
  EXPECT_EQ(post[0].status, 200) << post[0].body;
}

TEST_F(HttpPortGuardTest, HealthzAnswersAnyHostForProbesByAddress) {
  EXPECT_EQ(RawGet(port(), "/healthz", "10.1.2.3:8080").status, 200);
}

TEST_F(HttpPortGuardTest, EveryResponseForbidsFraming) {
  std::vector<RawResponse> responses = {
      RawGet(port(), "/"),
      RawGet(port(), "/metrics"),
      RawGet(port(), "/v1/GetServerInfo"),     // 405
      RawGet(port(), "/no-such-page.html"),    // 404
      RawGet(port(), "/", "rebound.example"),  // 421
  };
  const auto post =
      RawHttpExchange(port(), Post("127.0.0.1", "Content-Length: 2\r\n", "{}"));
  ASSERT_EQ(post.size(), 1u);
  responses.push_back(post[0]);
  for (const RawResponse& r : responses) {
    ASSERT_NE(r.status, 0);
    EXPECT_EQ(Header(r, "x-frame-options"), "DENY") << r.status;
    EXPECT_EQ(r.headers.count("content-security-policy"), 1u) << r.status;
    EXPECT_THAT(Header(r, "content-security-policy"),
                HasSubstr("frame-ancestors 'none'"))
        << r.status;
  }
  // The page keeps its own policy, with framing forbidden in the same one.
  EXPECT_THAT(Header(responses[0], "content-security-policy"),
              HasSubstr("default-src 'self'"));
}

// The metadata value `key` of grpc-gateway's error body.
std::string MetadataOf(const RawResponse& r, const std::string& key) {
  const Json j = Json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("details") || !j["details"].is_array() ||
      j["details"].empty() || !j["details"][0].is_object() ||
      !j["details"][0].contains("metadata") ||
      !j["details"][0]["metadata"].is_object()) {
    return "";
  }
  return j["details"][0]["metadata"].value(key, "");
}

TEST_F(HttpPortGuardTest, AmbiguousFramingIsRefusedAndNothingIsSmuggled) {
  // The body, read by its chunked framing, ends at once; read by its
  // length, it would be 4 bytes and the rest a second request.
  const std::string smuggled =
      "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  for (const auto& [framing, rule] :
       std::vector<std::pair<std::string, std::string>>{
           {"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
            "length-and-encoding"},
           {"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n",
            "length-and-encoding"},
           {"Content-Length: 5\r\nContent-Length: 5\r\n", "repeated-header"},
           {"Content-Length: 5\r\nContent-Length: 60\r\n", "repeated-header"},
           {"Transfer-Encoding: gzip, chunked\r\n", "transfer-encoding"},
           {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
            "repeated-header"},
           {"Content-Length: +5\r\n", "content-length"},
           // A proxy may take it for Transfer-Encoding; cpp-httplib does not.
           {"Transfer-Encoding : chunked\r\n", "header-name"},
           // A bare CR is a line end to some proxies; a NUL ends C strings.
           {"X-A: 1\rContent-Length: 4\r\n", "header-value"},
           {std::string("X-A: a\0b\r\n", 9), "header-value"}}) {
    const auto replies = RawHttpExchange(
        port(), Post("127.0.0.1", framing, "0\r\n\r\n" + smuggled,
                     /*keep_alive=*/true));
    ASSERT_EQ(replies.size(), 1u) << framing;
    EXPECT_EQ(replies[0].status, 400) << framing;
    EXPECT_EQ(ReasonOf(replies[0]), "HTTP_FRAMING_INVALID") << framing;
    EXPECT_EQ(MetadataOf(replies[0], "rule"), rule) << framing;
  }
  // One framing, either way, is taken; no framing at all is no body (RFC
  // 9112 6.3), not a body read to the connection's end.
  for (const auto& [framing, body] :
       std::vector<std::pair<std::string, std::string>>{
           {"Content-Length: 2\r\n", "{}"},
           {"Transfer-Encoding: chunked\r\n", "2\r\n{}\r\n0\r\n\r\n"},
           {"Transfer-Encoding: chunked\r\n", "2;x=y\r\n{}\r\n0\r\n\r\n"},
           {"", ""}}) {
    const auto replies =
        RawHttpExchange(port(), Post("127.0.0.1", framing, body));
    ASSERT_EQ(replies.size(), 1u) << framing;
    EXPECT_EQ(replies[0].status, 200) << framing << replies[0].body;
  }
}

// A request answered without its body read (refused before it, or by a
// route that takes none) ends its connection: the body's bytes are never
// taken for a next request, whatever they hold.
TEST_F(HttpPortGuardTest, AnAnswerThatLeavesTheBodyUnreadEndsTheConnection) {
  const std::string smuggled =
      "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  const std::string length =
      "Content-Length: " + std::to_string(smuggled.size()) + "\r\n";
  for (const auto& [head, status] : std::vector<std::pair<std::string, int>>{
           // The wrong Content-Type: refused before the body.
           {"POST /v1/GetServerInfo HTTP/1.1\r\nContent-Type: text/plain\r\n",
            415},
           // No such method: refused before the body.
           {"POST /v1/NoSuchMethod HTTP/1.1\r\nContent-Type: "
            "application/json\r\n",
            404},
           // Routes that take no body.
           {"GET /v1/GetServerInfo HTTP/1.1\r\n", 405},
           {"GET /healthz HTTP/1.1\r\n", 200},
           {"OPTIONS /v1/GetServerInfo HTTP/1.1\r\n", 403}}) {
    const auto replies = RawHttpExchange(
        port(), head + "Host: 127.0.0.1\r\n" + length + "\r\n" + smuggled);
    ASSERT_EQ(replies.size(), 1u) << head << "answered what its body held";
    EXPECT_EQ(replies[0].status, status) << head;
  }
  // A head cpp-httplib cannot parse ends its connection too.
  const auto replies =
      RawHttpExchange(port(), "GET / HTTP/1.1 extra\r\n\r\n" + smuggled);
  EXPECT_EQ(replies.size(), 1u);
}

// A body that breaks its framing is a malformed request (400, with the rule
// it broke), and one declared past the limit is too large (413; past
// 64 MiB refused unread, as here): neither is 429, which tells a client to
// retry later.
TEST_F(HttpPortGuardTest, ABrokenBodyIs400AndADeclaredLengthPastTheLimit413) {
  const std::string chunked = "Transfer-Encoding: chunked\r\n";
  for (const auto& [name, framing, body, rule] : std::vector<
           std::tuple<std::string, std::string, std::string, std::string>>{
           {"chunk size not hex", chunked, "zz\r\n{}\r\n0\r\n\r\n",
            "chunked-body"},
           {"chunk size past 2^64", chunked,
            "ffffffffffffffffff\r\n{}\r\n0\r\n\r\n", "chunked-body"},
           // Legal HTTP/1.1 that cpp-httplib 0.11 does not read.
           {"trailer field", chunked, "2\r\n{}\r\n0\r\nX-T: 1\r\n\r\n",
            "chunked-body"},
           // Answered once the server's read timeout (5 s) passes.
           {"body shorter than its length", "Content-Length: 50\r\n", "{}",
            "body-short"}}) {
    SCOPED_TRACE(name);
    const auto replies =
        RawHttpExchange(port(), Post("127.0.0.1", framing, body,
                                     /*keep_alive=*/true));
    ASSERT_EQ(replies.size(), 1u);
    EXPECT_EQ(replies[0].status, 400) << replies[0].body;
    EXPECT_EQ(ReasonOf(replies[0]), "HTTP_FRAMING_INVALID") << replies[0].body;
    EXPECT_EQ(MetadataOf(replies[0], "rule"), rule) << replies[0].body;
  }
  for (const std::string& length :
       {std::string("67108865"), std::string("18446744073709551616"),
        std::string("99999999999999999999999")}) {
    SCOPED_TRACE(length);
    const auto replies = RawHttpExchange(
        port(), Post("127.0.0.1", "Content-Length: " + length + "\r\n", "{}",
                     /*keep_alive=*/true));
    ASSERT_EQ(replies.size(), 1u);
    EXPECT_EQ(replies[0].status, 413) << replies[0].body;
    EXPECT_EQ(ReasonOf(replies[0]), "LIMIT_EXCEEDED") << replies[0].body;
    EXPECT_EQ(MetadataOf(replies[0], "asked"), length);
    EXPECT_EQ(MetadataOf(replies[0], "limit_value"), "16777216");
  }
}

// grpc.health.v1.Health/Check for the server: the serialized response
// ("\x08\x01" SERVING, "\x08\x02" NOT_SERVING), or the status's code name.
std::string HealthCheck(const std::string& target) {
  grpc::GenericStub stub(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice empty("", 0);
  grpc::ByteBuffer request(&empty, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response,
                 [&](grpc::Status s) { done.set_value(std::move(s)); });
  const grpc::Status s = done.get_future().get();
  if (!s.ok()) return absl::StrCat("code ", s.error_code());
  std::vector<grpc::Slice> slices;
  (void)response.Dump(&slices);
  std::string bytes;
  for (const grpc::Slice& sl : slices) {
    bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  return bytes;
}

grpc::StatusCode GetTensorCode(const std::string& target,
                               const std::string& checkpoint) {
  auto stub = v1::Tensormorph::NewStub(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::GetTensorRequest req;
  req.set_checkpoint(checkpoint);
  req.set_tensor("w");
  v1::GetTensorResponse resp;
  return stub->GetTensor(&ctx, req, &resp).error_code();
}

TEST(DrainTest, HealthTurnsNotServingAndNewCallsAreRefusedOnBothPorts) {
  // A download held open (its client stops reading) keeps the drain
  // waiting: 32 MiB is more than loopback's socket buffers take.
  const std::string root = MakeTempDir();
  WriteFile(root + "/m.safetensors",
            BuildSafetensors(
                {{"w", "F32", {2, 2}, Bytes(std::vector<float>{1, 2, 3, 4})}}));
  WriteFile(
      root + "/big.safetensors",
      BuildSafetensors(
          {{"w", "F32", {2048, 4096}, std::string(size_t{32} << 20, '\0')}}));
  ServerProcess s({root},
                  {"--http-listen", "127.0.0.1:0", "--shutdown-grace", "60"});
  ASSERT_EQ(HealthCheck(s.address()), std::string("\x08\x01"));
  HeldResponse held(
      s.http_port(),
      "GET /v1/tensor.npy?checkpoint=big.safetensors&tensor=w HTTP/1.1\r\n"
      "Host: 127.0.0.1\r\nConnection: close\r\n\r\n");
  ASSERT_EQ(held.head().status, 200);
  size_t length = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      held.head().headers.find("content-length")->second, &length));
  // And a gRPC stream under way, its client reading one chunk, then none.
  auto stub = v1::Tensormorph::NewStub(
      grpc::CreateChannel(s.address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext stream_ctx;
  v1::ReadSliceRequest slice;
  slice.set_checkpoint("big.safetensors");
  slice.set_tensor("w");
  auto reader = stub->ReadSlice(&stream_ctx, slice);
  v1::SliceChunk chunk;
  ASSERT_TRUE(reader->Read(&chunk));

  ASSERT_EQ(::kill(s.pid(), SIGTERM), 0);
  // The drain's first moment is the signal's handling: health says so.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  std::string health;
  while ((health = HealthCheck(s.address())) != std::string("\x08\x02") &&
         absl::Now() < deadline) {
  }
  ASSERT_EQ(health, std::string("\x08\x02")) << "NOT_SERVING";
  // New calls are refused on both ports, not admitted and cut later.
  EXPECT_EQ(GetTensorCode(s.address(), "m.safetensors"), grpc::UNAVAILABLE);
  const RawResponse http =
      RawGet(s.http_port(), "/v1/tensor.npy?checkpoint=m.safetensors&tensor=w");
  EXPECT_EQ(http.status, 503);
  EXPECT_EQ(ReasonOf(http), "UNAVAILABLE");
  EXPECT_EQ(RawGet(s.http_port(), "/healthz").status, 503);
  // What was in flight finishes whole, on both ports.
  EXPECT_EQ(held.ReadToEnd(), length);
  int64_t streamed = static_cast<int64_t>(chunk.data().size());
  while (reader->Read(&chunk)) {
    streamed += static_cast<int64_t>(chunk.data().size());
  }
  const grpc::Status finished = reader->Finish();
  EXPECT_TRUE(finished.ok())
      << finished.error_code() << ": " << finished.error_message();
  EXPECT_EQ(streamed, int64_t{32} << 20);
  EXPECT_EQ(s.WaitForExit(), 0);
}

}  // namespace
}  // namespace tensormorph
