// One client cannot starve the rest (issue 28, point 4), shown as an
// attacker would try it, with a bystander from another address whose calls
// keep succeeding:
//  - replies a client never reads (max-size GetHeatmap over raw HTTP/2 with
//    a receive window of 0) hold at most that client's reply budget
//    (--max-reply-bytes-per-peer) of the server's memory, the rest of its
//    calls are refused RESOURCE_EXHAUSTED naming the budget, and the memory
//    goes back when the client goes;
//  - a client holding its --max-streams-per-peer streams, over as many
//    connections as it likes, is refused the next one naming the cap, while
//    a client from another address still gets its stream.
// A second peer address on loopback: a socket bound to 127.0.0.2 before it
// connects (Linux routes all of 127/8 to lo), handed to gRPC as a channel.
#include <arpa/inet.h>
#include <grpcpp/create_channel_posix.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "server/prometheus.h"
#include "server/server.h"
#include "tensormorph/v1/tensormorph.pb.h"
#include "tests/support/process.h"
#include "tests/support/prometheus_text.h"
#include "tests/support/raw_http.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/stalled_reader.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::ParsePrometheusText;
using ::tensormorph::testing::ProcStatusKb;
using ::tensormorph::testing::PrometheusScrape;
using ::tensormorph::testing::ServerProcess;
using ::tensormorph::testing::StalledReader;
using ::tensormorph::testing::WriteFile;
using ::tensormorph::testing::WriteSparseSafetensors;
using ::testing::AllOf;

constexpr int64_t kMiB = int64_t{1} << 20;

// A TCP socket from `local_ip` (any port) connected to 127.0.0.1:`port`;
// -1 on failure.
int ConnectFrom(const char* local_ip, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, local_ip, &local.sin_addr);
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) !=
          0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A client whose connection comes from `local_ip`.
std::unique_ptr<Client> ClientFrom(const char* local_ip, int port) {
  const int fd = ConnectFrom(local_ip, port);
  EXPECT_GE(fd, 0) << "connect from " << local_ip;
  if (fd < 0) return nullptr;
  return std::make_unique<Client>(
      grpc::CreateInsecureChannelFromFd("fair-share-test", fd),
      ClientOptions{});
}

// ---------------------------------------------------------------------------
// Stream slots per peer.

class StreamsPerPeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    // 64 MiB: far more than flow control lets through to a client that has
    // stopped reading, so its stream stays open.
    WriteSparseSafetensors(
        dir_ + "/big.safetensors",
        R"({"w":{"dtype":"F32","shape":[4096,4096],"data_offsets":[0,67108864]}})",
        int64_t{1} << 26);
    WriteFile(dir_ + "/small.safetensors",
              BuildSafetensors({{"s", "I8", {3}, "abc"}}));
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.roots = {dir_};
    o.workers = 2;
    o.limits.max_streams_per_peer = 3;
    o.limits.max_idle_write_seconds = 0;  // the stalled readers stay
    auto s = TensormorphServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }

  // A reader on its own connection from 127.0.0.1 that takes one chunk,
  // then stops reading until released.
  std::unique_ptr<StalledReader> Stall() {
    v1::ReadSliceRequest req;
    req.set_checkpoint("big.safetensors");
    req.set_tensor("w");
    req.set_mode(v1::OUTPUT_MODE_RAW);
    return StalledReader::Start(ClientFrom("127.0.0.1", server_->port()), req);
  }

  static absl::Status ReadSmall(Client& c) {
    v1::ReadSliceRequest req;
    req.set_checkpoint("small.safetensors");
    req.set_tensor("s");
    return c.ReadSliceAll(req).status();
  }

  std::string dir_;
  std::unique_ptr<TensormorphServer> server_;
};

