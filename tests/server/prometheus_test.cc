// What GET /metrics serves, against a real server on a loopback port: every
// call counted by method and the status its client saw (refused, cancelled
// and timed-out calls included), its duration in a histogram, the bytes
// streamed, the checkpoints held, the process's memory; all of it text a
// strict parser of the exposition format accepts.
#include "server/prometheus.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <sys/stat.h>

#include <chrono>
#include <functional>
#include <future>
#include <string>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/support/loopback_server.h"
#include "tests/support/prometheus_text.h"
#include "tests/support/reflection_call.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph::prometheus_test {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::Bytes;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::ParsePrometheusText;
using ::tensormorph::testing::PrometheusLabels;
using ::tensormorph::testing::PrometheusScrape;
using ::tensormorph::testing::StartLoopbackServer;
using ::tensormorph::testing::WriteFile;
using ::tensormorph::testing::WriteSparseSafetensors;
using ::testing::AllOf;
using ::testing::Optional;

// A directory with m.safetensors: "w", F32 [64, 64] (16 KiB of data).
std::string Root() {
  const std::string dir = MakeTempDir();
  std::vector<float> w(64 * 64);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  WriteFile(dir + "/m.safetensors",
            BuildSafetensors({{"w", "F32", {64, 64}, Bytes(w)}}));
  return dir;
}

uint64_t FileSize(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return static_cast<uint64_t>(st.st_size);
}

PrometheusScrape Scrape(const ServiceState& state) {
  absl::StatusOr<PrometheusScrape> scrape =
      ParsePrometheusText(PrometheusText(state));
  EXPECT_TRUE(scrape.ok()) << scrape.status();
  return scrape.ok() ? *std::move(scrape) : PrometheusScrape{};
}

// Calls are counted when the server sees them closed, which may be a moment
// after their client has its status: scrapes until `done` holds, for up to
// 10 s (then returns the last scrape, for the assertions to explain).
PrometheusScrape ScrapeWhen(
    const ServiceState& state,
    const std::function<bool(const PrometheusScrape&)>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  PrometheusScrape scrape = Scrape(state);
  while (!done(scrape) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
    scrape = Scrape(state);
  }
  return scrape;
}

double Calls(const PrometheusScrape& s, const std::string& method,
             const std::string& code) {
  return s
      .Value("tensormorph_calls_total", {{"method", method}, {"code", code}})
      .value_or(0);
}

double AllCalls(const PrometheusScrape& s) {
  return s.Sum("tensormorph_calls_total");
}

