// tensormorphd's HTTP port shares what one client can hold between client
// addresses. Its serving threads: a client that holds connections open
// (sending a request a line a second and never ending it, over TCP or TLS)
// waits for its own turn, and a bystander from another address is answered
// meanwhile; without the share those connections held every one of the 64
// threads for as long as they trickled. Its memory: replies a client does
// not read count against its --max-reply-bytes-per-peer, as on gRPC.
#include <grpcpp/grpcpp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tensormorph/v1/tensormorph.grpc.pb.h"
#include "tests/support/process.h"
#include "tests/support/raw_http.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_ca.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::Bytes;
using ::tensormorph::testing::HeldResponse;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::RawConnect;
using ::tensormorph::testing::RawHttpExchange;
using ::tensormorph::testing::RawResponse;
using ::tensormorph::testing::ServerProcess;
using ::tensormorph::testing::TestCaFile;
using ::tensormorph::testing::WriteFile;
using Json = nlohmann::json;

// More connections than the port has threads (64): one share of 2, a
// waiting line of 16 (two shares, at least 16), and 54 past it.
constexpr int kShare = 2;
constexpr int kFlood = 72;
constexpr int kAdmitted = kShare + 16;

// kFlood connections that send `first` and then `each` once a second until
// stopped, never finishing a request; from 127.0.0.1, or in turn from each
// address of `from`.
class Trickle {
 public:
  Trickle(int port, const std::string& first, const std::string& each,
          const std::vector<std::string>& from = {"127.0.0.1"}) {
    for (int i = 0; i < kFlood; ++i) {
      const int fd = RawConnect(port, from[i % from.size()]);
      if (fd >= 0) {
        (void)::send(fd, first.data(), first.size(), MSG_NOSIGNAL);
      }
      fds_.push_back(fd);
    }
    sender_ = std::thread([this, each] {
      while (!stop_.load()) {
        for (const int fd : fds_) {
          if (fd >= 0) (void)::send(fd, each.data(), each.size(), MSG_NOSIGNAL);
        }
        for (int i = 0; i < 10 && !stop_.load(); ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      }
    });
  }
  ~Trickle() {
    Stop();
    for (const int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  void Stop() {
    stop_.store(true);
    if (sender_.joinable()) sender_.join();
  }
  int opened() const {
    int n = 0;
    for (const int fd : fds_) n += fd >= 0;
    return n;
  }
  // Indices of the connections the server has ended (closed or reset),
  // with what each received; waits up to 5 s for `expected` of them.
  std::vector<std::pair<int, std::string>> Ended(int expected) {
    for (int round = 0; round < 50; ++round) {
      int ended = 0;
      for (size_t i = 0; i < fds_.size(); ++i) ended += Drain(i);
      if (ended >= expected) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::vector<std::pair<int, std::string>> out;
    for (size_t i = 0; i < fds_.size(); ++i) {
      if (ended_[i]) out.emplace_back(static_cast<int>(i), received_[i]);
    }
    return out;
  }
  // Closes every connection but `keep`.
  void CloseAllBut(int keep) {
    for (size_t i = 0; i < fds_.size(); ++i) {
      if (static_cast<int>(i) != keep && fds_[i] >= 0) {
        ::close(fds_[i]);
        fds_[i] = -1;
      }
    }
  }
  int fd(int i) const { return fds_[i]; }
  // How many connections have received bytes starting with `prefix`.
  int Received(const std::string& prefix) {
    int n = 0;
    for (size_t i = 0; i < fds_.size(); ++i) {
      Drain(i);
      n += absl::StartsWith(received_[i], prefix);
    }
    return n;
  }

 private:
  // Reads what connection `i` has received; true once the server ended it.
  bool Drain(size_t i) {
    if (fds_[i] < 0 || ended_[i]) return ended_[i];
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fds_[i], buf, sizeof buf, MSG_DONTWAIT)) > 0) {
      received_[i].append(buf, static_cast<size_t>(n));
    }
    ended_[i] = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    return ended_[i];
  }

  std::vector<int> fds_;
  std::vector<std::string> received_ = std::vector<std::string>(kFlood);
  std::vector<bool> ended_ = std::vector<bool>(kFlood, false);
  std::atomic<bool> stop_{false};
  std::thread sender_;
};

std::string Root() {
  static const std::string* dir = new std::string(MakeTempDir());
  return *dir;
}

std::string Body(const std::string& response) {
  const size_t end = response.find("\r\n\r\n");
  return end == std::string::npos ? "" : response.substr(end + 4);
}

TEST(HttpConnectionShareTest,
     ATricklingClientWaitsItsTurnAndABystanderIsAnswered) {
  ServerProcess server({Root()}, {"--http-listen", "127.0.0.1:0",
                                  "--http-connections-per-peer", "2"});
  Trickle flood(server.http_port(),
                "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n", "X-a: b\r\n");
  ASSERT_EQ(flood.opened(), kFlood);

  for (const std::string& request :
       {std::string("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    "Connection: close\r\n\r\n"),
        std::string("POST /v1/GetServerInfo HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    "Content-Type: application/json\r\nContent-Length: 2\r\n"
                    "Connection: close\r\n\r\n{}")}) {
    HeldResponse bystander(server.http_port(), request, "127.0.0.2");
    EXPECT_EQ(bystander.head().status, 200) << request;
  }

  // Past the waiting line, a connection is answered 429 at once and closed;
  // those within it are all still open: none was dropped to make room.
  const auto ended = flood.Ended(kFlood - kAdmitted);
  ASSERT_EQ(static_cast<int>(ended.size()), kFlood - kAdmitted);
  std::vector<bool> refused(kFlood, false);
  for (const auto& [index, response] : ended) {
    refused[index] = true;
    EXPECT_TRUE(absl::StartsWith(response, "HTTP/1.1 429 ")) << response;
    const Json error = Json::parse(Body(response), nullptr, false);
    ASSERT_TRUE(error.is_object()) << response;
    EXPECT_EQ(error["details"][0]["reason"], "LIMIT_EXCEEDED");
    EXPECT_EQ(error["details"][0]["metadata"]["limit"],
              "http_connections_per_peer");
  }

  // A waiting connection is served in its turn: when the client's others
  // end, the last one admitted finishes its request and is answered.
  int last = kFlood - 1;
  while (last >= 0 && refused[last]) --last;
  ASSERT_GE(last, kShare);
  flood.Stop();
  flood.CloseAllBut(last);
  const std::string end = "\r\n";
  ASSERT_EQ(::send(flood.fd(last), end.data(), end.size(), MSG_NOSIGNAL), 2);
  char buf[256] = {};
  const ssize_t n = ::recv(flood.fd(last), buf, sizeof buf - 1, 0);
  ASSERT_GT(n, 0) << "the waiting connection was never served";
  EXPECT_TRUE(absl::StartsWith(buf, "HTTP/1.1 200 ")) << buf;
}

// Connections hold no serving thread while their requests have not come
// whole, and one address no more than an eighth of the threads: from five
// addresses, more connections than there are threads, silent, or trickling
// a request's head or body a line or byte a second; a bystander is
// answered while every one is still open (none had to time out to make
// room).
TEST(HttpConnectionShareTest, UnfinishedRequestsFromManyAddressesHoldNoThread) {
  ServerProcess server({Root()}, {"--http-listen", "127.0.0.1:0"});
  for (const auto& [first, each] :
       std::vector<std::pair<std::string, std::string>>{
           {"", ""},
           {"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n", "X-a: b\r\n"},
           {"POST /v1/GetServerInfo HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000000\r\n"
            "\r\n",
            " "},
           // Handed to a thread at its head (its client waits for 100
           // Continue), then trickled: each address holds only its eighth
           // of the threads.
           {"POST /v1/GetServerInfo HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nExpect: 100-continue\r\n"
            "Content-Length: 1000000\r\n\r\n",
            " "}}) {
    Trickle flood(
        server.http_port(), first, each,
        {"127.0.1.1", "127.0.1.2", "127.0.1.3", "127.0.1.4", "127.0.1.5"});
    ASSERT_EQ(flood.opened(), kFlood);
    HeldResponse bystander(server.http_port(),
                           "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           "Connection: close\r\n\r\n",
                           "127.0.0.2");
    EXPECT_EQ(bystander.head().status, 200) << first;
    EXPECT_EQ(flood.Ended(0).size(), 0u) << first;
    // Those on threads were told to go on: at most each address's eighth.
    EXPECT_LE(flood.Received("HTTP/1.1 100 Continue"), 5 * 8) << first;
  }
}

// The port holds a quarter of the process's descriptors in connections at
// most: past that a connection is answered 429 at once, and the gRPC port,
// which needs descriptors too, still accepts.
TEST(HttpConnectionShareTest,
     ConnectionsPastTheProcessShareOfDescriptorsAre429) {
  // The server inherits 256 descriptors (64 for HTTP connections); this
  // process keeps its own.
  rlimit own{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &own), 0);
  rlimit low = own;
  low.rlim_cur = 256;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::unique_ptr<ServerProcess> server;
  server = std::make_unique<ServerProcess>(
      std::vector<std::string>{Root()},
      std::vector<std::string>{"--http-listen", "127.0.0.1:0"});
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &own), 0);
  std::vector<std::string> addresses;
  for (int i = 1; i <= 36; ++i)
    addresses.push_back("127.0.2." + std::to_string(i));
  Trickle flood(server->http_port(), "", "", addresses);
  ASSERT_EQ(flood.opened(), kFlood);
  const auto ended = flood.Ended(kFlood - 64);
  ASSERT_EQ(static_cast<int>(ended.size()), kFlood - 64);
  for (const auto& [index, response] : ended) {
    EXPECT_TRUE(absl::StartsWith(response, "HTTP/1.1 429 ")) << response;
    const Json error = Json::parse(Body(response), nullptr, false);
    ASSERT_TRUE(error.is_object()) << response;
    EXPECT_EQ(error["details"][0]["metadata"]["limit"], "http_connections");
  }
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()),
                          grpc::InsecureChannelCredentials());
  auto stub = v1::Tensormorph::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  v1::GetServerInfoRequest request;
  v1::GetServerInfoResponse reply;
  EXPECT_TRUE(stub->GetServerInfo(&context, request, &reply).ok());
}