TEST_F(StreamsPerPeerTest, APeerAtItsCapIsRefusedWhileAnotherPeerGetsAStream) {
  // Three connections from one host: one peer, at its cap of 3.
  std::vector<std::unique_ptr<StalledReader>> held;
  for (int i = 0; i < 3; ++i) held.push_back(Stall());
  for (auto& r : held) r->WaitForFirstChunk();
  ASSERT_EQ(server_->state().stream_slots.held_by("ipv4:127.0.0.1"), 3);

  // A fourth connection from the same host: refused, naming the cap.
  std::unique_ptr<Client> same_host = ClientFrom("127.0.0.1", server_->port());
  EXPECT_THAT(ReadSmall(*same_host),
              AllOf(HasReason(ErrorReason::kLimitExceeded),
                    HasMetadata("limit", "max_streams_per_peer"),
                    HasMetadata("limit_value", "3")));
  // A listing counts against the same cap.
  EXPECT_THAT(same_host->ListTensors("small.safetensors").status(),
              AllOf(HasReason(ErrorReason::kLimitExceeded),
                    HasMetadata("limit", "max_streams_per_peer")));
  // Unary calls are not streams: still served.
  EXPECT_TRUE(same_host->GetCheckpoint("small.safetensors").ok());

  // Another address is another peer: it gets its streams.
  std::unique_ptr<Client> other = ClientFrom("127.0.0.2", server_->port());
  EXPECT_TRUE(ReadSmall(*other).ok());
  EXPECT_TRUE(other->ListTensors("small.safetensors").ok());

  // The held streams end: the slots come back to their peer.
  for (auto& r : held) r->Release();
  ASSERT_TRUE(server_->state().metrics.WaitForIdle(absl::Seconds(20)));
  EXPECT_EQ(server_->state().stream_slots.total(), 0);
  EXPECT_EQ(server_->state().admitted_streams.load(), 0);
  EXPECT_TRUE(ReadSmall(*same_host).ok());
}

// A stream's slot goes back before its client hears the end: a client
// that reads streams one after another is never refused for the slots of
// those it already finished, at a cap of one.
TEST(StreamsInSequenceTest, NeverFindTheirOwnFinishedStreamsHoldingSlots) {
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/s.safetensors",
            BuildSafetensors({{"w", "F32", {64}, std::string(256, '\0')}}));
  ServerProcess s({dir}, {"--max-streams-per-peer", "1"});
  auto client = *Client::Connect(s.address());
  v1::ReadSliceRequest r;
  r.set_checkpoint("s.safetensors");
  r.set_tensor("w");
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(client->ReadSliceAll(r).ok()) << i;
    v1::ListCheckpointsRequest l;
    ASSERT_TRUE(client
                    ->ListCheckpoints(
                        l, [](const v1::CheckpointEntry&) { return true; })
                    .ok())
        << i;
  }
}

// Calls through the HTTP gateway are counted under the HTTP client's
// address, not the gateway's in-process channel: one web user holding its
// streams leaves another theirs.
TEST(HttpStreamsPerPeerTest, EachHttpClientHasItsOwnShare) {
  const std::string dir = MakeTempDir();
  WriteSparseSafetensors(
      dir + "/big.safetensors",
      R"({"w":{"dtype":"F32","shape":[8192,4096],"data_offsets":[0,134217728]}})",
      int64_t{1} << 27);
  ServerProcess s(
      {dir}, {"--max-streams-per-peer", "1", "--http-listen", "127.0.0.1:0"});
  const std::string get =
      "GET /v1/tensor.npy?checkpoint=big.safetensors&tensor=w HTTP/1.1\r\n"
      "Host: 127.0.0.1\r\nConnection: close\r\n\r\n";
  // 128 MiB nobody reads: the gateway's stream stays open, holding the
  // one slot of 127.0.0.2.
  testing::HeldResponse held(s.http_port(), get, "127.0.0.2");
  ASSERT_EQ(held.head().status, 200);
  // Another HTTP client, another peer: served.
  testing::HeldResponse other(s.http_port(), get, "127.0.0.1");
  EXPECT_EQ(other.head().status, 200);
  // The same one again: past its share.
  testing::HeldResponse again(s.http_port(), get, "127.0.0.2");
  EXPECT_EQ(again.head().status, 429);
}

