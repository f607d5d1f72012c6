// tensormorphd's HTTP port, as a browser, curl or a dashboard meets it: the
// real tensormorphd with --http-listen on loopback, a real HTTP client, and
// every reply parsed back into its protobuf type.
#include "server/http/http_gateway.h"

#include <arpa/inet.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/util/json_util.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "client/client.h"
#include "core/util/error_reason.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/http/web_assets.h"
#include "tensormorph/v1/tensormorph.grpc.pb.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/npy_reader.h"
#include "tests/support/process.h"
#include "tests/support/prometheus_text.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_ca.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::DemoDir;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::ReadNpy;
using ::tensormorph::testing::ServerProcess;
using ::tensormorph::testing::TestCaFile;
using ::tensormorph::testing::WriteFile;
using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr char kQ8[] = "model-q8_0.gguf";
constexpr char kQ8Tensor[] = "blk.0.attn_q.weight";

const google::protobuf::ServiceDescriptor& Service() {
  return *google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      v1::Tensormorph::service_full_name());
}

// `json` parsed as a message of `type`, strictly (an unknown field fails).
::testing::AssertionResult ParsesAs(const std::string& json,
                                    const google::protobuf::Descriptor* type) {
  google::protobuf::DynamicMessageFactory factory;
  std::unique_ptr<google::protobuf::Message> m(
      factory.GetPrototype(type)->New());
  const auto s = google::protobuf::util::JsonStringToMessage(json, m.get());
  if (!s.ok()) {
    return ::testing::AssertionFailure()
           << "not a " << type->full_name() << ": " << s.ToString() << " in "
           << json.substr(0, 300);
  }
  return ::testing::AssertionSuccess();
}