TEST(PrometheusTest, CountsEachCallByMethodAndTheStatusItsClientSaw) {
  const std::string root = Root();
  testing::LoopbackServer lb = StartLoopbackServer({root});
  ServiceState& state = lb.server->state();

  EXPECT_TRUE(lb.client->GetCheckpoint("m.safetensors").ok());
  EXPECT_TRUE(lb.client->GetCheckpoint("m.safetensors").ok());
  EXPECT_THAT(lb.client->GetCheckpoint("missing.safetensors"),
              AllOf(HasReason(ErrorReason::kCheckpointNotFound),
                    HasMetadata("checkpoint", "missing.safetensors")));
  EXPECT_THAT(lb.client->GetTensor("m.safetensors", ""),
              HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(lb.client->GetTensor("m.safetensors", "nope"),
              AllOf(HasReason(ErrorReason::kTensorNotFound),
                    HasMetadata("tensor", "nope")));

  const PrometheusScrape s =
      ScrapeWhen(state, [](const auto& s) { return AllCalls(s) >= 5; });
  EXPECT_EQ(Calls(s, "GetCheckpoint", "OK"), 2);
  EXPECT_EQ(Calls(s, "GetCheckpoint", "NOT_FOUND"), 1);
  EXPECT_EQ(Calls(s, "GetTensor", "INVALID_ARGUMENT"), 1);
  EXPECT_EQ(Calls(s, "GetTensor", "NOT_FOUND"), 1);
  EXPECT_EQ(AllCalls(s), 5);
  // Only codes that happened are series.
  EXPECT_EQ(s.Value("tensormorph_calls_total",
                    {{"method", "GetTensor"}, {"code", "OK"}}),
            std::nullopt);

  // One duration per call, in the method's histogram (the parser has
  // checked that its buckets are cumulative and end at +Inf = _count).
  EXPECT_THAT(s.Value("tensormorph_call_duration_seconds_count",
                      {{"method", "GetCheckpoint"}}),
              Optional(3.0));
  EXPECT_THAT(s.Value("tensormorph_call_duration_seconds_bucket",
                      {{"method", "GetTensor"}, {"le", "+Inf"}}),
              Optional(2.0));
  EXPECT_THAT(s.Value("tensormorph_call_duration_seconds_bucket",
                      {{"method", "GetTensor"}, {"le", "60"}}),
              Optional(2.0));
  // Bounds are spelled as Prometheus's own clients spell them (le values
  // are matched as text when series from several servers are joined).
  for (const char* le : {"0.0001", "0.00025", "0.0005", "1", "2.5", "60"}) {
    EXPECT_TRUE(s.Value("tensormorph_call_duration_seconds_bucket",
                        {{"method", "GetTensor"}, {"le", le}})
                    .has_value())
        << le;
  }
  EXPECT_GT(*s.Value("tensormorph_call_duration_seconds_sum",
                     {{"method", "GetCheckpoint"}}),
            0);
  EXPECT_EQ(s.families.at("tensormorph_calls_total").type, "counter");
  EXPECT_EQ(s.families.at("tensormorph_call_duration_seconds").type,
            "histogram");
}

TEST(PrometheusTest, BytesStreamedGrowByWhatAReadSliceReturned) {
  const std::string root = Root();
  testing::LoopbackServer lb = StartLoopbackServer({root});
  ServiceState& state = lb.server->state();
  const PrometheusScrape before = Scrape(state);

  v1::ReadSliceRequest req;
  req.set_checkpoint("m.safetensors");
  req.set_tensor("w");
  req.set_max_chunk_bytes(4096);  // 4 chunks
  absl::StatusOr<SliceData> slice = lb.client->ReadSliceAll(req);
  ASSERT_TRUE(slice.ok()) << slice.status();
  ASSERT_EQ(slice->bytes.size(), 64u * 64 * 4);

  const PrometheusScrape after = ScrapeWhen(
      state, [](const auto& s) { return Calls(s, "ReadSlice", "OK") >= 1; });
  EXPECT_EQ(Calls(after, "ReadSlice", "OK"), 1);
  EXPECT_GE(*after.Value("tensormorph_stream_bytes_total") -
                *before.Value("tensormorph_stream_bytes_total"),
            static_cast<double>(slice->bytes.size()));
  EXPECT_GE(*after.Value("tensormorph_stream_chunks_total") -
                *before.Value("tensormorph_stream_chunks_total"),
            4);
  EXPECT_THAT(after.Value("tensormorph_streams_started_total"), Optional(1.0));
  EXPECT_EQ(after.families.at("tensormorph_stream_bytes_total").type,
            "counter");
  ASSERT_TRUE(state.metrics.WaitForIdle(absl::Seconds(10)));
  EXPECT_THAT(Scrape(state).Value("tensormorph_streams_active"), Optional(0.0));
}

TEST(PrometheusTest, ReportsTheCheckpointsHeldAndTheProcess) {
  const std::string root = Root();
  testing::LoopbackServer lb = StartLoopbackServer({root});
  ServiceState& state = lb.server->state();
  ASSERT_TRUE(lb.client->GetCheckpoint("m.safetensors").ok());

  const PrometheusScrape s = Scrape(state);
  EXPECT_GE(*s.Value("tensormorph_open_checkpoints"), 1);
  EXPECT_GE(*s.Value("tensormorph_mapped_bytes"),
            static_cast<double>(FileSize(root + "/m.safetensors")));
  EXPECT_GE(*s.Value("tensormorph_checkpoint_opens_total"), 1);
  EXPECT_EQ(s.families.at("tensormorph_mapped_bytes").type, "gauge");

  EXPECT_GT(*s.Value("process_resident_memory_bytes"), 0);
  EXPECT_GE(*s.Value("process_virtual_memory_bytes"),
            *s.Value("process_resident_memory_bytes"));
  EXPECT_GT(*s.Value("process_open_fds"), 0);
  EXPECT_GE(*s.Value("process_cpu_seconds_total"), 0);
  const double now = static_cast<double>(absl::ToUnixSeconds(absl::Now()));
  EXPECT_GT(*s.Value("process_start_time_seconds"), now - 24 * 3600);
  EXPECT_LE(*s.Value("process_start_time_seconds"), now + 1);
  EXPECT_EQ(s.families.at("process_cpu_seconds_total").type, "counter");

  ASSERT_EQ(s.Sum("tensormorph_build_info"), 1);
  bool versioned = false;
  for (const auto& sample : s.samples) {
    if (sample.name != "tensormorph_build_info") continue;
    versioned = !sample.labels.at("version").empty();
  }
  EXPECT_TRUE(versioned);
}

TEST(PrometheusTest, CountsCallsTheAuthInterceptorRefused) {
  const std::string root = Root();
  const std::string tokens = MakeTempDir() + "/tokens";
  WriteFile(tokens, "secret-one\n");
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.roots = {root};
  o.token_file = tokens;
  auto server = TensormorphServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = absl::StrCat("127.0.0.1:", (*server)->port());

  auto anonymous = Client::Connect(address, {});
  ASSERT_TRUE(anonymous.ok());
  EXPECT_THAT((*anonymous)->GetCheckpoint("m.safetensors"),
              HasReason(ErrorReason::kUnauthenticated));
  ClientOptions with_token;
  with_token.token = "secret-one";
  auto allowed = Client::Connect(address, with_token);
  ASSERT_TRUE(allowed.ok());
  EXPECT_TRUE((*allowed)->GetCheckpoint("m.safetensors").ok());

  const PrometheusScrape s = ScrapeWhen(
      (*server)->state(), [](const auto& s) { return AllCalls(s) >= 2; });
  EXPECT_EQ(Calls(s, "GetCheckpoint", "UNAUTHENTICATED"), 1);
  EXPECT_EQ(Calls(s, "GetCheckpoint", "OK"), 1);
  EXPECT_EQ(AllCalls(s), 2);
}

// 256 MiB of F32 in a sparse file: far more than one chunk, and more than
// the transport buffers, so a stream of it is still running when it ends.
std::string BigRoot() {
  const std::string dir = MakeTempDir();
  WriteSparseSafetensors(
      dir + "/big.safetensors",
      R"({"big":{"dtype":"F32","shape":[8192,8192],"data_offsets":[0,268435456]}})",
      int64_t{256} << 20);
  return dir;
}

TEST(PrometheusTest, CountsAStreamItsClientCancelledAsCancelled) {
  testing::LoopbackServer lb = StartLoopbackServer({BigRoot()});
  v1::ReadSliceRequest req;
  req.set_checkpoint("big.safetensors");
  req.set_tensor("big");
  EXPECT_THAT(
      lb.client->ReadSlice(req,
                           [](const v1::SliceChunk&) {
                             return false;  // cancel after the first chunk
                           }),
      HasReason(ErrorReason::kCancelled));

  const PrometheusScrape s = ScrapeWhen(
      lb.server->state(), [](const auto& s) { return AllCalls(s) >= 1; });
  EXPECT_EQ(Calls(s, "ReadSlice", "CANCELLED"), 1);
  EXPECT_EQ(AllCalls(s), 1);
  ASSERT_TRUE(lb.server->state().metrics.WaitForIdle(absl::Seconds(30)));
  EXPECT_THAT(
      Scrape(lb.server->state()).Value("tensormorph_streams_cancelled_total"),
      Optional(1.0));
}

TEST(PrometheusTest, CountsAStreamPastItsDeadlineAsDeadlineExceeded) {
  ClientOptions copts;
  copts.timeout = absl::Milliseconds(300);
  testing::LoopbackServer lb = StartLoopbackServer({BigRoot()}, 0, copts);
  v1::ReadSliceRequest req;
  req.set_checkpoint("big.safetensors");
  req.set_tensor("big");
  // A slow reader: the deadline passes long before 256 MiB arrive.
  EXPECT_THAT(lb.client->ReadSlice(req,
                                   [](const v1::SliceChunk&) {
                                     absl::SleepFor(absl::Milliseconds(50));
                                     return true;
                                   }),
              HasReason(ErrorReason::kDeadlineExceeded));

  const PrometheusScrape s = ScrapeWhen(
      lb.server->state(), [](const auto& s) { return AllCalls(s) >= 1; });
  EXPECT_EQ(Calls(s, "ReadSlice", "DEADLINE_EXCEEDED"), 1);
  EXPECT_EQ(AllCalls(s), 1);
}

// A unary call of `method` over a generic stub (no such method in our API).
grpc::Status CallRaw(const std::string& address, const std::string& method) {
  auto channel =
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice empty("", 0);
  grpc::ByteBuffer request(&empty, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(std::move(s)); });
  return done.get_future().get();
}

