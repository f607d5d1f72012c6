// The log an operator reads, tried as an attacker would: a name that tries
// to write a line of its own, a client that says it is someone else, calls
// refused on every path (gRPC unary, stream, GetServerInfo, an unknown
// method, HTTP). Each is one escaped line with the connection's own peer,
// and each refusal is counted in /metrics by its reason.
#include <fcntl.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/log_line.h"
#include "server/trusted_proxies.h"
#include "tensormorph/v1/tensormorph.grpc.pb.h"
#include "tests/support/process.h"
#include "tests/support/prometheus_text.h"
#include "tests/support/raw_http.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::Bytes;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::ParsePrometheusText;
using ::tensormorph::testing::RawGet;
using ::tensormorph::testing::ReadFileBytes;
using ::tensormorph::testing::ServerProcess;
using ::tensormorph::testing::WriteFile;
using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;

// A name that, written raw, ends its line and forges a whole successful
// call from another peer, then clears the operator's terminal.
const std::string kForgingName =
    "w\n2026-12-02T05:15:43.123Z info GetTensor peer=ipv4:6.6.6.6:1 "
    "checkpoint=\"m.safetensors\" tensor=\"w\" status=OK bytes=0 ms=0.1"
    "\x1b[2J\"";

TEST(EscapeLogValueTest, QuotesBackslashesAndControlCharactersAreEscaped) {
  EXPECT_EQ(EscapeLogValue("a\"b\\c\nd\re\tf\x1b[2Jg\x7fh"),
            "a\\\"b\\\\c\\nd\\re\\tf\\x1b[2Jg\\x7fh");
  EXPECT_EQ(EscapeLogValue(std::string("nul\0", 4)), "nul\\x00");
}