// Writes `request` to the port and returns what comes back, up to the end
// of the reply's headers (or whatever came within `wait_seconds`).
std::string RawExchange(int port, const std::string& request,
                        int wait_seconds = 5) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    timeval tv{wait_seconds, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    for (ssize_t n; reply.find("\r\n\r\n") == std::string::npos &&
                    (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) {
      reply.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return reply;
}

// The reason table's entry of a reason's name.
const ErrorReasonInfo& InfoNamed(absl::string_view name) {
  for (const ErrorReasonInfo& info : ErrorReasonTable()) {
    if (info.name == name) return info;
  }
  ADD_FAILURE() << "no reason " << name;
  return ErrorReasonTable()[0];
}

// grpc-gateway's error body: {"code": <google.rpc.Code>, "message",
// "details": [one google.rpc.ErrorInfo]}, checked whole.
void ExpectErrorBody(const std::string& text, absl::string_view reason) {
  const Json body = Json::parse(text, nullptr, false);
  ASSERT_TRUE(body.is_object()) << text;
  EXPECT_EQ(body.size(), 3u) << text;
  ASSERT_TRUE(body.contains("code") && body["code"].is_number_integer())
      << text;
  EXPECT_EQ(body["code"].get<int>(), static_cast<int>(InfoNamed(reason).code))
      << text;
  EXPECT_TRUE(body.contains("message") && body["message"].is_string()) << text;
  ASSERT_TRUE(body.contains("details") && body["details"].is_array() &&
              body["details"].size() == 1)
      << text;
  const Json& info = body["details"][0];
  EXPECT_EQ(info.value("@type", ""),
            "type.googleapis.com/google.rpc.ErrorInfo");
  EXPECT_EQ(info.value("reason", ""), reason) << text;
  EXPECT_EQ(info.value("domain", ""), "tensormorph.dev");
  EXPECT_TRUE(info.contains("metadata") && info["metadata"].is_object())
      << text;
}

// Where the gateway's server finds the demo's importance matrix (set by
// HttpGatewayTest's suite set-up).
std::string& ImatrixPath() {
  static auto* path = new std::string;
  return *path;
}

class HttpGatewayTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // A second root holds the demo's importance matrix (the demo's own
    // directory holds checkpoints only).
    const std::string imatrix_root = MakeTempDir();
    ::tensormorph::testing::WriteDemoImatrix(imatrix_root + "/imatrix.dat");
    ImatrixPath() = imatrix_root + "/imatrix.dat";
    server_ = new ServerProcess({DemoDir(), imatrix_root},
                                {"--http-listen", "127.0.0.1:0"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static httplib::Client Http() {
    httplib::Client c("127.0.0.1", server_->http_port());
    c.set_read_timeout(60, 0);
    return c;
  }
  static httplib::Result Post(const std::string& method,
                              const std::string& body) {
    return Http().Post(("/v1/" + method).c_str(), body, "application/json");
  }
  static ServerProcess* server_;
};

ServerProcess* HttpGatewayTest::server_ = nullptr;

// A valid request for each method on the demo model.
const std::map<std::string, Json>& Requests() {
  static const auto* requests = new std::map<std::string, Json>{
      {"GetServerInfo", Json::object()},
      {"GetCheckpoint", {{"checkpoint", kQ8}}},
      {"GetTensor", {{"checkpoint", kQ8}, {"tensor", kQ8Tensor}}},
      {"ListTensors", {{"checkpoint", kQ8}}},
      {"ReadSlice",
       {{"checkpoint", kQ8}, {"tensor", kQ8Tensor}, {"slice", "0:2, 0:8"}}},
      {"InspectScalars",
       {{"checkpoint", kQ8},
        {"tensor", kQ8Tensor},
        {"coords", {"3", "17"}},
        {"flatIndices", {0}}}},
      {"QuantDiff",
       {{"checkpoint", kQ8}, {"reference", "source"}, {"filter", "blk.0.*"}}},
      // The report of the QuantDiff above (methods run in the service's
      // order).
      {"GetDiffReport",
       {{"diff",
         {{"checkpoint", kQ8},
          {"reference", "source"},
          {"filter", "blk.0.*"}}}}},
      {"ComputeStats",
       {{"checkpoint", kQ8}, {"tensor", kQ8Tensor}, {"bins", 8}}},
      {"GetHeatmap",
       {{"checkpoint", kQ8},
        {"tensor", kQ8Tensor},
        {"mode", "HEATMAP_MODE_GROUP"},
        {"width", 16},
        {"height", 16}}},
      {"GetArchitecture", {{"checkpoint", kQ8}}},
      {"ListCheckpoints", Json::object()},
      {"CheckCheckpoint", {{"checkpoint", kQ8}}},
      {"ComputeSparsity", {{"checkpoint", kQ8}}},
      {"CompareQuantizations",
       {{"source", "source"},
        {"quantizations", {kQ8, kQ8}},
        {"filter", "model.layers.0.*"}}},  // the source's names
      {"GetImportanceMatrix", {{"path", ImatrixPath()}}},
  };
  return *requests;
}

TEST_F(HttpGatewayTest, EveryRpcAnswersItsResponseTypeInJson) {
  ASSERT_EQ(static_cast<int>(Requests().size()), Service().method_count())
      << "a method of the service has no request in this test";
  for (int i = 0; i < Service().method_count(); ++i) {
    const google::protobuf::MethodDescriptor* m = Service().method(i);
    SCOPED_TRACE(m->name());
    ASSERT_TRUE(Requests().count(m->name()));
    httplib::Result r = Post(m->name(), Requests().at(m->name()).dump());
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    ASSERT_EQ(r->status, 200) << r->body;
    if (!m->server_streaming()) {
      EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
      EXPECT_TRUE(ParsesAs(r->body, m->output_type()));
      continue;
    }
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/x-ndjson");
    const std::vector<std::string> lines =
        absl::StrSplit(r->body, '\n', absl::SkipEmpty());
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(r->body.back(), '\n');
    for (const std::string& line : lines) {
      const Json j = Json::parse(line, nullptr, false);
      ASSERT_TRUE(j.is_object() && j.contains("result") && j.size() == 1)
          << line.substr(0, 200);
      EXPECT_TRUE(ParsesAs(j["result"].dump(), m->output_type()));
    }
  }
}

TEST_F(HttpGatewayTest,
       TheDiffStreamEndsWithItsSummaryAfterProgressAndReports) {
  httplib::Result r = Post("QuantDiff", Requests().at("QuantDiff").dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  int progress = 0, reports = 0;
  Json last;
  for (absl::string_view line :
       absl::StrSplit(r->body, '\n', absl::SkipEmpty())) {
    last = Json::parse(line)["result"];
    progress += last.contains("progress");
    reports += last.contains("tensor");
  }
  EXPECT_GT(progress, 0);
  EXPECT_GT(reports, 0);
  EXPECT_TRUE(last.contains("summary")) << last.dump();
}

// The .npy is the gRPC read, byte for byte, in float32 and raw.
TEST_F(HttpGatewayTest, NpyEqualsTheGrpcReadBitForBit) {
  auto client = Client::Connect(server_->address());
  ASSERT_TRUE(client.ok());
  const std::string dir = MakeTempDir();
  struct Case {
    std::string query, slice;
    bool raw;
  };
  for (const Case& c :
       {Case{"", "", false}, Case{"&slice=1:5,%20::3", "1:5, ::3", false},
        Case{"&raw=1", "", true}}) {
    SCOPED_TRACE(c.query);
    httplib::Result r = Http().Get((std::string("/v1/tensor.npy?checkpoint=") +
                                    kQ8 + "&tensor=" + kQ8Tensor + c.query)
                                       .c_str());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_THAT(r->get_header_value("Content-Disposition"),
                HasSubstr("blk.0.attn_q.weight.npy"));
    WriteFile(dir + "/t.npy", r->body);
    const testing::NpyArray npy = ReadNpy(dir + "/t.npy");
    v1::ReadSliceRequest req;
    req.set_checkpoint(kQ8);
    req.set_tensor(kQ8Tensor);
    req.set_slice(c.slice);
    req.set_mode(c.raw ? v1::OUTPUT_MODE_RAW : v1::OUTPUT_MODE_FLOAT32);
    absl::StatusOr<SliceData> grpc = (*client)->ReadSliceAll(req);
    ASSERT_TRUE(grpc.ok()) << grpc.status();
    EXPECT_EQ(npy.descr, c.raw ? "|u1" : "<f4");
    if (!c.raw) {
      EXPECT_EQ(npy.shape, grpc->shape);
    }
    EXPECT_TRUE(npy.data == grpc->bytes) << "the .npy differs from ReadSlice";
  }
}

// Bodies past 8 KiB go gzip-compressed to clients that accept it, and
// never in brotli (cpp-httplib's runs at quality 11: seconds a heatmap).
TEST_F(HttpGatewayTest, LargeRepliesAreGzippedForClientsThatAcceptItOnly) {
  Json request = Requests().at("GetHeatmap");
  request["width"] = 128;
  request["height"] = 128;
  const std::string body = request.dump();
  httplib::Client plain = Http();
  plain.set_decompress(false);
  httplib::Result identity =
      plain.Post("/v1/GetHeatmap", body, "application/json");
  ASSERT_TRUE(identity && identity->status == 200);
  EXPECT_FALSE(identity->has_header("Content-Encoding"));
  ASSERT_GT(identity->body.size(), 8u << 10);

  httplib::Result br = plain.Post("/v1/GetHeatmap", {{"Accept-Encoding", "br"}},
                                  body, "application/json");
  ASSERT_TRUE(br && br->status == 200);
  EXPECT_FALSE(br->has_header("Content-Encoding"));
  EXPECT_EQ(br->body, identity->body);

  httplib::Result gz =
      plain.Post("/v1/GetHeatmap", {{"Accept-Encoding", "gzip, deflate, br"}},
                 body, "application/json");
  ASSERT_TRUE(gz && gz->status == 200);
  EXPECT_EQ(gz->get_header_value("Content-Encoding"), "gzip");
  EXPECT_LT(gz->body.size(), identity->body.size());
  EXPECT_EQ(gz->body.substr(0, 2), "\x1f\x8b");

  httplib::Client decompressing = Http();  // as a browser: inflates it
  httplib::Result inflated =
      decompressing.Post("/v1/GetHeatmap", {{"Accept-Encoding", "gzip"}}, body,
                         "application/json");
  ASSERT_TRUE(inflated && inflated->status == 200);
  EXPECT_EQ(inflated->body, identity->body);
}

// A resumed download would get the stream's start again under a 206: a
// range is refused, and the answer says ranges are not offered.
TEST_F(HttpGatewayTest, NpyRefusesByteRangesRatherThanSendingTheStartAgain) {
  const std::string path =
      std::string("/v1/tensor.npy?checkpoint=") + kQ8 + "&tensor=" + kQ8Tensor;
  httplib::Result whole = Http().Get(path.c_str());
  ASSERT_TRUE(whole && whole->status == 200);
  EXPECT_EQ(whole->get_header_value("Accept-Ranges"), "none");
  httplib::Result part =
      Http().Get(path.c_str(), {httplib::make_range_header({{200, 299}})});
  ASSERT_TRUE(part);
  EXPECT_EQ(part->status, 416) << part->body.substr(0, 100);
  ExpectErrorBody(part->body, "REQUEST_INVALID");
  // A Range cpp-httplib cannot parse whole (5-2 runs backwards) is refused
  // before any route, and its refusal was cut into the ranges it did parse.
  for (const char* range : {"bytes=-1,0-0,5-2", "bytes=0-0,5-2"}) {
    SCOPED_TRACE(range);
    httplib::Result bad = Http().Get(path.c_str(), {{"Range", range}});
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 416);
    EXPECT_EQ(bad->get_header_value("Content-Type"),
              "application/json; charset=utf-8");
    ExpectErrorBody(bad->body, "REQUEST_INVALID");
  }
}

// The binary heatmap form (docs/http.md), read back as a page reads it:
// the JSON head and each listed array, as doubles.
struct CellsBody {
  Json head;
  std::map<std::string, std::string> dtype;
  std::map<std::string, std::vector<double>> arrays;
};

template <class T>
std::vector<double> ArrayAt(const std::string& body, size_t at, size_t count) {
  std::vector<T> typed(count);
  std::memcpy(typed.data(), body.data() + at, count * sizeof(T));
  return std::vector<double>(typed.begin(), typed.end());
}

::testing::AssertionResult ReadCells(const std::string& body, CellsBody* out) {
  if (body.size() < 4) return ::testing::AssertionFailure() << "too short";
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) {
    n |= static_cast<uint32_t>(static_cast<uint8_t>(body[i])) << (8 * i);
  }
  if ((4 + n) % 8 != 0 || 4 + n > body.size()) {
    return ::testing::AssertionFailure() << "a JSON head of " << n << " bytes";
  }
  out->head = Json::parse(body.substr(4, n), nullptr, false);
  if (!out->head.is_object()) return ::testing::AssertionFailure() << "head";
  for (const Json& a : out->head["arrays"]) {
    const std::string field = a["field"], dtype = a["dtype"];
    const size_t offset = a["offset"], count = a["count"];
    const size_t width = dtype == "<f8" ? 8 : 4;
    if (offset % 8 != 0 || 4 + n + offset + count * width > body.size()) {
      return ::testing::AssertionFailure() << field << " lies outside";
    }
    const size_t at = 4 + n + offset;
    out->dtype[field] = dtype;
    out->arrays[field] = dtype == "<f8"   ? ArrayAt<double>(body, at, count)
                         : dtype == "<f4" ? ArrayAt<float>(body, at, count)
                                          : ArrayAt<int32_t>(body, at, count);
  }
  return ::testing::AssertionSuccess();
}

// Doubles equal, NaN equal to NaN.
bool SameDoubles(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) {
      return false;
    }
  }
  return true;
}

