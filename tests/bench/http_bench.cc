// tensormorphd's HTTP port, as a browser or a script meets it, beside its
// baselines in the same run, against the real tensormorphd on loopback
// serving a 1 GiB Q8_0 tensor ([30840, 32768], in the page cache):
//  - GET /v1/tensor.npy?raw=1 of the whole tensor, read by cpp-httplib's
//    client (4 KiB reads) and by a plain socket reading 1 MiB at a time,
//    against ReadSlice raw over gRPC from the same server;
//  - the heatmap a page asks for (POST /v1/GetHeatmap, 1024 x 1024 cells)
//    of the whole tensor and of a 4096 x 4096 region, in the binary form
//    the page reads (Accept: application/octet-stream) and as JSON, against
//    gRPC GetHeatmap from the same server and decoding that region once
//    in-process (core's SliceReader, the decode every view is built on).
//   build/tests/bench/http_bench
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "core/format/checkpoint.h"
#include "core/slice.h"
#include "tests/bench/bench_data.h"
#include "tests/support/process.h"

namespace tensormorph {
namespace {

constexpr int64_t kRows = 30840, kCols = 32768;  // 1 GiB of Q8_0 blocks

struct Setup {
  std::string dir = bench::WriteBigQ8_0(kRows, kCols);
  testing::ServerProcess server{{dir}, {"--http-listen", "127.0.0.1:0"}};
};
Setup& TheSetup() {
  static auto* setup = new Setup();
  return *setup;
}

double Seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

// CPU seconds (user + system) process `pid` has used so far: the server's
// cost of a transfer, which a loaded machine's neighbours do not change as
// they change its wall time.
double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis; utime and stime are
  // the 14th and 15th of the line (the 12th and 13th after it).
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 1; i <= 13 && rest >> field; ++i) {
    if (i >= 12) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "http_bench: %s failed\n", what);
    std::abort();
  }
}

// GET `path` on a plain socket read 1 MiB at a time, as a bulk downloader
// reads (cpp-httplib's client reads 4 KiB per call, which on loopback costs
// as much CPU as the server's side); the bytes after the headers.
int64_t GetWithLargeReads(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  Check(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0,
        "connect");
  const std::string request = "GET " + path +
                              " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              "Connection: close\r\n\r\n";
  Check(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(request.size()),
        "send");
  std::vector<char> buf(1 << 20);
  std::string head;
  int64_t body = 0;
  for (ssize_t n; (n = ::recv(fd, buf.data(), buf.size(), 0)) > 0;) {
    if (body == 0 && head.find("\r\n\r\n") == std::string::npos) {
      head.append(buf.data(), static_cast<size_t>(n));
      const size_t end = head.find("\r\n\r\n");
      if (end != std::string::npos) {
        body = static_cast<int64_t>(head.size() - end - 4);
      }
      continue;
    }
    body += n;
  }
  ::close(fd);
  Check(head.rfind("HTTP/1.1 200", 0) == 0, "GET with large reads");
  return body;
}

// The three take turns, five rounds; figures are medians (loopback
// throughput here swings from connection to connection).
void BM_NpyVsReadSliceRaw(benchmark::State& state) {
  Setup& s = TheSetup();
  auto client = Client::Connect(s.server.address());
  Check(client.ok(), "connect");
  v1::ReadSliceRequest req;
  req.set_checkpoint("big.gguf");
  req.set_tensor("big");
  req.set_mode(v1::OUTPUT_MODE_RAW);
  std::vector<double> t_npy, t_large, t_grpc, cpu_large, cpu_grpc;
  int64_t npy_bytes = 0, large_bytes = 0, grpc_bytes = 0;
  const std::string path =
      "/v1/tensor.npy?checkpoint=big.gguf&tensor=big&raw=1";
  for (auto _ : state) {
    for (int round = 0; round < 5; ++round) {
      t_npy.push_back(Seconds([&] {
        httplib::Client http("127.0.0.1", s.server.http_port());
        npy_bytes = 0;
        httplib::Result r = http.Get(path, [&](const char*, size_t n) {
          npy_bytes += static_cast<int64_t>(n);
          return true;
        });
        Check(r && r->status == 200, "GET /v1/tensor.npy");
      }));
      double cpu0 = CpuSeconds(s.server.pid());
      t_large.push_back(Seconds([&] {
        large_bytes = GetWithLargeReads(s.server.http_port(), path);
      }));
      cpu_large.push_back(CpuSeconds(s.server.pid()) - cpu0);
      cpu0 = CpuSeconds(s.server.pid());
      t_grpc.push_back(Seconds([&] {
        grpc_bytes = 0;
        Check((*client)
                  ->ReadSlice(req,
                              [&](const v1::SliceChunk& c) {
                                grpc_bytes +=
                                    static_cast<int64_t>(c.data().size());
                                return true;
                              })
                  .ok(),
              "ReadSlice");
      }));
      cpu_grpc.push_back(CpuSeconds(s.server.pid()) - cpu0);
    }
  }
  Check(large_bytes == npy_bytes, "the same .npy both ways");
  const double npy_s = Median(t_npy), grpc_s = Median(t_grpc);
  const double large_s = Median(t_large);
  state.counters["npy_GB/s"] = npy_bytes / npy_s / 1e9;
  state.counters["npy_large_reads_GB/s"] = large_bytes / large_s / 1e9;
  state.counters["readslice_raw_GB/s"] = grpc_bytes / grpc_s / 1e9;
  state.counters["npy_vs_readslice"] = grpc_s / npy_s;
  state.counters["npy_large_reads_vs_readslice"] = grpc_s / large_s;
  // The server's CPU seconds per GB sent, each way (clock ticks: 10 ms).
  state.counters["server_cpu_s_per_GB_npy"] =
      Median(cpu_large) / (large_bytes / 1e9);
  state.counters["server_cpu_s_per_GB_readslice"] =
      Median(cpu_grpc) / (grpc_bytes / 1e9);
}