TEST(PrometheusTest, CountsUnknownMethodsWithoutLettingClientsNameSeries) {
  testing::LoopbackServer lb = StartLoopbackServer({Root()});
  EXPECT_EQ(CallRaw(lb.address, "/tensormorph.v1.Tensormorph/NoSuchMethod")
                .error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  // Not a proto identifier: a client-chosen label value is never exposed.
  EXPECT_EQ(CallRaw(lb.address, "/x/bad-name").error_code(),
            grpc::StatusCode::UNIMPLEMENTED);

  const PrometheusScrape s = ScrapeWhen(
      lb.server->state(), [](const auto& s) { return AllCalls(s) >= 2; });
  EXPECT_EQ(Calls(s, "NoSuchMethod", "UNIMPLEMENTED"), 1);
  EXPECT_EQ(Calls(s, "(other)", "UNIMPLEMENTED"), 1);
  EXPECT_EQ(AllCalls(s), 2);
}

// Reflection's bidi stream (a synchronous service in gRPC, unlike ours):
// lists the services, then ends the stream, or with `cancel` cancels it.
grpc::Status Reflect(const std::string& address, bool cancel) {
  return testing::ListServicesByReflection(address, "", cancel).status;
}

TEST(PrometheusTest, CountsTheCallsOfHealthAndReflectionToo) {
  testing::LoopbackServer lb = StartLoopbackServer({Root()});
  EXPECT_EQ(CallRaw(lb.address, "/grpc.health.v1.Health/Check").error_code(),
            grpc::StatusCode::OK);
  EXPECT_EQ(Reflect(lb.address, /*cancel=*/false).error_code(),
            grpc::StatusCode::OK);
  EXPECT_EQ(Reflect(lb.address, /*cancel=*/true).error_code(),
            grpc::StatusCode::CANCELLED);

  const PrometheusScrape s = ScrapeWhen(
      lb.server->state(), [](const auto& s) { return AllCalls(s) >= 3; });
  EXPECT_EQ(Calls(s, "Check", "OK"), 1);
  EXPECT_EQ(Calls(s, "ServerReflectionInfo", "OK"), 1);
  EXPECT_EQ(Calls(s, "ServerReflectionInfo", "CANCELLED"), 1);
  EXPECT_EQ(AllCalls(s), 3);
}

TEST(PrometheusTest, EscapesLabelValuesAsTheFormatSays) {
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  // And the parser reads them back.
  auto scrape = ParsePrometheusText(absl::StrCat(
      "# TYPE x gauge\nx{v=\"", EscapeLabelValue("a\"b\\c\nd é"), "\"} 1\n"));
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  EXPECT_THAT(scrape->Value("x", {{"v", "a\"b\\c\nd é"}}), Optional(1.0));
}

}  // namespace
}  // namespace tensormorph::prometheus_test