template <class Repeated>
std::vector<double> AsDoubles(const Repeated& r, bool to_float = false) {
  std::vector<double> out;
  for (const auto x : r) {
    out.push_back(to_float ? static_cast<double>(static_cast<float>(x))
                           : static_cast<double>(x));
  }
  return out;
}

// With Accept: application/octet-stream, GetHeatmap answers the gRPC reply
// cell for cell: its small fields as JSON, its per-cell arrays as
// little-endian arrays in the dtypes docs/http.md gives (values rounded to
// float32 only where each cell reduces several elements to a colour: not
// group ids, nor squared errors, whose cells a reader adds up again).
TEST_F(HttpGatewayTest, TheBinaryHeatmapIsTheGrpcReplyCellForCell) {
  auto client = Client::Connect(server_->address());
  ASSERT_TRUE(client.ok());
  struct Case {
    const char* name;
    Json request;
    const char* values_dtype;
  };
  Json base = {{"checkpoint", kQ8}, {"tensor", kQ8Tensor}};
  const auto with = [&](Json extra) {
    Json r = base;
    r.update(extra);
    return r;
  };
  const Case cases[] = {
      {"means of 4 x 4 elements",
       with({{"mode", "HEATMAP_MODE_MEAN"}, {"width", 64}, {"height", 64}}),
       "<f4"},
      {"group ids",
       with({{"mode", "HEATMAP_MODE_GROUP"}, {"width", 64}, {"height", 64}}),
       "<f8"},
      {"single elements",
       with({{"mode", "HEATMAP_MODE_ABSMAX"},
             {"width", 8},
             {"height", 8},
             {"rowBegin", 3},
             {"rowEnd", 11},
             {"colBegin", 5},
             {"colEnd", 13}}),
       "<f8"},
      {"errors located",
       with({{"mode", "HEATMAP_MODE_ERROR"},
             {"reference", "source"},
             {"width", 32},
             {"height", 32},
             {"locate", true}}),
       "<f4"},
      {"zeros against a source",
       with({{"mode", "HEATMAP_MODE_ZEROS"},
             {"reference", "source"},
             {"width", 32},
             {"height", 32}}),
       "<f4"},
      {"squared errors, shares of a sum kept whole",
       with({{"mode", "HEATMAP_MODE_SQ_ERROR"},
             {"reference", "source"},
             {"width", 32},
             {"height", 32}}),
       "<f8"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    httplib::Result r = Http().Post(
        "/v1/GetHeatmap", {{"Accept", "text/html, application/octet-stream"}},
        c.request.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body.substr(0, 300);
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/octet-stream");
    EXPECT_THAT(r->get_header_value("Vary"), HasSubstr("Accept"));
    CellsBody cells;
    ASSERT_TRUE(ReadCells(r->body, &cells));
    ASSERT_TRUE(ParsesAs(cells.head["message"].dump(),
                         v1::GetHeatmapResponse::descriptor()));

    v1::GetHeatmapRequest req;
    ASSERT_TRUE(
        google::protobuf::util::JsonStringToMessage(c.request.dump(), &req)
            .ok());
    absl::StatusOr<v1::GetHeatmapResponse> grpc = (*client)->GetHeatmap(req);
    ASSERT_TRUE(grpc.ok()) << grpc.status();
    v1::GetHeatmapResponse small = *grpc;
    small.clear_values();
    small.clear_groups();
    small.clear_pruned();
    small.clear_cell_element();
    v1::GetHeatmapResponse head;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                    cells.head["message"].dump(), &head)
                    .ok());
    EXPECT_EQ(head.SerializeAsString(), small.SerializeAsString());

    EXPECT_EQ(cells.dtype["values"], c.values_dtype);
    EXPECT_TRUE(SameDoubles(
        cells.arrays["values"],
        AsDoubles(grpc->values(), std::string(c.values_dtype) == "<f4")));
    EXPECT_EQ(cells.dtype["groups"], "<i4");
    EXPECT_TRUE(SameDoubles(cells.arrays["groups"], AsDoubles(grpc->groups())));
    EXPECT_EQ(cells.arrays.count("pruned"), grpc->pruned_size() > 0 ? 1u : 0u);
    if (grpc->pruned_size() > 0) {
      EXPECT_EQ(cells.dtype["pruned"], "<f4");
      EXPECT_TRUE(
          SameDoubles(cells.arrays["pruned"], AsDoubles(grpc->pruned(), true)));
    }
    EXPECT_EQ(cells.arrays.count("cellElement"),
              grpc->cell_element_size() > 0 ? 1u : 0u);
    if (grpc->cell_element_size() > 0) {
      EXPECT_EQ(cells.dtype["cellElement"], "<f8");
      EXPECT_TRUE(SameDoubles(cells.arrays["cellElement"],
                              AsDoubles(grpc->cell_element())));
    }
  }
}