// GET /healthz over TLS from `from`; the status line, or "" when none came.
std::string TlsHealthz(int port, const std::string& from) {
  const int fd = RawConnect(port, from);
  if (fd < 0) return "";
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_load_verify_locations(ctx, TestCaFile("ca.pem").c_str(), nullptr);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  SSL_set_tlsext_host_name(ssl, "localhost");
  SSL_set1_host(ssl, "localhost");
  std::string status;
  const std::string request =
      "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  if (SSL_connect(ssl) == 1 &&
      SSL_write(ssl, request.data(), static_cast<int>(request.size())) > 0) {
    char buf[512] = {};
    const int n = SSL_read(ssl, buf, sizeof buf - 1);
    if (n > 0)
      status = std::string(buf, n).substr(0, std::string(buf).find("\r\n"));
  }
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  ::close(fd);
  return status;
}

TEST(HttpConnectionShareTest, ATricklingTlsHandshakeLeavesABystanderServed) {
  ServerProcess server(
      {Root()}, {"--http-listen", "127.0.0.1:0", "--http-connections-per-peer",
                 "2", "--tls-cert", TestCaFile("server.pem"), "--tls-key",
                 TestCaFile("server.key")});
  // A handshake record's header announcing 512 bytes, then a byte a second.
  Trickle flood(server.http_port(), std::string("\x16\x03\x01\x02\x00", 5),
                std::string(1, '\x01'));
  ASSERT_EQ(flood.opened(), kFlood);
  EXPECT_EQ(TlsHealthz(server.http_port(), "127.0.0.2"), "HTTP/1.1 200 OK");
  // Past the waiting line, connections are closed before any handshake.
  EXPECT_EQ(static_cast<int>(flood.Ended(kFlood - kAdmitted).size()),
            kFlood - kAdmitted);
}

