// InspectScalars over loopback: scalars per second in batches of 10,000 and
// the latency of single-scalar calls (p50, p99), beside a unary ping
// (GetServerInfo) measured in the same run on the same connection.
//   build/tests/bench/inspect_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "client/client.h"
#include "process/stream_heap.h"
#include "server/server.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/loopback_server.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

// As tensormorphd and the CLI do (the baseline shares the process).
const bool kHeapTuned = [] {
  KeepStreamBuffersOnHeap();
  return true;
}();

constexpr int64_t kRows = 4096, kCols = 4096;  // a Q4_K [4096, 4096] matrix
constexpr int kCalls = 4000;

struct Fixture {
  testing::LoopbackServer loopback;
  Client* client = nullptr;
  double ping_p50_us = 0;
};

Fixture& Get() {
  static Fixture* f = [] {
    using namespace ::tensormorph::testing;
    auto* f = new Fixture;
    const std::string dir = MakeTempDir();
    std::vector<float> v(static_cast<size_t>(kRows * kCols));
    std::mt19937 rng(3);
    std::normal_distribution<float> g(0, 0.02f);
    for (float& x : v) x = g(rng);
    GgufSpec spec;
    GgufTensorSpec w;
    w.name = "w";
    w.ne = {kCols, kRows};
    w.type_id = 12;  // Q4_K
    w.data = QuantizeQ4_K(v);
    spec.tensors.push_back(std::move(w));
    WriteFile(dir + "/m.gguf", BuildGguf(spec));
    f->loopback = StartLoopbackServer({dir}, /*workers=*/2);
    f->client = f->loopback.client.get();
    (void)f->client->GetCheckpoint("m.gguf");  // opened once, as when serving
    return f;
  }();
  return *f;
}

// Times `call` kCalls times; reports p50 and p99 in microseconds.
template <typename Call>
std::pair<double, double> Latencies(Call call) {
  std::vector<double> us;
  us.reserve(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!call(i)) std::abort();
    us.push_back(std::chrono::duration<double, std::micro>(
                     std::chrono::steady_clock::now() - t0)
                     .count());
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 99 / 100]};
}

void BM_UnaryPingBaseline(benchmark::State& state) {
  Fixture& f = Get();
  for (auto _ : state) {
    auto [p50, p99] =
        Latencies([&](int) { return f.client->GetServerInfo().ok(); });
    f.ping_p50_us = p50;
    state.counters["p50_us"] = p50;
    state.counters["p99_us"] = p99;
  }
}
BENCHMARK(BM_UnaryPingBaseline)->Iterations(1)->UseRealTime();

void BM_InspectOneScalar(benchmark::State& state) {
  Fixture& f = Get();
  std::mt19937_64 rng(5);
  for (auto _ : state) {
    auto [p50, p99] = Latencies([&](int) {
      v1::InspectScalarsRequest r;
      r.set_checkpoint("m.gguf");
      r.set_tensor("w");
      r.add_flat_indices(static_cast<int64_t>(rng() % (kRows * kCols)));
      auto resp = f.client->InspectScalars(r);
      return resp.ok() && resp->scalars_size() == 1;
    });
    state.counters["p50_us"] = p50;
    state.counters["p99_us"] = p99;
    if (f.ping_p50_us > 0) state.counters["p50_vs_ping"] = p50 / f.ping_p50_us;
  }
}
BENCHMARK(BM_InspectOneScalar)->Iterations(1)->UseRealTime();

v1::InspectScalarsRequest RandomBatch() {
  std::mt19937_64 rng(6);
  v1::InspectScalarsRequest r;
  r.set_checkpoint("m.gguf");
  r.set_tensor("w");
  for (int i = 0; i < 10000; ++i)
    r.add_flat_indices(static_cast<int64_t>(rng() % (kRows * kCols)));
  return r;
}

// Batches of 10,000 random scalars, the reply parsed on an arena (the client
// library's batch path).
void BM_InspectBatchesOf10000(benchmark::State& state) {
  Fixture& f = Get();
  const v1::InspectScalarsRequest r = RandomBatch();
  int64_t scalars = 0;
  for (auto _ : state) {
    google::protobuf::Arena arena;
    auto* resp =
        google::protobuf::Arena::CreateMessage<v1::InspectScalarsResponse>(
            &arena);
    if (absl::Status s = f.client->InspectScalars(r, resp); !s.ok()) {
      state.SkipWithError(s.ToString().c_str());
    }
    scalars += resp->scalars_size();
  }
  state.counters["scalars/s"] = benchmark::Counter(static_cast<double>(scalars),
                                                   benchmark::Counter::kIsRate);
}
BENCHMARK(BM_InspectBatchesOf10000)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2)
    ->UseRealTime();

// The same returned by value: every scalar's message allocated on the heap.
void BM_InspectBatchesOf10000ByValue(benchmark::State& state) {
  Fixture& f = Get();
  const v1::InspectScalarsRequest r = RandomBatch();
  int64_t scalars = 0;
  for (auto _ : state) {
    auto resp = f.client->InspectScalars(r);
    if (!resp.ok()) state.SkipWithError(resp.status().ToString().c_str());
    scalars += resp->scalars_size();
  }
  state.counters["scalars/s"] = benchmark::Counter(static_cast<double>(scalars),
                                                   benchmark::Counter::kIsRate);
}
BENCHMARK(BM_InspectBatchesOf10000ByValue)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2)
    ->UseRealTime();

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();