// Only a client that names the binary form gets it: */* and no Accept
// header get JSON, as before it existed.
TEST_F(HttpGatewayTest, OtherClientsOfGetHeatmapStillGetJson) {
  const std::string body = Requests().at("GetHeatmap").dump();
  for (const char* accept : {"", "*/*", "application/json"}) {
    SCOPED_TRACE(accept);
    httplib::Headers headers;
    if (*accept) headers.emplace("Accept", accept);
    httplib::Result r =
        Http().Post("/v1/GetHeatmap", headers, body, "application/json");
    ASSERT_TRUE(r && r->status == 200);
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    EXPECT_TRUE(ParsesAs(r->body, v1::GetHeatmapResponse::descriptor()));
  }
}

// A refusal in the binary form is the API's JSON error body all the same.
TEST_F(HttpGatewayTest, ABinaryHeatmapRefusalIsTheJsonErrorBody) {
  Json request = Requests().at("GetHeatmap");
  request["tensor"] = "nope";
  httplib::Result r =
      Http().Post("/v1/GetHeatmap", {{"Accept", "application/octet-stream"}},
                  request.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  ExpectErrorBody(r->body, "TENSOR_NOT_FOUND");
  request["tensor"] = 7;  // not a string: refused before the call
  r = Http().Post("/v1/GetHeatmap", {{"Accept", "application/octet-stream"}},
                  request.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  ExpectErrorBody(r->body, "REQUEST_INVALID");
}

TEST_F(HttpGatewayTest, TheHeatmapPngIsAPngOfTheRequestedRegion) {
  httplib::Result r =
      Http().Get((std::string("/v1/heatmap.png?checkpoint=") + kQ8 +
                  "&tensor=" + kQ8Tensor + "&mode=group&width=32&height=16")
                     .c_str());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "image/png");
  ASSERT_GT(r->body.size(), 8u);
  EXPECT_EQ(r->body.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
}

struct Refusal {
  std::string name, method, path, body, content_type;
  int status;
  std::string reason;
  std::string named;  // a value the message names: the field, limit or path
};

// A grpc-gateway client reads the reason and its facts from the body, and
// gets them the same from a stream's error line.
TEST_F(HttpGatewayTest, AnErrorBodyCarriesTheReasonAndItsMetadata) {
  httplib::Result r =
      Post("GetTensor", Json{{"checkpoint", kQ8}, {"tensor", "nope"}}.dump());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  ExpectErrorBody(r->body, "TENSOR_NOT_FOUND");
  EXPECT_EQ(Json::parse(r->body)["details"][0]["metadata"],
            (Json{{"checkpoint", kQ8}, {"tensor", "nope"}}));

  httplib::Result slice = Post(
      "ReadSlice",
      Json{{"checkpoint", kQ8}, {"tensor", kQ8Tensor}, {"slice", "0:1,9999"}}
          .dump());
  ASSERT_TRUE(slice);
  EXPECT_EQ(slice->status, 400);
  ExpectErrorBody(slice->body, "SLICE_OUT_OF_RANGE");
  EXPECT_EQ(Json::parse(slice->body)["details"][0]["metadata"]["dimension"],
            "1");
}

// Protobuf's JSON parser takes the last of a field given twice, so
// {"checkpoint": A, "checkpoint": B} was a call on B that a proxy or a log
// reading the first key took for one on A. The body is parsed strictly: a
// field given twice, under one name or both of its names, is refused
// naming it, nested ones by their path; one value twice in a list is not.
TEST_F(HttpGatewayTest, AFieldGivenTwiceIsRefusedNamingIt) {
  for (const auto& [method, body, field] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"GetCheckpoint",
            absl::StrCat(R"({"checkpoint": ")", kQ8,
                         R"(", "checkpoint": "none.gguf"})"),
            "checkpoint"},
           {"GetHeatmap",
            absl::StrCat(R"({"checkpoint": ")", kQ8, R"(", "tensor": ")",
                         kQ8Tensor, R"(", "row_begin": 1, "rowBegin": 2})"),
            "row_begin"},
           {"GetDiffReport",
            absl::StrCat(R"({"diff": {"checkpoint": ")", kQ8,
                         R"(", "reference": "source", "reference": "x"}})"),
            "diff.reference"}}) {
    SCOPED_TRACE(body);
    httplib::Result r = Post(method, body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    ExpectErrorBody(r->body, "REQUEST_INVALID");
    const Json error = Json::parse(r->body, nullptr, false);
    EXPECT_EQ(error["details"][0]["metadata"].value("field", ""), field);
    EXPECT_THAT(error.value("message", ""), HasSubstr("'" + field + "'"));
  }
  httplib::Result list = Post(
      "InspectScalars",
      Json{{"checkpoint", kQ8}, {"tensor", kQ8Tensor}, {"flatIndices", {1, 1}}}
          .dump());
  ASSERT_TRUE(list);
  EXPECT_EQ(list->status, 200) << list->body;
}

