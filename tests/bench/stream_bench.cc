// ReadSlice over loopback: raw bytes (sent as slices of the mapping) and
// dequantized float32 of a 1 GiB tensor, beside a bare gRPC streaming server
// that sends pre-built 1 MiB messages, all in the same run.
//   build/tests/bench/stream_bench
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>

#include "client/client.h"
#include "core/io/stream_heap.h"
#include "server/server.h"
#include "tests/support/loopback_server.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

constexpr int64_t kBytes = int64_t{1} << 30;

// As tensormorphd and the CLI do (the baseline shares the process).
const bool kHeapTuned = [] {
  KeepStreamBuffersOnHeap();
  return true;
}();

// The ceiling: the same RPC, answered with one pre-built 1 MiB chunk sent
// over and over (one write in flight), no decoding and no file.
class BareService final : public v1::Tensormorph::CallbackService {
  grpc::ServerWriteReactor<v1::SliceChunk>* ReadSlice(
      grpc::CallbackServerContext*, const v1::ReadSliceRequest*) override {
    class Writer final : public grpc::ServerWriteReactor<v1::SliceChunk> {
     public:
      Writer() {
        chunk_.mutable_data()->assign(1 << 20, '\x01');
        Next();
      }
      void OnWriteDone(bool ok) override {
        if (!ok) return Finish(grpc::Status::CANCELLED);
        Next();
      }
      void OnDone() override { delete this; }

     private:
      void Next() {
        if (sent_ == kBytes) return Finish(grpc::Status::OK);
        sent_ += static_cast<int64_t>(chunk_.data().size());
        StartWrite(&chunk_);
      }
      v1::SliceChunk chunk_;
      int64_t sent_ = 0;
    };
    return new Writer();
  }
};

double g_bare_seconds = 0;

double Drain(Client& c, const v1::ReadSliceRequest& req, int64_t* bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  *bytes = 0;
  absl::Status s = c.ReadSlice(req, [&](const v1::SliceChunk& ch) {
    *bytes += static_cast<int64_t>(ch.data().size());
    return true;
  });
  if (!s.ok()) std::abort();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

void BM_BareGrpcCeiling(benchmark::State& state) {
  BareService service;
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.SetMaxSendMessageSize(4 << 20);
  b.RegisterService(&service);
  auto server = b.BuildAndStart();
  auto c = *Client::Connect("127.0.0.1:" + std::to_string(port));
  int64_t bytes = 0;
  Drain(*c, v1::ReadSliceRequest(), &bytes);  // warm, as ReadSlice is below
  for (auto _ : state)
    g_bare_seconds = Drain(*c, v1::ReadSliceRequest(), &bytes);
  state.counters["GB/s"] = bytes / 1e9 / g_bare_seconds;
  server->Shutdown();
}
BENCHMARK(BM_BareGrpcCeiling)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_ReadSlice(benchmark::State& state) {
  const std::string dir = testing::MakeTempDir();
  // A 1 GiB F32 tensor in a sparse file.
  testing::WriteSparseSafetensors(
      dir + "/m.safetensors",
      R"({"w":{"dtype":"F32","shape":[16384,16384],"data_offsets":[0,1073741824]}})",
      kBytes);
  testing::LoopbackServer loopback = testing::StartLoopbackServer({dir});
  Client* c = loopback.client.get();
  v1::ReadSliceRequest req;
  req.set_checkpoint("m.safetensors");
  req.set_tensor("w");
  req.set_mode(state.range(0) ? v1::OUTPUT_MODE_RAW : v1::OUTPUT_MODE_FLOAT32);
  state.SetLabel(state.range(0) ? "raw" : "float32");
  int64_t bytes = 0;
  double seconds = 0;
  // One pass first, untimed: the file's pages are then in the page cache,
  // as a served checkpoint's are, and the run measures our code against
  // the ceiling rather than the kernel zero-filling a sparse file.
  Drain(*c, req, &bytes);
  for (auto _ : state) seconds = Drain(*c, req, &bytes);
  state.counters["GB/s"] = bytes / 1e9 / seconds;
  if (g_bare_seconds > 0)
    state.counters["vs_bare_grpc"] = g_bare_seconds / seconds;
}
BENCHMARK(BM_ReadSlice)
    ->Arg(1)
    ->Arg(0)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();