TEST(EscapeLogValueTest, BytesThatAreNotUtf8AndC1ControlsAreHex) {
  EXPECT_EQ(EscapeLogValue("\xff"), "\\xff");
  EXPECT_EQ(EscapeLogValue("\xc3("), "\\xc3(");                  // cut sequence
  EXPECT_EQ(EscapeLogValue("\xc0\xaf"), "\\xc0\\xaf");           // overlong '/'
  EXPECT_EQ(EscapeLogValue("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // surrogate
  EXPECT_EQ(EscapeLogValue("\xf4\x90\x80\x80"),
            "\\xf4\\x90\\x80\\x80");                    // past U+10FFFF
  EXPECT_EQ(EscapeLogValue("\xc2\x9b"), "\\xc2\\x9b");  // C1 CSI
}

TEST(EscapeLogValueTest, ValidUtf8PassesUnchanged) {
  const std::string text =
      "gr\xc3\xb6\xc3\x9f"
      "e \xe2\x9c\x93 \xf0\x9f\x98\x80";
  EXPECT_EQ(EscapeLogValue(text), text);
}

TEST(TrustedProxiesTest, AddressesMatchTheirRanges) {
  auto proxies =
      TrustedProxies::Parse({"10.0.0.0/8", "::1", "fd00::/8", "192.0.2.7"});
  ASSERT_TRUE(proxies.ok()) << proxies.status();
  EXPECT_TRUE(proxies->Contains("10.200.3.4"));
  EXPECT_TRUE(proxies->Contains("::ffff:10.0.0.1"));  // IPv4-mapped
  EXPECT_TRUE(proxies->Contains("[::1]"));
  EXPECT_TRUE(proxies->Contains("fd12::5"));
  EXPECT_TRUE(proxies->Contains("192.0.2.7"));
  EXPECT_FALSE(proxies->Contains("192.0.2.8"));
  EXPECT_FALSE(proxies->Contains("11.0.0.1"));
  EXPECT_FALSE(proxies->Contains("::2"));
  EXPECT_FALSE(proxies->Contains("not-an-address"));
  EXPECT_FALSE(TrustedProxies::Parse({}).value().Contains("127.0.0.1"));
}

TEST(TrustedProxiesTest, AnEntryThatIsNoCidrIsRefused) {
  for (const char* bad : {"10.0.0.0/33", "::/129", "proxy.example",
                          "10.0.0.0/x", "10.0.0.0/", ""}) {
    EXPECT_EQ(TrustedProxies::Parse({bad}).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(TrustedProxiesTest, PeerAddressIsTheAddressOfAGrpcPeer) {
  EXPECT_EQ(PeerAddress("ipv4:10.0.0.7:5123"), "10.0.0.7");
  EXPECT_EQ(PeerAddress("ipv6:[::1]:5123"), "::1");
  EXPECT_EQ(PeerAddress("ipv6:%5B::1%5D:5123"), "::1");
  EXPECT_EQ(PeerAddress("unix:/run/t.sock"), "");
  EXPECT_EQ(PeerAddress("unknown"), "");
}

// A tensormorphd whose log goes to a file, read once it has stopped (its
// exit writes out every line logged before).
class LoggedServer {
 public:
  explicit LoggedServer(std::vector<std::string> flags) {
    root_ = MakeTempDir();
    WriteFile(
        root_ + "/m.safetensors",
        BuildSafetensors(
            {{"w", "F32", {2, 2}, Bytes(std::vector<float>{1, 2, 3, 4})}}));
    log_path_ = root_ + "/log.txt";
    const int fd = ::open(log_path_.c_str(),
                          O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    flags.insert(flags.end(), {"--log-level", "info"});
    server_ = std::make_unique<ServerProcess>(std::vector<std::string>{root_},
                                              flags, fd);
    ::close(fd);
    stub_ = v1::Tensormorph::NewStub(grpc::CreateChannel(
        server_->address(), grpc::InsecureChannelCredentials()));
  }

  ServerProcess& server() { return *server_; }
  v1::Tensormorph::Stub& stub() { return *stub_; }
  const std::string& root() const { return root_; }

  // GetTensor of `tensor` in m.safetensors, with `metadata`.
  grpc::Status GetTensor(
      const std::string& tensor,
      const std::vector<std::pair<std::string, std::string>>& metadata = {}) {
    grpc::ClientContext ctx;
    for (const auto& [k, v] : metadata) ctx.AddMetadata(k, v);
    v1::GetTensorRequest req;
    req.set_checkpoint("m.safetensors");
    req.set_tensor(tensor);
    v1::GetTensorResponse resp;
    return stub_->GetTensor(&ctx, req, &resp);
  }

  // Stops the server and returns its log's lines.
  std::vector<std::string> StopAndReadLog() {
    // The drain would wait on an idle channel's connection (gRPC's 5 s
    // backup poll on its side): it goes first.
    stub_.reset();
    EXPECT_EQ(server_->Stop(), 0);
    return absl::StrSplit(ReadFileBytes(log_path_), '\n', absl::SkipEmpty());
  }

 private:
  std::string root_, log_path_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<v1::Tensormorph::Stub> stub_;
};

// The text line's event: the word after the time and the level.
std::string EventOf(const std::string& line) {
  std::vector<std::string> words = absl::StrSplit(line, ' ');
  return words.size() > 2 ? words[2] : "";
}

std::vector<std::string> LinesOf(const std::vector<std::string>& lines,
                                 const std::string& event,
                                 const std::string& containing = "") {
  std::vector<std::string> out;
  for (const std::string& l : lines) {
    if (EventOf(l) == event && absl::StrContains(l, containing)) {
      out.push_back(l);
    }
  }
  return out;
}

TEST(OperatorLogTest, ANameWithNewlineQuoteAndEscIsOneEscapedLine) {
  LoggedServer s({});
  EXPECT_EQ(s.GetTensor(kForgingName).error_code(), grpc::NOT_FOUND);
  EXPECT_TRUE(s.GetTensor("w").ok());  // a bystander
  const std::vector<std::string> lines = s.StopAndReadLog();
  const std::string log = absl::StrJoin(lines, "\n");
  EXPECT_THAT(log, Not(HasSubstr("\x1b"))) << "a raw ESC reached the log";
  EXPECT_THAT(log, Not(HasSubstr("6.6.6.6:1 checkpoint=\"m.")));
  for (const std::string& l : lines) {
    EXPECT_THAT(
        l, ::testing::MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z .*"))
        << "a line that is not the server's own: " << l;
  }
  const auto calls = LinesOf(lines, "GetTensor");
  ASSERT_EQ(calls.size(), 2u) << log;
  const auto refused = LinesOf(lines, "GetTensor", "status=NOT_FOUND");
  ASSERT_EQ(refused.size(), 1u) << log;
  EXPECT_THAT(refused[0],
              HasSubstr("tensor=\"" + EscapeLogValue(kForgingName) + "\""));
  EXPECT_THAT(refused[0], HasSubstr(" peer=ipv4:127.0.0.1:"));
  // The bystander's line; the forged one is inside the quotes above.
  EXPECT_EQ(LinesOf(lines, "GetTensor", "tensor=\"w\" status=OK").size(), 1u);
}

TEST(OperatorLogTest, ALongSuppliedNameIsCutInTheLineWithItsLengthSaid) {
  LoggedServer s({});
  const std::string name(4'000'000, 'n');
  EXPECT_EQ(s.GetTensor(name).error_code(), grpc::NOT_FOUND);
  const auto calls = LinesOf(s.StopAndReadLog(), "GetTensor");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_THAT(calls[0],
              HasSubstr("tensor=\"" + std::string(kMaxLoggedValueBytes, 'n') +
                        "...(3998976 more bytes)\""));
  EXPECT_LT(calls[0].size(), 4 * kMaxLoggedValueBytes);
}

TEST(OperatorLogTest, JsonLinesAreObjectsWithUtcTimesAndTheCallsFields) {
  LoggedServer s({"--log-format", "json"});
  EXPECT_EQ(s.GetTensor(kForgingName).error_code(), grpc::NOT_FOUND);
  EXPECT_TRUE(s.GetTensor("w").ok());
  const std::vector<std::string> lines = s.StopAndReadLog();
  ASSERT_FALSE(lines.empty());
  const std::regex utc(
      R"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z)");
  std::vector<Json> calls;
  for (const std::string& line : lines) {
    const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << "not a JSON object: " << line;
    ASSERT_TRUE(j.contains("time") && j["time"].is_string()) << line;
    EXPECT_TRUE(std::regex_match(j["time"].get<std::string>(), utc)) << line;
    EXPECT_TRUE(j.contains("level")) << line;
    if (j.value("method", "") == "GetTensor") calls.push_back(j);
  }
  ASSERT_EQ(calls.size(), 2u);
  for (const Json& c : calls) {
    for (const char* field :
         {"peer", "checkpoint", "tensor", "status", "bytes", "ms"}) {
      EXPECT_TRUE(c.contains(field)) << field << " in " << c.dump();
    }
    EXPECT_TRUE(c["bytes"].is_number());
    EXPECT_TRUE(c["ms"].is_number());
    EXPECT_EQ(c["checkpoint"], "m.safetensors");
    EXPECT_THAT(c["peer"].get<std::string>(),
                ::testing::StartsWith("ipv4:127.0.0.1:"));
  }
  const Json& refused = calls[0]["status"] == "NOT_FOUND" ? calls[0] : calls[1];
  EXPECT_EQ(refused["status"], "NOT_FOUND");
  EXPECT_EQ(refused["tensor"], EscapeLogValue(kForgingName));
  EXPECT_TRUE(refused.contains("error"));
}

TEST(OperatorLogTest, AForwardedForFromAnUntrustedPeerIsNotBelieved) {
  LoggedServer s({});
  // From the network, the gateway's own key is no more believed.
  EXPECT_TRUE(s.GetTensor("w", {{"x-forwarded-for", "6.6.6.6"},
                                {"tensormorph-gateway-peer", "6.6.6.6:1"}})
                  .ok());
  const std::vector<std::string> lines = s.StopAndReadLog();
  const auto calls = LinesOf(lines, "GetTensor");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_THAT(calls[0], HasSubstr(" peer=ipv4:127.0.0.1:"));
  EXPECT_THAT(absl::StrJoin(lines, "\n"), Not(HasSubstr("6.6.6.6")));
}

TEST(OperatorLogTest, ATrustedProxysClientIsLoggedBesideTheProxysPeer) {
  LoggedServer s({"--trusted-proxy", "127.0.0.0/8"});
  EXPECT_TRUE(s.GetTensor("w", {{"x-forwarded-for", "203.0.113.9"},
                                {"tensormorph-gateway-peer", "6.6.6.6:1"}})
                  .ok());
  const std::vector<std::string> lines = s.StopAndReadLog();
  const auto calls = LinesOf(lines, "GetTensor");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_THAT(calls[0], HasSubstr(" peer=ipv4:127.0.0.1:"));
  EXPECT_THAT(calls[0], HasSubstr(" forwarded_for=\"203.0.113.9\""));
  EXPECT_THAT(absl::StrJoin(lines, "\n"), Not(HasSubstr("6.6.6.6")));
}

TEST(OperatorLogTest, ATrustedProxyIsNoCidrAndTheServerDoesNotStart) {
  const testing::CommandResult r = testing::RunCommand(
      {testing::TensormorphdPath(), "--root", MakeTempDir(), "--listen",
       "127.0.0.1:0", "--trusted-proxy", "proxy.example"});
  EXPECT_EQ(r.exit_code, 1);
}

double Refused(int http_port, const std::string& reason) {
  const auto scrape = ParsePrometheusText(RawGet(http_port, "/metrics").body);
  if (!scrape.ok()) return -1;
  return scrape->Value("tensormorph_refused_calls_total", {{"reason", reason}})
      .value_or(0);
}

TEST(OperatorLogTest, EveryRefusedCallIsLoggedOnceWithItsPeerAndCounted) {
  const std::string tokens = MakeTempDir() + "/tokens";
  WriteFile(tokens, "secret-one\n");
  LoggedServer s({"--token-file", tokens, "--http-listen", "127.0.0.1:0"});
  const int http = s.server().http_port();
  const std::pair<std::string, std::string> token = {"authorization",
                                                     "Bearer secret-one"};
  // Refused: unary, stream and GetServerInfo without the token.
  EXPECT_EQ(s.GetTensor("w").error_code(), grpc::UNAUTHENTICATED);
  {
    grpc::ClientContext ctx;
    v1::ListTensorsRequest req;
    req.set_checkpoint("m.safetensors");
    auto reader = s.stub().ListTensors(&ctx, req);
    v1::TensorInfo info;
    while (reader->Read(&info)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    v1::GetServerInfoResponse resp;
    EXPECT_EQ(s.stub()
                  .GetServerInfo(&ctx, v1::GetServerInfoRequest(), &resp)
                  .error_code(),
              grpc::UNAUTHENTICATED);
  }
  EXPECT_TRUE(s.GetTensor("w", {token}).ok());  // a bystander
  // A method no service has, with the token.
  {
    auto channel = grpc::CreateChannel(s.server().address(),
                                       grpc::InsecureChannelCredentials());
    grpc::GenericStub generic(channel);
    grpc::ClientContext ctx;
    ctx.AddMetadata(token.first, token.second);
    grpc::Slice empty("", 0);
    grpc::ByteBuffer request(&empty, 1), response;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&ctx, "/tensormorph.v1.Tensormorph/NoSuchMethod",
                      grpc::StubOptions(), &request, &response,
                      [&](grpc::Status st) { done.set_value(std::move(st)); });
    EXPECT_EQ(done.get_future().get().error_code(), grpc::UNIMPLEMENTED);
  }
  // HTTP: refused by the service (no token), and by the gateway (a Host
  // that is not this server's).
  const auto no_token = testing::RawHttpExchange(
      http,
      "POST /v1/GetTensor HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
      "application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
  ASSERT_EQ(no_token.size(), 1u);
  EXPECT_EQ(no_token[0].status, 401);
  EXPECT_EQ(RawGet(http, "/", "rebound.example").status, 421);
  EXPECT_TRUE(s.GetTensor("w", {token}).ok());

  // Counted as each ends: the last may land just after its client is told.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (Refused(http, "auth") < 4 && absl::Now() < deadline) {
  }
  EXPECT_EQ(Refused(http, "auth"), 4);
  EXPECT_EQ(Refused(http, "unimplemented"), 1);
  EXPECT_EQ(Refused(http, "host"), 1);

  const std::vector<std::string> lines = s.StopAndReadLog();
  const std::string log = absl::StrJoin(lines, "\n");
  const auto auth = [&](const std::string& event) {
    return LinesOf(lines, event, "refused=auth");
  };
  ASSERT_EQ(auth("GetTensor").size(), 1u) << log;
  EXPECT_THAT(auth("GetTensor")[0], HasSubstr(" peer=ipv4:127.0.0.1:"));
  EXPECT_THAT(auth("GetTensor")[0], HasSubstr(" status=UNAUTHENTICATED"));
  ASSERT_EQ(auth("ListTensors").size(), 1u) << log;
  EXPECT_THAT(auth("ListTensors")[0], HasSubstr(" peer=ipv4:127.0.0.1:"));
  // The gRPC call, and the HTTP request's (its gateway asks first).
  ASSERT_EQ(auth("GetServerInfo").size(), 2u) << log;
  const auto http_auth =
      LinesOf(lines, "GetServerInfo", " peer=http:127.0.0.1:");
  ASSERT_EQ(http_auth.size(), 1u);
  // Logged under the HTTP request it was refused for.
  EXPECT_THAT(http_auth[0], HasSubstr(" http=\"POST /v1/GetTensor\""));
  EXPECT_EQ(LinesOf(lines, "NoSuchMethod", "status=UNIMPLEMENTED").size(), 1u);
  const auto host = LinesOf(lines, "HTTP", "refused=host");
  ASSERT_EQ(host.size(), 1u) << log;
  EXPECT_THAT(host[0], HasSubstr(" peer=http:127.0.0.1:"));
  EXPECT_THAT(host[0], HasSubstr(" http_status=421"));
  EXPECT_EQ(LinesOf(lines, "GetTensor", "tensor=\"w\" status=OK").size(), 2u);
}

}  // namespace
}  // namespace tensormorph
