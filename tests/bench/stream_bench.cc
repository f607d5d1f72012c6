// ReadSlice over loopback: raw bytes (copied out of the mapping) and
// dequantized float32 of a 1 GiB tensor, beside a bare gRPC streaming server
// that sends pre-built 1 MiB messages, taking turns in the same run.
//   build/tests/bench/stream_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "client/client.h"
#include "grpcpp/grpcpp.h"
#include "server/server.h"
#include "server/stream_heap.h"
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

// Writes `message` over and over, one write in flight, until kBytes of
// 1 MiB messages have gone.
template <typename Message>
class RepeatWriter final : public grpc::ServerWriteReactor<Message> {
 public:
  explicit RepeatWriter(Message message) : message_(std::move(message)) {
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return this->Finish(grpc::Status::CANCELLED);
    Next();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    if (sent_ == kBytes) return this->Finish(grpc::Status::OK);
    sent_ += 1 << 20;
    this->StartWrite(&message_);
  }
  Message message_;
  int64_t sent_ = 0;
};

v1::SliceChunk OneMebibyteChunk() {
  v1::SliceChunk chunk;
  chunk.mutable_data()->assign(1 << 20, '\x01');
  return chunk;
}

// A bare server: the same RPC, answered with one 1 MiB chunk message sent
// over and over (one write in flight), no decoding and no file; gRPC
// serializes the message again for each write, as a typical server does.
class BareService final : public v1::Tensormorph::CallbackService {
  grpc::ServerWriteReactor<v1::SliceChunk>* ReadSlice(
      grpc::CallbackServerContext*, const v1::ReadSliceRequest*) override {
    return new RepeatWriter<v1::SliceChunk>(chunk_);
  }
  const v1::SliceChunk chunk_ = OneMebibyteChunk();
};

// The same with the message serialized once, ahead: each write sends the
// same ByteBuffer (its slice shared, not copied).
class PrebuiltService final
    : public v1::Tensormorph::WithRawCallbackMethod_ReadSlice<
          v1::Tensormorph::CallbackService> {
 public:
  PrebuiltService() {
    bool own = false;
    if (!grpc::SerializationTraits<v1::SliceChunk>::Serialize(
             OneMebibyteChunk(), &message_, &own)
             .ok()) {
      std::abort();
    }
  }
  grpc::ServerWriteReactor<grpc::ByteBuffer>* ReadSlice(
      grpc::CallbackServerContext*, const grpc::ByteBuffer*) override {
    return new RepeatWriter<grpc::ByteBuffer>(message_);  // shares the slice
  }

 private:
  grpc::ByteBuffer message_;
};

std::unique_ptr<grpc::Server> Serve(grpc::Service* service, int* port) {
  grpc::ServerBuilder b;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), port);
  b.SetMaxSendMessageSize(4 << 20);
  b.RegisterService(service);
  return b.BuildAndStart();
}

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

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The bare servers and ReadSlice (raw, then float32) take turns, five
// rounds: this machine's loopback throughput swings 2-4x from connection to
// connection and over seconds, so each figure is a median, and the ratios
// are to the faster bare server's median. TENSORMORPH_BENCH_VERBOSE=1
// prints every round.
void BM_ReadSliceVsBareGrpc(benchmark::State& state) {
  PrebuiltService prebuilt_service;
  BareService proto_service;
  int prebuilt_port = 0, proto_port = 0;
  auto prebuilt_server = Serve(&prebuilt_service, &prebuilt_port);
  auto proto_server = Serve(&proto_service, &proto_port);
  auto bare = *Client::Connect("127.0.0.1:" + std::to_string(prebuilt_port));
  auto proto = *Client::Connect("127.0.0.1:" + std::to_string(proto_port));

  const std::string dir = testing::MakeTempDir();
  // A 1 GiB F32 tensor in a sparse file.
  testing::WriteSparseSafetensors(
      dir + "/m.safetensors",
      R"({"w":{"dtype":"F32","shape":[16384,16384],"data_offsets":[0,1073741824]}})",
      kBytes);
  testing::LoopbackServer loopback = testing::StartLoopbackServer({dir});
  Client* ours = loopback.client.get();
  v1::ReadSliceRequest raw, f32;
  raw.set_checkpoint("m.safetensors");
  raw.set_tensor("w");
  raw.set_mode(v1::OUTPUT_MODE_RAW);
  f32 = raw;
  f32.set_mode(v1::OUTPUT_MODE_FLOAT32);

  int64_t bytes = 0;
  // One pass of each first, untimed: the file's pages are then in the page
  // cache, as a served checkpoint's are, and every server is warm.
  Drain(*bare, v1::ReadSliceRequest(), &bytes);
  Drain(*proto, v1::ReadSliceRequest(), &bytes);
  Drain(*ours, raw, &bytes);
  Drain(*ours, f32, &bytes);
  std::vector<double> t_bare, t_proto, t_raw, t_f32;
  for (auto _ : state) {
    for (int round = 0; round < 5; ++round) {
      t_bare.push_back(Drain(*bare, v1::ReadSliceRequest(), &bytes));
      t_proto.push_back(Drain(*proto, v1::ReadSliceRequest(), &bytes));
      t_raw.push_back(Drain(*ours, raw, &bytes));
      t_f32.push_back(Drain(*ours, f32, &bytes));
    }
  }
  const double gb = static_cast<double>(kBytes) / 1e9;
  if (std::getenv("TENSORMORPH_BENCH_VERBOSE")) {
    for (size_t i = 0; i < t_bare.size(); ++i) {
      std::fprintf(
          stderr, "round %zu: bare %.2f proto %.2f raw %.2f f32 %.2f GB/s\n", i,
          gb / t_bare[i], gb / t_proto[i], gb / t_raw[i], gb / t_f32[i]);
    }
  }
  // The ceiling is the faster bare server's median.
  const double bare_s = std::min(Median(t_bare), Median(t_proto));
  const double raw_s = Median(t_raw), f32_s = Median(t_f32);
  state.counters["bare_prebuilt_GB/s"] = gb / Median(t_bare);
  state.counters["bare_proto_GB/s"] = gb / Median(t_proto);
  state.counters["raw_GB/s"] = gb / raw_s;
  state.counters["float32_GB/s"] = gb / f32_s;
  state.counters["raw_vs_bare"] = bare_s / raw_s;
  state.counters["float32_vs_bare"] = bare_s / f32_s;
  prebuilt_server->Shutdown();
  proto_server->Shutdown();
}
BENCHMARK(BM_ReadSliceVsBareGrpc)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();