TEST_F(StreamsPerPeerTest, MetricsShowEachLaneAndTheRefusalsByLimit) {
  std::vector<std::unique_ptr<StalledReader>> held;
  for (int i = 0; i < 3; ++i) held.push_back(Stall());
  for (auto& r : held) r->WaitForFirstChunk();
  std::unique_ptr<Client> same_host = ClientFrom("127.0.0.1", server_->port());
  ASSERT_FALSE(ReadSmall(*same_host).ok());
  ASSERT_TRUE(same_host->GetCheckpoint("small.safetensors").ok());

  // The stalled streams' chunks count as in flight from when a worker has
  // read them until gRPC reports them written; between one chunk's
  // completion and the next chunk's read (a worker's turn, slow under load)
  // the gauge may read 0. Once a client's window is full, a write stays in
  // flight for good: scraped until then.
  absl::StatusOr<PrometheusScrape> s;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  do {
    s = ParsePrometheusText(PrometheusText(server_->state()));
    ASSERT_TRUE(s.ok()) << s.status();
    if (s->Value("tensormorph_reply_bytes_in_flight").value_or(0) > 0) break;
    absl::SleepFor(absl::Milliseconds(10));
  } while (absl::Now() < deadline);
  for (const char* lane : {"unary", "stream", "background"}) {
    EXPECT_TRUE(s->Value("tensormorph_worker_queue_depth", {{"lane", lane}})
                    .has_value())
        << lane;
    EXPECT_TRUE(s->Value("tensormorph_worker_queue_wait_seconds_count",
                         {{"lane", lane}})
                    .has_value())
        << lane;
  }
  EXPECT_GE(s->Value("tensormorph_worker_queue_wait_seconds_count",
                     {{"lane", "stream"}})
                .value_or(0),
            3);  // the three readers' first chunks at least
  EXPECT_EQ(s->Value("tensormorph_fair_share_refusals_total",
                     {{"limit", "max_streams_per_peer"}}),
            1);
  EXPECT_EQ(s->Value("tensormorph_stream_slots_held"), 3);
  // Two chunks at most per stalled stream (one in flight, one ready), and
  // the GetCheckpoint reply's few bytes until gRPC reports it done (which
  // may come after its client has it).
  EXPECT_GT(s->Value("tensormorph_reply_bytes_in_flight").value_or(0), 0);
  EXPECT_LE(s->Value("tensormorph_reply_bytes_in_flight").value_or(0),
            3 * 2 * kMiB + 4096);
  for (auto& r : held) r->Release();
  ASSERT_TRUE(server_->state().metrics.WaitForIdle(absl::Seconds(20)));
  EXPECT_EQ(server_->state().reply_bytes.total(), 0);
}

// ---------------------------------------------------------------------------
// The reply budget, through a live tensormorphd.

// An HTTP/2 client written by hand that announces a receive window of 0 and
// never reads after the handshake: whatever the server answers stays with
// the server. Each request is a unary gRPC call on its own stream.
class UnreadingH2Client {
 public:
  // Connects from `local_ip` and exchanges SETTINGS (one read: the server's
  // SETTINGS, then this side's ACK, so the server never times it out).
  bool Connect(const char* local_ip, int port) {
    fd_ = ConnectFrom(local_ip, port);
    if (fd_ < 0) return false;
    std::string out = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    // SETTINGS: INITIAL_WINDOW_SIZE (0x4) = 0.
    const std::string settings("\x00\x04\x00\x00\x00\x00", 6);
    AppendFrame(0x4, 0, 0, settings, &out);
    if (!SendAll(out)) return false;
    while (true) {
      char header[9];
      if (!ReadAll(header, 9)) return false;
      const uint32_t len = (uint8_t(header[0]) << 16) |
                           (uint8_t(header[1]) << 8) | uint8_t(header[2]);
      std::string payload(len, '\0');
      if (len > 0 && !ReadAll(payload.data(), len)) return false;
      if (header[3] == 0x4 && (header[4] & 0x1) == 0) break;
    }
    std::string ack;
    AppendFrame(0x4, 0x1, 0, "", &ack);
    return SendAll(ack);
  }

  // Sends one unary call of `method` ("/pkg.Service/Method") with `request`.
  bool Call(const std::string& method, const std::string& request) {
    std::string block;
    for (const auto& [name, value] :
         std::vector<std::pair<std::string, std::string>>{
             {":method", "POST"},
             {":scheme", "http"},
             {":path", method},
             {":authority", "localhost"},
             {"content-type", "application/grpc"},
             {"te", "trailers"}}) {
      // Literal header field without indexing, new name, no Huffman.
      block.push_back('\0');
      block.push_back(static_cast<char>(name.size()));
      block += name;
      block.push_back(static_cast<char>(value.size()));
      block += value;
    }
    std::string message(5, '\0');  // uncompressed, 4-byte big-endian length
    for (int i = 0; i < 4; ++i) {
      message[1 + i] = static_cast<char>(request.size() >> (24 - 8 * i));
    }
    message += request;
    std::string out;
    AppendFrame(0x1, 0x4, next_stream_, block, &out);    // END_HEADERS
    AppendFrame(0x0, 0x1, next_stream_, message, &out);  // END_STREAM
    next_stream_ += 2;
    return SendAll(out);
  }

  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  ~UnreadingH2Client() { Close(); }