// AIP-158: a page_size past the cap is lowered, not refused.
TEST_F(HttpGatewayTest, APageSizePastTheCapListsRatherThanRefuses) {
  httplib::Result r = Post("ListCheckpoints", R"({"pageSize": 5000})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_THAT(r->body, HasSubstr("\"result\""));
}

// ListTensors' pages over HTTP: pageSize and pageToken pass through, each
// page's last line carries only the token, and the pages concatenate to the
// whole list; a token for another filter is refused with its reason.
TEST_F(HttpGatewayTest, ListTensorsPagesConcatenateToTheWholeList) {
  // The tensors of one reply's lines, and the token its last line carries.
  auto lines_of = [](const std::string& body, std::string* token) {
    std::vector<Json> tensors;
    for (absl::string_view line :
         absl::StrSplit(body, '\n', absl::SkipEmpty())) {
      Json t = Json::parse(line)["result"];
      if (!t.value("nextPageToken", "").empty()) {
        *token = t["nextPageToken"];
        EXPECT_EQ(t.value("name", ""), "") << line;
        continue;
      }
      t.erase("listCount");  // the page's own count
      tensors.push_back(std::move(t));
    }
    return tensors;
  };
  const Json request = {{"checkpoint", kQ8}, {"filter", "blk.*"}};
  httplib::Result whole = Post("ListTensors", request.dump());
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  std::string none;
  const std::vector<Json> want = lines_of(whole->body, &none);
  EXPECT_EQ(none, "");
  ASSERT_GT(want.size(), 3u);

  std::vector<Json> paged;
  std::string token, first_token;
  int pages = 0;
  do {
    Json page = request;
    page["pageSize"] = 3;
    if (!token.empty()) page["pageToken"] = token;
    token.clear();
    httplib::Result r = Post("ListTensors", page.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    std::vector<Json> tensors = lines_of(r->body, &token);
    EXPECT_LE(tensors.size(), 3u);
    paged.insert(paged.end(), tensors.begin(), tensors.end());
    if (first_token.empty()) first_token = token;
    ASSERT_LT(++pages, 100);
  } while (!token.empty());
  EXPECT_EQ(paged, want);
  EXPECT_GT(pages, 1);

  Json other = {
      {"checkpoint", kQ8}, {"filter", "blk.0.*"}, {"pageToken", first_token}};
  httplib::Result refused = Post("ListTensors", other.dump());
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  ExpectErrorBody(refused->body, "PAGE_TOKEN_INVALID");
}

// Every refusal carries grpc-gateway's HTTP status for its code and its
// error body with the reason, and names what is wrong.
TEST_F(HttpGatewayTest, RefusalsCarryTheirHttpStatusAndCode) {
  const std::string q =
      std::string("/v1/heatmap.png?checkpoint=") + kQ8 + "&tensor=" + kQ8Tensor;
  const std::vector<Refusal> refusals = {
      {"missing tensor", "POST", "/v1/GetTensor",
       Json{{"checkpoint", kQ8}, {"tensor", "nope"}}.dump(), "application/json",
       404, "TENSOR_NOT_FOUND", "'nope'"},
      {"missing checkpoint, streaming", "POST", "/v1/ListTensors",
       R"({"checkpoint": "none.gguf"})", "application/json", 404,
       "CHECKPOINT_NOT_FOUND", "none.gguf"},
      {"body not JSON", "POST", "/v1/GetTensor",
       "{checkpoint:", "application/json", 400, "REQUEST_INVALID",
       "tensormorph.v1.GetTensorRequest"},
      {"unknown field", "POST", "/v1/GetTensor",
       R"({"checkpoint": "x", "tensr": "y"})", "application/json", 400,
       "REQUEST_INVALID", "tensr"},
      {"field of the wrong type", "POST", "/v1/GetHeatmap",
       R"({"checkpoint": "x", "width": "wide"})", "application/json", 400,
       "REQUEST_INVALID", "width"},
      {"int32 out of range", "POST", "/v1/GetHeatmap",
       R"({"checkpoint": "x", "width": 4294967296})", "application/json", 400,
       "REQUEST_INVALID", "width"},
      {"unknown method", "POST", "/v1/DeleteEverything", "{}",
       "application/json", 404, "NOT_FOUND", "GetServerInfo"},
      {"no JSON content type", "POST", "/v1/GetServerInfo", "{}", "text/plain",
       415, "REQUEST_INVALID", "application/json"},
      {"GET of a method", "GET", "/v1/GetServerInfo", "", "", 405,
       "UNIMPLEMENTED", "POST"},
      {"a JSON-like content type", "POST", "/v1/GetServerInfo", "{}",
       "application/jsonp", 415, "REQUEST_INVALID", "application/json"},
      {"a request past 4 MiB as protobuf", "POST", "/v1/GetTensor",
       Json{{"checkpoint", std::string(5 << 20, 'x')}}.dump(),
       "application/json", 429, "RESOURCE_EXHAUSTED", "4 MiB"},
      {"a body past 16 MiB", "POST", "/v1/GetServerInfo",
       std::string((16 << 20) + 1, ' '), "application/json", 413,
       "LIMIT_EXCEEDED", "16 MiB"},
      {"path outside the roots", "POST", "/v1/GetCheckpoint",
       R"({"checkpoint": "../../../../etc/passwd"})", "application/json", 403,
       "OUTSIDE_ROOTS", "etc/passwd"},
      {"heatmap past the side limit", "GET", q + "&width=5000", "", "", 429,
       "LIMIT_EXCEEDED", "4096"},
      {"unknown query parameter", "GET", q + "&colour=red", "", "", 400,
       "REQUEST_INVALID", "'colour'"},
      {"parameter given twice", "GET", q + "&mode=group&mode=value", "", "",
       400, "REQUEST_INVALID", "'mode'"},
      {"bad mode", "GET", q + "&mode=rainbow", "", "", 400, "REQUEST_INVALID",
       "rainbow"},
      {"bad integer", "GET", q + "&width=12abc", "", "", 400, "REQUEST_INVALID",
       "'width'"},
      {"bad range", "GET", q + "&rows=3", "", "", 400, "REQUEST_INVALID",
       "BEGIN:END"},
      {"not UTF-8", "GET", q + "&ref=%ff", "", "", 400, "REQUEST_INVALID",
       "UTF-8"},
      {"npy without a tensor", "GET",
       std::string("/v1/tensor.npy?checkpoint=") + kQ8, "", "", 400,
       "REQUEST_INVALID", "'tensor'"},
      {"npy of a missing tensor", "GET",
       std::string("/v1/tensor.npy?checkpoint=") + kQ8 + "&tensor=nope", "", "",
       404, "TENSOR_NOT_FOUND", "nope"},
      {"npy raw flag not a flag", "GET",
       std::string("/v1/tensor.npy?checkpoint=") + kQ8 + "&tensor=x&raw=yes",
       "", "", 400, "REQUEST_INVALID", "'raw'"},
      {"no such page", "GET", "/../../etc/passwd", "", "", 404, "NOT_FOUND",
       ""},
  };
  for (const Refusal& f : refusals) {
    SCOPED_TRACE(f.name);
    httplib::Client c = Http();
    httplib::Result r = f.method == "POST" ? c.Post(f.path.c_str(), f.body,
                                                    f.content_type.c_str())
                                           : c.Get(f.path.c_str());
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, f.status) << r->body;
    ExpectErrorBody(r->body, f.reason);
    EXPECT_THAT(Json::parse(r->body, nullptr, false).value("message", ""),
                HasSubstr(f.named));
  }
}