// A heatmap of 2048 x 1024 cells as JSON: about 30 MB, far more than the
// socket buffers take, so the server holds most of it until it is read.
std::string BigHeatmapRequest() {
  const std::string body =
      R"({"checkpoint":"big.safetensors","tensor":"w","width":1024,)"
      R"("height":2048})";
  return "POST /v1/GetHeatmap HTTP/1.1\r\nHost: 127.0.0.1\r\n"
         "Content-Type: application/json\r\nConnection: close\r\n"
         "Content-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

TEST(HttpReplyShareTest, RepliesAClientDoesNotReadCountAgainstItsShare) {
  const std::string dir = MakeTempDir();
  std::vector<float> values(2048 * 1024);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<float>(i % 9973) * 1.0001e-3f - 4.9f;
  }
  WriteFile(dir + "/big.safetensors",
            BuildSafetensors({{"w", "F32", {2048, 1024}, Bytes(values)}}));
  ServerProcess server({dir}, {"--http-listen", "127.0.0.1:0",
                               "--max-reply-bytes-per-peer", "1MiB"});
  // The first reply goes whatever its size (the client holds nothing else);
  // its head is read, the rest left unread.
  HeldResponse unread(server.http_port(), BigHeatmapRequest());
  ASSERT_EQ(unread.head().status, 200);
  // While it is held, the same client's next reply is refused...
  const std::vector<RawResponse> refused =
      RawHttpExchange(server.http_port(), BigHeatmapRequest());
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].status, 429);
  const Json error = Json::parse(refused[0].body, nullptr, false);
  ASSERT_TRUE(error.is_object()) << refused[0].body;
  EXPECT_EQ(error["details"][0]["reason"], "LIMIT_EXCEEDED");
  EXPECT_EQ(error["details"][0]["metadata"]["limit"],
            "max_reply_bytes_per_peer");
  // ... and another client's is not.
  HeldResponse bystander(server.http_port(), BigHeatmapRequest(), "127.0.0.2");
  EXPECT_EQ(bystander.head().status, 200);
  EXPECT_GT(bystander.ReadToEnd(), size_t{1} << 20);
  // Once the client has read it, its share is free again.
  EXPECT_GT(unread.ReadToEnd(), size_t{1} << 20);
  HeldResponse again(server.http_port(), BigHeatmapRequest());
  EXPECT_EQ(again.head().status, 200);
}

}  // namespace
}  // namespace tensormorph