 private:
  static void AppendFrame(uint8_t type, uint8_t flags, uint32_t stream,
                          const std::string& payload, std::string* out) {
    const uint32_t len = static_cast<uint32_t>(payload.size());
    const char header[9] = {
        static_cast<char>(len >> 16),    static_cast<char>(len >> 8),
        static_cast<char>(len),          static_cast<char>(type),
        static_cast<char>(flags),        static_cast<char>(stream >> 24),
        static_cast<char>(stream >> 16), static_cast<char>(stream >> 8),
        static_cast<char>(stream)};
    out->append(header, 9);
    *out += payload;
  }
  bool SendAll(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n =
          ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }
  bool ReadAll(char* buf, size_t len) {
    size_t done = 0;
    while (done < len) {
      const ssize_t n = ::recv(fd_, buf + done, len - done, 0);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  int fd_ = -1;
  uint32_t next_stream_ = 1;
};

class ReplyBudgetTest : public ::testing::Test {
 protected:
  // F32 [2048, 1024]: a heatmap of one cell per element is 2^21 cells, the
  // most one call may ask for; its reply (a double and a group id of -1 per
  // cell) is about 36 MiB on the wire.
  static constexpr int kRows = 2048, kCols = 1024;
  static constexpr int64_t kPeerBudget = 160 * kMiB;
  static constexpr int kWorkers = 2;

  void SetUp() override {
    dir_ = MakeTempDir();
    WriteSparseSafetensors(
        dir_ + "/heat.safetensors",
        absl::StrCat(R"({"w":{"dtype":"F32","shape":[)", kRows, ",", kCols,
                     R"(],"data_offsets":[0,)", int64_t{4} * kRows * kCols,
                     "]}}"),
        int64_t{4} * kRows * kCols);
    server_ = std::make_unique<ServerProcess>(
        std::vector<std::string>{dir_},
        std::vector<std::string>{"--workers", std::to_string(kWorkers),
                                 "--max-reply-bytes-per-peer",
                                 absl::StrCat(kPeerBudget),
                                 "--max-reply-bytes-in-flight", "1GiB",  //
                                 "--http-listen", "127.0.0.1:0"});
    http_ =
        std::make_unique<httplib::Client>("127.0.0.1", server_->http_port());
    bystander_ = *Client::Connect(server_->address());
  }

  static v1::GetHeatmapRequest MaxHeatmap() {
    v1::GetHeatmapRequest req;
    req.set_checkpoint("heat.safetensors");
    req.set_tensor("w");
    req.set_mode(v1::HEATMAP_MODE_MEAN);
    req.set_width(kCols);
    req.set_height(kRows);
    return req;
  }

  PrometheusScrape Scrape() {
    httplib::Result r = http_->Get("/metrics");
    EXPECT_TRUE(r && r->status == 200);
    if (!r) return {};
    absl::StatusOr<PrometheusScrape> scrape = ParsePrometheusText(r->body);
    EXPECT_TRUE(scrape.ok()) << scrape.status();
    return scrape.ok() ? *std::move(scrape) : PrometheusScrape{};
  }

  // Scrapes until `done` holds, for up to 60 s; the last scrape.
  PrometheusScrape ScrapeWhen(
      const std::function<bool(const PrometheusScrape&)>& done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    PrometheusScrape scrape = Scrape();
    while (!done(scrape) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
      scrape = Scrape();
    }
    return scrape;
  }

  static double Refused(const PrometheusScrape& s, const std::string& limit) {
    return s.Value("tensormorph_fair_share_refusals_total", {{"limit", limit}})
        .value_or(-1);
  }
  static double InFlight(const PrometheusScrape& s) {
    return s.Value("tensormorph_reply_bytes_in_flight").value_or(-1);
  }

  int64_t RssMiB() const {
    return ProcStatusKb(server_->pid(), "VmRSS") / 1024;
  }

  // Small calls a bystander on another address makes; each must succeed.
  void BystanderCalls() {
    v1::GetHeatmapRequest small = MaxHeatmap();
    small.set_width(64);
    small.set_height(64);
    auto heatmap = bystander_->GetHeatmap(small);
    EXPECT_TRUE(heatmap.ok()) << heatmap.status();
    auto info = bystander_->GetCheckpoint("heat.safetensors");
    EXPECT_TRUE(info.ok()) << info.status();
  }

  std::string dir_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<httplib::Client> http_;
  std::unique_ptr<Client> bystander_;
};

TEST_F(ReplyBudgetTest, ThirtyUnreadMaxSizeRepliesHoldOnlyThePeersBudget) {
  // The bystander once takes a max-size reply itself: the baseline has seen
  // one (the allocator's and gRPC's first-use growth are not the attack's).
  auto warm = bystander_->GetHeatmap(MaxHeatmap());
  ASSERT_TRUE(warm.ok()) << warm.status();
  BystanderCalls();
  const int64_t baseline = RssMiB();

  UnreadingH2Client attacker;
  ASSERT_TRUE(attacker.Connect("127.0.0.2", server_->port()));
  const std::string request = MaxHeatmap().SerializeAsString();
  constexpr int kCalls = 30;
  for (int i = 0; i < kCalls; ++i) {
    ASSERT_TRUE(
        attacker.Call("/tensormorph.v1.Tensormorph/GetHeatmap", request));
  }
  // Each reply is counted twice its size (the message and its
  // serialization), about 72 MiB: two fit in 160 MiB, the other 28 are
  // refused, before their work when the budget is full, after it when the
  // reply would not fit.
  PrometheusScrape s = ScrapeWhen([](const PrometheusScrape& s) {
    return Refused(s, "max_reply_bytes_per_peer") >= kCalls - 2;
  });
  EXPECT_EQ(Refused(s, "max_reply_bytes_per_peer"), kCalls - 2);
  EXPECT_GT(InFlight(s), 0);
  EXPECT_LE(InFlight(s), kPeerBudget);
  BystanderCalls();  // another peer: served meanwhile

  // What the server holds now: the peer's budget, and slack for what is
  // not counted (gRPC's frames, the allocator's rounding).
  [[maybe_unused]] constexpr int64_t kSlackMiB = 64;
  const int64_t held = RssMiB();
  // Resident memory is the allocator's to tell, and ASan's quarantine holds
  // what was freed: under it the accounting above is what is checked.
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_LE(held - baseline, kPeerBudget / kMiB + kSlackMiB)
      << "baseline " << baseline << " MiB, with the unread replies " << held
      << " MiB";
#endif
  // At its peak it also held the replies its workers built before they
  // were refused, one per worker at a time.
  const int64_t peak = ProcStatusKb(server_->pid(), "VmHWM") / 1024;
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_LE(peak - baseline, kPeerBudget / kMiB + kWorkers * 72 + kSlackMiB)
      << "baseline " << baseline << " MiB, peak " << peak << " MiB";
#endif

  // The client goes: its replies are dropped, their bytes given back, and
  // the memory returns to near the baseline.
  attacker.Close();
  s = ScrapeWhen([](const PrometheusScrape& s) { return InFlight(s) == 0; });
  EXPECT_EQ(InFlight(s), 0);
  BystanderCalls();
  // The heap is given back a moment after the last reply goes (once gRPC
  // has freed its slices; the server trims at 0.1, 2 and 8 s): watch for
  // it, for up to 20 s.
  int64_t after = RssMiB();
#if !defined(__SANITIZE_ADDRESS__)
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (after - baseline > 32 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    after = RssMiB();
  }
  EXPECT_LE(after - baseline, 32)
      << "baseline " << baseline << " MiB, after the client went " << after
      << " MiB";
#endif
  std::printf(
      "RSS: baseline %lld MiB, 30 unread replies %lld MiB, peak %lld "
      "MiB, after the client went %lld MiB\n",
      static_cast<long long>(baseline), static_cast<long long>(held),
      static_cast<long long>(peak), static_cast<long long>(after));
}

}  // namespace
}  // namespace tensormorph