TEST_F(HttpGatewayTest, ASymlinkOutOfTheRootIsRefusedAsPermissionDenied) {
  const std::string root = MakeTempDir();
  ASSERT_EQ(::symlink(DemoDir().c_str(), (root + "/escape").c_str()), 0);
  ServerProcess s({root}, {"--http-listen", "127.0.0.1:0"});
  httplib::Client c("127.0.0.1", s.http_port());
  httplib::Result r =
      c.Post("/v1/GetCheckpoint",
             Json{{"checkpoint", std::string("escape/") + kQ8}}.dump(),
             "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403) << r->body;
  ExpectErrorBody(r->body, "OUTSIDE_ROOTS");
}

TEST_F(HttpGatewayTest,
       ThePageIsServedFromTheBinaryWithAContentSecurityPolicy) {
  httplib::Result r = Http().Get("/");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_THAT(r->get_header_value("Content-Type"), HasSubstr("text/html"));
  EXPECT_THAT(r->get_header_value("Content-Security-Policy"),
              HasSubstr("default-src 'self'"));
  EXPECT_THAT(r->body, HasSubstr("<html"));
  // Every module is preloaded at once (not found import by import), so a
  // module added to client/web must be named there too.
  for (const WebAsset& a : WebAssets()) {
    const std::string path = std::string(a.path).substr(1);
    if (!absl::EndsWith(path, ".js") || path == "app.js") continue;
    EXPECT_THAT(r->body, HasSubstr("<link rel=\"modulepreload\" href=\"" +
                                   path + "\">"));
    httplib::Result js = Http().Get(a.path);
    ASSERT_TRUE(js);
    EXPECT_EQ(js->status, 200) << a.path;
    EXPECT_THAT(js->get_header_value("Content-Type"),
                HasSubstr("text/javascript"));
  }
}

// /metrics parses as Prometheus text and counts the HTTP requests as the
// calls they became, by method and code.
TEST_F(HttpGatewayTest, MetricsParseAsPrometheusTextAndCountHttpCalls) {
  const auto scrape = [] {
    httplib::Result r = Http().Get("/metrics");
    EXPECT_TRUE(r && r->status == 200);
    EXPECT_THAT(r->get_header_value("Content-Type"),
                HasSubstr("text/plain; version=0.0.4"));
    absl::StatusOr<testing::PrometheusScrape> s =
        testing::ParsePrometheusText(r->body);
    EXPECT_TRUE(s.ok()) << s.status() << "\n" << r->body;
    return *s;
  };
  const testing::PrometheusScrape before = scrape();
  ASSERT_EQ(
      Post("GetTensor", Json{{"checkpoint", kQ8}, {"tensor", "nope"}}.dump())
          ->status,
      404);
  ASSERT_EQ(Http()
                .Get((std::string("/v1/tensor.npy?checkpoint=") + kQ8 +
                      "&tensor=" + kQ8Tensor)
                         .c_str())
                ->status,
            200);
  // The download's last byte can reach us before its call has ended and
  // been counted: scrape until it is, for up to five seconds.
  testing::PrometheusScrape after;
  const auto delta = [&](const std::string& name,
                         const std::map<std::string, std::string>& labels) {
    return after.Sum(name, labels) - before.Sum(name, labels);
  };
  for (int i = 0; i < 100; ++i) {
    after = scrape();
    if (delta("tensormorph_calls_total", {{"method", "ReadSlice"}}) > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(delta("tensormorph_calls_total",
                  {{"method", "GetTensor"}, {"code", "NOT_FOUND"}}),
            1);
  EXPECT_EQ(delta("tensormorph_calls_total",
                  {{"method", "ReadSlice"}, {"code", "OK"}}),
            1);
  EXPECT_GE(delta("tensormorph_stream_bytes_total", {}), 256 * 256 * 4);
  EXPECT_GT(after.Sum("process_resident_memory_bytes", {}), 0);
  EXPECT_GE(after.Sum("tensormorph_open_checkpoints", {}), 1);
}

TEST_F(HttpGatewayTest, HealthzAnswersOk) {
  httplib::Result r = Http().Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok\n");
}

TEST_F(HttpGatewayTest, NoCorsHeadersUnlessAnOriginIsAllowed) {
  httplib::Headers from_elsewhere = {{"Origin", "https://evil.example"}};
  httplib::Result r = Http().Post("/v1/GetServerInfo", from_elsewhere, "{}",
                                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
  httplib::Result preflight =
      Http().Options("/v1/GetServerInfo", from_elsewhere);
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 403);
  EXPECT_FALSE(preflight->has_header("Access-Control-Allow-Origin"));
}

TEST(HttpGatewayCorsTest, TheAllowedOriginGetsCorsHeadersAndOthersDoNot) {
  ServerProcess s({DemoDir()}, {"--http-listen", "127.0.0.1:0",
                                "--http-allow-origin", "https://dash.example"});
  httplib::Client c("127.0.0.1", s.http_port());
  httplib::Result preflight = c.Options(
      "/v1/GetServerInfo", {{"Origin", "https://dash.example"},
                            {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 204);
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Origin"),
            "https://dash.example");
  // Twice would make a browser refuse it.
  EXPECT_EQ(preflight->get_header_value_count("Access-Control-Allow-Origin"),
            1u);
  EXPECT_THAT(preflight->get_header_value("Access-Control-Allow-Headers"),
              HasSubstr("Authorization"));
  httplib::Result ok =
      c.Post("/v1/GetServerInfo", {{"Origin", "https://dash.example"}}, "{}",
             "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Origin"),
            "https://dash.example");
  EXPECT_EQ(ok->get_header_value_count("Access-Control-Allow-Origin"), 1u);
  httplib::Result other =
      c.Post("/v1/GetServerInfo", {{"Origin", "https://evil.example"}}, "{}",
             "application/json");
  ASSERT_TRUE(other);
  EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));
}

// With --token-file, every API call needs the bearer token, checked by the
// same interceptor as gRPC calls; the page and /healthz load without it (the
// page is what asks for the token).
TEST(HttpGatewayAuthTest, ApiCallsNeedTheBearerTokenAndThePageDoesNot) {
  const std::string tokens = MakeTempDir() + "/tokens";
  WriteFile(tokens, "secret-one\n");
  ServerProcess s({DemoDir()},
                  {"--http-listen", "127.0.0.1:0", "--token-file", tokens});
  httplib::Client c("127.0.0.1", s.http_port());
  const std::string npy =
      std::string("/v1/tensor.npy?checkpoint=") + kQ8 + "&tensor=" + kQ8Tensor;
  for (const httplib::Headers& bad :
       {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer nope"}},
        httplib::Headers{{"Authorization", "Basic secret-one"}}}) {
    httplib::Result r =
        c.Post("/v1/GetServerInfo", bad, "{}", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << r->body;
    ExpectErrorBody(r->body, "UNAUTHENTICATED");
    httplib::Result n = c.Get(npy.c_str(), bad);
    ASSERT_TRUE(n);
    EXPECT_EQ(n->status, 401) << n->body;
  }
  // A token with a control character in it is no header value at all
  // (RFC 9110 5.5), refused before anything reads it.
  httplib::Result ctl =
      c.Post("/v1/GetServerInfo", {{"Authorization", "Bearer secret-one\x01"}},
             "{}", "application/json");
  ASSERT_TRUE(ctl);
  EXPECT_EQ(ctl->status, 400) << ctl->body;
  ExpectErrorBody(ctl->body, "HTTP_FRAMING_INVALID");
  // Refused before the body is read: the headers of a 15 MiB request, and
  // no body, bring the 401 back, so an unauthenticated client cannot make
  // the server take in large bodies. The port holds a request until its
  // body has come or stopped coming for the read timeout (5 s, the byte
  // gap in peer_fair_server.cc), so the answer comes after those 5 s: the
  // client waits longer (waiting exactly 5 s, it lost the race under ASan).
  EXPECT_THAT(
      RawExchange(s.http_port(),
                  "POST /v1/GetServerInfo HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  "Content-Type: application/json\r\n"
                  "Content-Length: 15728640\r\n\r\n",
                  15),
      ::testing::StartsWith("HTTP/1.1 401"));
  const httplib::Headers good = {{"Authorization", "Bearer secret-one"}};
  httplib::Result r =
      c.Post("/v1/GetServerInfo", good, "{}", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  httplib::Result n = c.Get(npy.c_str(), good);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->status, 200);
  EXPECT_EQ(c.Get("/")->status, 200);
  EXPECT_EQ(c.Get("/healthz")->status, 200);
}

TEST(HttpGatewayTlsTest, TlsCertServesHttpsToClientsThatTrustTheCa) {
  ServerProcess s({DemoDir()}, {"--http-listen", "127.0.0.1:0", "--tls-cert",
                                TestCaFile("server.pem"), "--tls-key",
                                TestCaFile("server.key")});
  httplib::SSLClient tls("localhost", s.http_port());
  tls.set_ca_cert_path(TestCaFile("ca.pem").c_str());
  tls.enable_server_certificate_verification(true);
  httplib::Result r = tls.Post("/v1/GetServerInfo", "{}", "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  httplib::Client plain("127.0.0.1", s.http_port());
  plain.set_read_timeout(5, 0);
  httplib::Result p = plain.Get("/healthz");
  EXPECT_TRUE(!p || p->status != 200) << "plain HTTP answered on a TLS port";
}

// A client that walks away mid-download ends its call; the server goes on
// serving everyone else.
TEST_F(HttpGatewayTest, AClientLeavingMidDownloadLeavesTheServerServing) {
  for (int i = 0; i < 8; ++i) {
    httplib::Client c = Http();
    size_t got = 0;
    httplib::Result r =
        c.Get((std::string("/v1/tensor.npy?checkpoint=") + kQ8 +
               "&tensor=" + kQ8Tensor)
                  .c_str(),
              [&](const char*, size_t n) {
                got += n;
                return got < 1000;  // stop after the first bytes
              });
    EXPECT_FALSE(r);  // cancelled by the receiver
  }
  httplib::Result r = Post("GetServerInfo", "{}");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// A page that leaves a view aborts its fetch, which closes the connection:
// the gateway then cancels the call, so the worker is freed rather than
// finishing a heatmap nobody reads. An error heatmap of an 8 M-element F32
// tensor against itself (every element inspected: over a second) is
// abandoned 300 ms in; the server counts the call CANCELLED, not OK.
TEST(HttpGatewayDisconnectTest, AClientThatLeavesCancelsItsCall) {
  const std::string dir = MakeTempDir();
  const int64_t rows = 4096, cols = 2048;
  testing::WriteSparseSafetensors(
      dir + "/big.safetensors",
      "{\"w\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(rows) + "," +
          std::to_string(cols) + "],\"data_offsets\":[0," +
          std::to_string(rows * cols * 4) + "]}}",
      rows * cols * 4);
  ServerProcess server({dir}, {"--http-listen", "127.0.0.1:0"});
  httplib::Client http("127.0.0.1", server.http_port());
  http.set_read_timeout(60, 0);
  const auto count = [&](const std::string& code) {
    httplib::Result r = http.Get("/metrics");
    EXPECT_TRUE(r && r->status == 200);
    absl::StatusOr<testing::PrometheusScrape> s =
        testing::ParsePrometheusText(r->body);
    EXPECT_TRUE(s.ok()) << s.status();
    return s->Sum("tensormorph_calls_total",
                  {{"method", "GetHeatmap"}, {"code", code}});
  };
  const std::string body = Json{
      {"checkpoint", "big.safetensors"},
      {"tensor", "w"},
      {"reference", "big.safetensors"},
      {"mode", "HEATMAP_MODE_ERROR"},
      {"width", 1},
      {"height", 1}}.dump();
  const std::string request =
      "POST /v1/GetHeatmap HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(server.http_port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto left = std::chrono::steady_clock::now();
  ::close(fd);
  double cancelled = 0;
  for (int i = 0; i < 200 && cancelled == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    cancelled = count("CANCELLED");
  }
  const double ms = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - left)
                        .count();
  EXPECT_EQ(cancelled, 1);
  EXPECT_EQ(count("OK"), 0);
  std::printf("call cancelled %.0f ms after its client left\n", ms);
  // The full heatmap takes longer than that (else the test proves nothing).
  const auto t0 = std::chrono::steady_clock::now();
  httplib::Result full = http.Post("/v1/GetHeatmap", body, "application/json");
  ASSERT_TRUE(full);
  EXPECT_EQ(full->status, 200);
  const double full_ms = std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - t0)
                             .count();
  std::printf("the same heatmap in full: %.0f ms\n", full_ms);
  EXPECT_GT(full_ms, ms);
}

// A 1 GiB tensor goes out as .npy without the server holding it: its
// anonymous memory (heap; the file's mapped pages are not counted) stays
// within 128 MiB of where it started (an eighth of the tensor), sampled
// throughout the download.
TEST(HttpGatewayMemoryTest, ALargeNpyIsStreamedWithBoundedServerMemory) {
  const std::string dir = MakeTempDir();
  constexpr int64_t kBytes = int64_t{1} << 30;
  testing::WriteSparseSafetensors(
      dir + "/big.safetensors",
      R"({"w":{"dtype":"F32","shape":[16384,16384],"data_offsets":[0,1073741824]}})",
      kBytes);
  ServerProcess s({dir}, {"--http-listen", "127.0.0.1:0"});
  const int64_t before_kb = testing::ProcStatusKb(s.pid(), "RssAnon");
  ASSERT_GT(before_kb, 0);
  int64_t got = 0, peak_kb = before_kb, next_sample = 0;
  httplib::Client c("127.0.0.1", s.http_port());
  c.set_read_timeout(120, 0);
  httplib::Result r =
      c.Get("/v1/tensor.npy?checkpoint=big.safetensors&tensor=w",
            [&](const char*, size_t n) {
              got += static_cast<int64_t>(n);
              if (got >= next_sample) {
                next_sample += 32 << 20;
                peak_kb = std::max(peak_kb,
                                   testing::ProcStatusKb(s.pid(), "RssAnon"));
              }
              return true;
            });
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(got, kBytes + 128);  // the data and a 128-byte .npy header
#if defined(__SANITIZE_ADDRESS__)
  // ASan's quarantine holds up to 256 MiB of freed chunks: still far from
  // the tensor held whole.
  constexpr int64_t kBoundKb = 512 << 10;
#else
  constexpr int64_t kBoundKb = 128 << 10;
#endif
  EXPECT_LT(peak_kb - before_kb, kBoundKb)
      << "the server's heap grew by " << (peak_kb - before_kb) / 1024
      << " MiB while sending a 1024 MiB tensor";
}

// SIGTERM: /healthz turns 503 and new API requests are answered 503, while
// a download in flight gets the grace to finish, whole; then the server
// exits by itself.
TEST(HttpGatewayDrainTest,
     ADownloadInFlightFinishesWhileNewRequestsAreTurnedAway) {
  const std::string dir = MakeTempDir();
  constexpr int64_t kBytes = int64_t{64} << 20;
  testing::WriteSparseSafetensors(
      dir + "/big.safetensors",
      R"({"w":{"dtype":"F32","shape":[4096,4096],"data_offsets":[0,67108864]}})",
      kBytes);
  ServerProcess s({dir},
                  {"--http-listen", "127.0.0.1:0", "--shutdown-grace", "60"});
  absl::Notification started, release;
  int64_t got = 0;
  int status = 0;
  std::thread download([&] {
    httplib::Client c("127.0.0.1", s.http_port());
    c.set_read_timeout(60, 0);
    httplib::Result r =
        c.Get("/v1/tensor.npy?checkpoint=big.safetensors&tensor=w",
              [&](const char*, size_t n) {
                got += static_cast<int64_t>(n);
                if (!started.HasBeenNotified()) {
                  started.Notify();
                  release.WaitForNotification();  // a client reading slowly
                }
                return true;
              });
    status = r ? r->status : -1;
  });
  started.WaitForNotification();
  ASSERT_EQ(::kill(s.pid(), SIGTERM), 0);
  httplib::Client c("127.0.0.1", s.http_port());
  int health = 0;
  for (int i = 0; i < 100 && health != 503; ++i) {
    httplib::Result h = c.Get("/healthz");
    health = h ? h->status : -1;
    if (health != 503) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  EXPECT_EQ(health, 503);
  httplib::Result fresh = c.Post("/v1/GetServerInfo", "{}", "application/json");
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->status, 503);
  ExpectErrorBody(fresh->body, "UNAVAILABLE");
  release.Notify();
  download.join();
  EXPECT_EQ(status, 200);
  EXPECT_EQ(got, kBytes + 128);  // whole: the data and the .npy header
  EXPECT_EQ(s.WaitForExit(), 0);
}

TEST(HttpGatewayStartTest, BadListenAddressesAreRefusedNamingThem) {
  for (const std::string listen :
       {"nonsense", "127.0.0.1:99999", "127.0.0.1:x"}) {
    testing::CommandResult r = testing::RunCommand(
        {testing::TensormorphdPath(), "--root", DemoDir(), "--listen",
         "127.0.0.1:0", "--http-listen", listen});
    EXPECT_EQ(r.exit_code, 1) << listen;
    EXPECT_THAT(r.err, HasSubstr(listen));
  }
}

}  // namespace
}  // namespace tensormorph
