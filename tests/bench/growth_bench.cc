// Cost against size: decode, ReadSlice, diff and heatmap of one tensor of
// 1 MB, 16 MB, 256 MB, 1 GB and 4 GB (float32 bytes), beside memcpy of the
// same bytes. The 4 GB rows are skipped (with the reason) when /tmp lacks
// the space for their files or the machine the memory. Each row
// prints its throughput and its cost per byte relative to the previous size
// of the same kind, measured in the same run. Linear cost keeps that ratio
// near 1 (16x and 4x steps in size would show as 16 and 4 if quadratic); the
// step out of the CPU caches (1 MB -> 16 MB) raises every kind, memcpy too.
//   build/tests/bench/growth_bench
#include <benchmark/benchmark.h>
#include <sys/statvfs.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "core/diff/pairing.h"
#include "core/diff/tensor_diff.h"
#include "core/format/checkpoint.h"
#include "core/heatmap.h"
#include "core/quant/codec.h"
#include "server/server.h"
#include "server/stream_heap.h"
#include "tests/bench/bench_data.h"
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

// Why a size cannot run here, or "" when it can: `disk` bytes must fit in
// /tmp's free space and `memory` bytes in the memory available now, each
// with a margin.
std::string CannotRun(int64_t disk, int64_t memory) {
  struct statvfs vfs;
  if (::statvfs("/tmp", &vfs) == 0) {
    const double free = static_cast<double>(vfs.f_bavail) * vfs.f_frsize;
    if (free < 1.25 * static_cast<double>(disk)) {
      return absl::StrCat("skipped: /tmp has ",
                          static_cast<int64_t>(free) >> 20,
                          " MB free, this size needs ", disk >> 20, " MB");
    }
  }
  // MemAvailable: free memory and the page cache the kernel can reclaim
  // (the page cache is where most of these bytes live).
  double available = 0;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    double kb = 0;
    meminfo >> kb;
    if (key == "MemAvailable:") available = kb * 1024;
    meminfo.ignore(64, '\n');
  }
  if (available < 1.25 * static_cast<double>(memory)) {
    return absl::StrCat("skipped: ", static_cast<int64_t>(available) >> 20,
                        " MB of memory available, this size needs ",
                        memory >> 20, " MB");
  }
  return "";
}

// A GGUF pair as bench::WriteDiffPair(1, rows) writes (`source.gguf` F32 and
// `q8_0.gguf` its Q8_0, one tensor "blk.0.ffn_down.weight" of
// [rows, 4096]), written a slab at
// a time so that a 4 GB tensor never sits in memory whole. Returns the
// directory.
std::string WriteDiffPairStreaming(int64_t rows) {
  using namespace ::tensormorph::testing;
  constexpr int64_t kCols = 4096, kSlabRows = 4096;
  const std::string dir = MakeTempDir();
  std::ofstream src(dir + "/source.gguf", std::ios::binary);
  std::ofstream q8(dir + "/q8_0.gguf", std::ios::binary);
  for (auto [out, type] : {std::pair{&src, 0u}, std::pair{&q8, 8u}}) {
    GgufSpec spec;  // the header alone: the one tensor's data follows it
    spec.tensors.push_back({"blk.0.ffn_down.weight", {kCols, rows}, type, ""});
    GgufLayout layout;
    const std::string header = BuildGguf(spec, &layout);
    out->write(header.data(), static_cast<std::streamsize>(layout.data_offset));
  }
  uint64_t state = 0x9E3779B97F4A7C15ull;
  std::vector<float> v(static_cast<size_t>(kSlabRows * kCols));
  for (int64_t r = 0; r < rows; r += kSlabRows) {
    v.resize(static_cast<size_t>(std::min(kSlabRows, rows - r) * kCols));
    for (float& x : v) {  // xorshift, as WriteDiffPair
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      x = (static_cast<float>(state >> 40) / 16777216.0f - 0.5f) * 0.1f;
    }
    const std::string f32 = ToF32Bytes(v), q = QuantizeQ8_0(v);
    src.write(f32.data(), static_cast<std::streamsize>(f32.size()));
    q8.write(q.data(), static_cast<std::streamsize>(q.size()));
  }
  if (!src.good() || !q8.good()) {
    std::fprintf(stderr, "writing %s failed\n", dir.c_str());
    std::abort();
  }
  return dir;
}

// One diff pair per size, shared by the diff and heatmap rows and deleted
// with the other temporary directories at exit.
const std::string& DiffPairOf(int64_t bytes) {
  static auto* pairs = new std::map<int64_t, std::string>;
  auto it = pairs->find(bytes);
  if (it == pairs->end()) {
    it = pairs->emplace(bytes, WriteDiffPairStreaming(bytes / 4 / 4096)).first;
  }
  return it->second;
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
  if (std::string why = CannotRun(0, 2 * bytes); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
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
  if (std::string why = CannotRun(0, bytes + bytes / 3); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
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
  // A hole on disk; the page cache holds it whole.
  if (std::string why = CannotRun(0, bytes); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
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
  if (std::string why = CannotRun(bytes + bytes / 3, bytes + bytes / 3);
      !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  const std::string dir = DiffPairOf(bytes);
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

// GetHeatmap's core (256 x 256 cells, mean mode) of the same Q8_0 tensor.
void BM_HeatmapQ8_0(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  if (std::string why = CannotRun(bytes + bytes / 3, bytes / 3); !why.empty()) {
    state.SkipWithError(why.c_str());
    return;
  }
  auto quant = *Checkpoint::Open(DiffPairOf(bytes) + "/q8_0.gguf");
  const LogicalTensor* t =
      quant->Lookup("blk.0.ffn_down.weight", /*part=*/false);
  if (t == nullptr) std::abort();
  auto heatmap = [&] {
    auto h = ComputeHeatmap(*t, nullptr, HeatmapOptions());
    if (!h.ok()) std::abort();
    benchmark::DoNotOptimize(h->values.data());
  };
  heatmap();  // warm
  double best = 1e9;
  for (auto _ : state) best = std::min(best, Seconds(heatmap));
  Report(state, "heatmap", bytes, best);
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (int64_t mb : {1, 16, 256, 1024, 4096}) b->Arg(mb << 20);
  b->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_MemcpyBaseline)->Apply(Sizes);
BENCHMARK(BM_DecodeQ8_0)->Apply(Sizes);
BENCHMARK(BM_ReadSliceRaw)->Apply(Sizes);
BENCHMARK(BM_DiffQ8_0)->Apply(Sizes);
BENCHMARK(BM_HeatmapQ8_0)->Apply(Sizes);

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();