// Decodes rows [r0, r1) x cols [c0, c1) once, 1 Mi elements at a time.
void DecodeRegion(const LogicalTensor& t, int64_t r0, int64_t r1, int64_t c0,
                  int64_t c1) {
  auto items = ParseSlice(std::to_string(r0) + ":" + std::to_string(r1) + "," +
                          std::to_string(c0) + ":" + std::to_string(c1));
  Check(items.ok(), "ParseSlice");
  auto slice = ResolveSlice(*items, t.shape);
  Check(slice.ok(), "ResolveSlice");
  SliceReader reader(t, *slice);
  std::vector<float> buf(1 << 20);
  const int64_t n = reader.slice().num_elements;
  for (int64_t first = 0; first < n;
       first += static_cast<int64_t>(buf.size())) {
    const int64_t count = std::min<int64_t>(buf.size(), n - first);
    Check(reader.Read(first, count, buf.data()).ok(), "SliceReader::Read");
    benchmark::DoNotOptimize(buf.data());
  }
}

// Arg 0: the whole tensor; arg 1: a 4096 x 4096 region in its middle.
void BM_HeatmapRegionVsDecodingIt(benchmark::State& state) {
  Setup& s = TheSetup();
  const bool zoomed = state.range(0) == 1;
  const int64_t r0 = zoomed ? kRows / 2 - 2048 : 0;
  const int64_t r1 = zoomed ? r0 + 4096 : kRows;
  const int64_t c0 = zoomed ? kCols / 2 - 2048 : 0;
  const int64_t c1 = zoomed ? c0 + 4096 : kCols;
  auto ckpt = Checkpoint::Open(s.dir + "/big.gguf");
  Check(ckpt.ok(), "Checkpoint::Open");
  const LogicalTensor& tensor = (*ckpt)->tensors().at(0);
  const std::string body =
      "{\"checkpoint\":\"big.gguf\",\"tensor\":\"big\",\"mode\":"
      "\"HEATMAP_MODE_MEAN\",\"width\":1024,\"height\":1024,\"rowBegin\":" +
      std::to_string(r0) + ",\"rowEnd\":" + std::to_string(r1) +
      ",\"colBegin\":" + std::to_string(c0) +
      ",\"colEnd\":" + std::to_string(c1) + "}";
  v1::GetHeatmapRequest req;
  req.set_checkpoint("big.gguf");
  req.set_tensor("big");
  req.set_mode(v1::HEATMAP_MODE_MEAN);
  req.set_width(1024);
  req.set_height(1024);
  req.set_row_begin(r0);
  req.set_row_end(r1);
  req.set_col_begin(c0);
  req.set_col_end(c1);
  ClientOptions options;
  options.timeout = absl::Seconds(300);
  auto client = Client::Connect(s.server.address(), options);
  Check(client.ok(), "connect");
  std::vector<double> t_http, t_cells, t_grpc, t_decode;
  size_t json_bytes = 0, cells_bytes = 0;
  for (auto _ : state) {
    for (int round = 0; round < 3; ++round) {
      t_http.push_back(Seconds([&] {
        httplib::Client http("127.0.0.1", s.server.http_port());
        http.set_read_timeout(300, 0);
        httplib::Result r =
            http.Post("/v1/GetHeatmap", body, "application/json");
        Check(r && r->status == 200, "POST /v1/GetHeatmap");
        json_bytes = r->body.size();
      }));
      // The binary form the page asks for (docs/http.md), read whole as
      // the page reads it; its cells counted from the JSON head.
      t_cells.push_back(Seconds([&] {
        httplib::Client http("127.0.0.1", s.server.http_port());
        http.set_read_timeout(300, 0);
        httplib::Result r = http.Post("/v1/GetHeatmap",
                                      {{"Accept", "application/octet-stream"}},
                                      body, "application/json");
        Check(r && r->status == 200 &&
                  r->get_header_value("Content-Type") ==
                      "application/octet-stream" &&
                  r->body.size() > 4 * 1024 * 1024,
              "POST /v1/GetHeatmap (binary)");
        cells_bytes = r->body.size();
      }));
      t_grpc.push_back(Seconds(
          [&] { Check((*client)->GetHeatmap(req).ok(), "GetHeatmap"); }));
      t_decode.push_back(
          Seconds([&] { DecodeRegion(tensor, r0, r1, c0, c1); }));
    }
  }
  const double http_s = Median(t_http), decode_s = Median(t_decode);
  const double grpc_s = Median(t_grpc), cells_s = Median(t_cells);
  const double elements = static_cast<double>(r1 - r0) * (c1 - c0);
  state.counters["region_Melements"] = elements / 1e6;
  state.counters["heatmap_ms"] = http_s * 1e3;
  state.counters["grpc_heatmap_ms"] = grpc_s * 1e3;
  state.counters["decode_once_ms"] = decode_s * 1e3;
  state.counters["heatmap_G_elements/s"] = elements / http_s / 1e9;
  state.counters["heatmap_vs_decode"] = decode_s / http_s;
  state.counters["json_MB"] = json_bytes / 1e6;
  state.counters["binary_heatmap_ms"] = cells_s * 1e3;
  state.counters["binary_MB"] = cells_bytes / 1e6;
  state.counters["binary_vs_grpc"] = grpc_s / cells_s;
  state.counters["json_vs_grpc"] = grpc_s / http_s;
}

BENCHMARK(BM_NpyVsReadSliceRaw)->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK(BM_HeatmapRegionVsDecodingIt)
    ->Arg(0)
    ->Arg(1)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();
