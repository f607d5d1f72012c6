// Cost against size: decode, ReadSlice and diff of one tensor of 1 MB, 16 MB,
// 256 MB and 1 GB (float32 bytes), beside memcpy of the same bytes. Each row
// prints its throughput and its cost per byte relative to the previous size
// of the same kind, measured in the same run. Linear cost keeps that ratio
// near 1 (16x and 4x steps in size would show as 16 and 4 if quadratic); the
// step out of the CPU caches (1 MB -> 16 MB) raises every kind, memcpy too.
//   build/tests/bench/growth_bench
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "core/diff/pairing.h"
#include "core/diff/tensor_diff.h"
#include "core/format/checkpoint.h"
#include "core/quant/codec.h"
#include "process/stream_heap.h"
#include "server/server.h"
#include "tests/bench/bench_data.h"
#include "tests/support/loopback_server.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

// As tensormorphd and the CLI do (the baseline shares the process).
const bool kHeapTuned = [] {
  KeepStreamBuffersOnHeap();
  return true;
}();

std::map<std::string, double> g_previous_seconds_per_byte;

// Reports GB/s and the cost per byte against the previous size of `kind`.
void Report(benchmark::State& state, const std::string& kind, int64_t bytes,
            double seconds) {
  const double per_byte = seconds / static_cast<double>(bytes);
  state.counters["GB/s"] = static_cast<double>(bytes) / 1e9 / seconds;
  if (g_previous_seconds_per_byte.count(kind)) {
    state.counters["cost_per_byte_vs_previous_size"] =
        per_byte / g_previous_seconds_per_byte[kind];
  }
  g_previous_seconds_per_byte[kind] = per_byte;
  state.SetLabel(kind + " " + std::to_string(bytes >> 20) + " MB");
}

template <typename Fn>
double Seconds(Fn fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

// The baseline: memcpy of `bytes`.
void BM_MemcpyBaseline(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  std::vector<char> a(static_cast<size_t>(bytes), 1), b(a.size());
  std::memcpy(b.data(), a.data(), a.size());  // warm
  double best = 1e9;
  for (auto _ : state) {
    best = std::min(best, Seconds([&] {
                      std::memcpy(b.data(), a.data(), a.size());
                      benchmark::ClobberMemory();
                    }));
  }
  Report(state, "memcpy", bytes, best);
}

// Q8_0 decode of `bytes` of float32 output.
void BM_DecodeQ8_0(benchmark::State& state) {
  const int64_t bytes = state.range(0), n = bytes / 4;
  const DTypeInfo& info = GetDTypeInfo(DType::kQ8_0);
  std::vector<uint8_t> blocks(
      static_cast<size_t>(n / info.block_elems * info.block_bytes));
  std::mt19937 rng(1);
  for (auto& b : blocks) b = static_cast<uint8_t>(rng());
  std::vector<float> out(static_cast<size_t>(n));
  (void)DecodeElements(DType::kQ8_0, blocks, 0, n, out.data());  // warm
  double best = 1e9;
  for (auto _ : state) {
    best =
        std::min(best, Seconds([&] {
                   (void)DecodeElements(DType::kQ8_0, blocks, 0, n, out.data());
                 }));
  }
  Report(state, "decode", bytes, best);
}

// ReadSlice of a whole F32 tensor, raw, over loopback.
void BM_ReadSliceRaw(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  const std::string dir = testing::MakeTempDir();
  testing::WriteSparseSafetensors(
      dir + "/m.safetensors",
      absl::StrCat(R"({"w":{"dtype":"F32","shape":[)", bytes / 4,
                   R"(],"data_offsets":[0,)", bytes, "]}}"),
      bytes);
  testing::LoopbackServer loopback = testing::StartLoopbackServer({dir});
  Client* c = loopback.client.get();
  v1::ReadSliceRequest req;
  req.set_checkpoint("m.safetensors");
  req.set_tensor("w");
  req.set_mode(v1::OUTPUT_MODE_RAW);
  auto drain = [&] {
    int64_t got = 0;
    if (!c->ReadSlice(req,
                      [&](const v1::SliceChunk& ch) {
                        got += static_cast<int64_t>(ch.data().size());
                        return true;
                      })
             .ok() ||
        got != bytes) {
      std::abort();
    }
  };
  drain();  // warm: the page cache holds the file, as when serving
  double best = 1e9;
  for (auto _ : state) best = std::min(best, Seconds(drain));
  Report(state, "read", bytes, best);
}

// DiffTensor of one Q8_0 tensor against its F32 source.
void BM_DiffQ8_0(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  const std::string dir = bench::WriteDiffPair(1, bytes / 4 / 4096);
  auto quant = *Checkpoint::Open(dir + "/q8_0.gguf");
  auto ref = *Checkpoint::Open(dir + "/source.gguf");
  auto pairing = *PairTensors(*quant, *ref);
  const TensorPair& p = pairing.pairs.at(0);
  DiffWorkspace workspace;  // as the server keeps one per tensor in flight
  auto diff = [&] {
    benchmark::DoNotOptimize(DiffTensor(*p.quant, *p.ref, DiffOptions(), {},
                                        nullptr, {}, &workspace));
  };
  diff();  // warm
  double best = 1e9;
  for (auto _ : state) best = std::min(best, Seconds(diff));
  Report(state, "diff", bytes, best);
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (int64_t mb : {1, 16, 256, 1024}) b->Arg(mb << 20);
  b->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_MemcpyBaseline)->Apply(Sizes);
BENCHMARK(BM_DecodeQ8_0)->Apply(Sizes);
BENCHMARK(BM_ReadSliceRaw)->Apply(Sizes);
BENCHMARK(BM_DiffQ8_0)->Apply(Sizes);

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();
