// Opening and serving big checkpoints: the time and memory to open 10,000
// tensors in 10 sparse shards totalling 100 GB, beside reading their headers
// (the floor: the bytes have to be read); and the anonymous memory of a
// tensormorphd process while it serves a 4 GB checkpoint, call after call.
//   build/tests/bench/open_memory_bench
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "core/format/checkpoint.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::ProcStatusKb;
using ::tensormorph::testing::WriteFile;
using ::tensormorph::testing::WriteSparseSafetensors;

// Writes a safetensors file of `names` tensors of `dtype` [rows, cols] whose
// data is a hole: the file is as long as the data says but holds no blocks.
void WriteSparseShard(const std::string& path,
                      const std::vector<std::string>& names,
                      const std::string& dtype, int elem_bytes, int64_t rows,
                      int64_t cols) {
  const int64_t bytes = rows * cols * elem_bytes;
  std::string json = "{";
  int64_t at = 0;
  for (const std::string& n : names) {
    absl::StrAppend(&json, json.size() > 1 ? "," : "", "\"", n,
                    "\":{\"dtype\":\"", dtype, "\",\"shape\":[", rows, ",",
                    cols, "],\"data_offsets\":[", at, ",", at + bytes, "]}");
    at += bytes;
  }
  WriteSparseSafetensors(path, json + "}", at);
}

constexpr int kShards = 10, kPerShard = 1000;

// 10 shards x 1,000 tensors x 10 MiB: 100 GiB of (sparse) weights.
std::string ShardedDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(MakeTempDir());
    std::string weight_map;
    for (int s = 0; s < kShards; ++s) {
      const std::string shard =
          absl::StrCat("model-0000", s, "-of-000", kShards, ".safetensors");
      std::vector<std::string> names;
      for (int t = 0; t < kPerShard; ++t) {
        names.push_back(absl::StrCat("model.layers.", s * kPerShard + t,
                                     ".mlp.down_proj.weight"));
        absl::StrAppend(&weight_map, weight_map.empty() ? "" : ",", "\"",
                        names.back(), "\":\"", shard, "\"");
      }
      WriteSparseShard(*d + "/" + shard, names, "F16", 2, 2560, 2048);
    }
    WriteFile(
        *d + "/model.safetensors.index.json",
        absl::StrCat(R"({"metadata":{},"weight_map":{)", weight_map, "}}"));
    return d;
  }();
  return *dir;
}

double g_floor_ms = 0;

// The floor: read each shard's header bytes (and the index) into memory.
void BM_ReadHeadersBaseline(benchmark::State& state) {
  const std::string dir = ShardedDir();
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    int64_t total = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      std::ifstream in(e.path(), std::ios::binary);
      uint64_t n = 0;
      in.read(reinterpret_cast<char*>(&n), 8);
      if (e.path().extension() == ".json") n = e.file_size();
      std::string buf(n, '\0');
      in.read(buf.data(), static_cast<std::streamsize>(n));
      total += static_cast<int64_t>(buf.size());
    }
    benchmark::DoNotOptimize(total);
    g_floor_ms = std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - t0)
                     .count();
    state.counters["ms"] = g_floor_ms;
    state.counters["header_MB"] = static_cast<double>(total) / 1e6;
  }
}
BENCHMARK(BM_ReadHeadersBaseline)->Iterations(3)->UseRealTime();

void BM_Open10000TensorsOver100GB(benchmark::State& state) {
  const std::string dir = ShardedDir();
  double rss_mb = 0;
  std::vector<double> times;
  int64_t tensors = 0, bytes = 0;
  for (auto _ : state) {
    const int64_t rss0 = ProcStatusKb(::getpid(), "VmRSS");
    const auto t0 = std::chrono::steady_clock::now();
    auto ckpt = Checkpoint::Open(dir);
    times.push_back(std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - t0)
                        .count());
    if (!ckpt.ok()) {
      state.SkipWithError(ckpt.status().ToString().c_str());
      return;
    }
    rss_mb = (ProcStatusKb(::getpid(), "VmRSS") - rss0) / 1024.0;
    tensors = static_cast<int64_t>((*ckpt)->tensors().size());
    bytes = 0;
    for (const auto& t : (*ckpt)->stored_tensors())
      bytes += static_cast<int64_t>(t.nbytes);
  }
  std::sort(times.begin(), times.end());
  const double ms = times[times.size() / 2];  // the median open
  state.counters["ms"] = ms;
  state.counters["resident_MB"] = rss_mb;
  state.counters["tensors"] = static_cast<double>(tensors);
  state.counters["weights_GB"] = static_cast<double>(bytes) / 1e9;
  if (g_floor_ms > 0) state.counters["vs_read_headers"] = ms / g_floor_ms;
}
BENCHMARK(BM_Open10000TensorsOver100GB)->Iterations(5)->UseRealTime();

// A tensormorphd child serving a 4 GiB checkpoint (16 F32 [8192, 8192]
// tensors, sparse): its anonymous memory before any call, and after each
// round of 100 calls (slices raw and float32, batches of scalars, listings).
void BM_ServingMemory4GB(benchmark::State& state) {
  const std::string dir = MakeTempDir();
  std::vector<std::string> names;
  for (int t = 0; t < 16; ++t) names.push_back(absl::StrCat("w", t));
  WriteSparseShard(dir + "/m.safetensors", names, "F32", 4, 8192, 8192);
  testing::ServerProcess server({dir});
  auto client = *Client::Connect(server.address());
  std::mt19937 rng(9);
  for (auto _ : state) {
    state.counters["anon_MB_start"] =
        ProcStatusKb(server.pid(), "RssAnon") / 1024.0;
    for (int round = 1; round <= 4; ++round) {
      for (int call = 0; call < 100; ++call) {
        const std::string& name = names[rng() % names.size()];
        if (call % 4 == 0) {
          v1::InspectScalarsRequest r;
          r.set_checkpoint("m.safetensors");
          r.set_tensor(name);
          for (int i = 0; i < 1000; ++i)
            r.add_flat_indices(static_cast<int64_t>(rng() % (8192 * 8192)));
          if (!client->InspectScalars(r).ok()) std::abort();
        } else if (call % 4 == 1) {
          if (!client->ListTensors("m.safetensors").ok()) std::abort();
        } else {
          // 4 MiB of rows from a random place, raw or float32.
          v1::ReadSliceRequest r;
          r.set_checkpoint("m.safetensors");
          r.set_tensor(name);
          const int64_t row = rng() % (8192 - 128);
          r.set_slice(absl::StrCat(row, ":", row + 128));
          r.set_mode(call % 4 == 2 ? v1::OUTPUT_MODE_RAW
                                   : v1::OUTPUT_MODE_FLOAT32);
          if (!client->ReadSliceAll(r).ok()) std::abort();
        }
      }
      state.counters["anon_MB_after_" + std::to_string(round * 100)] =
          ProcStatusKb(server.pid(), "RssAnon") / 1024.0;
    }
  }
}
BENCHMARK(BM_ServingMemory4GB)->Iterations(1)->UseRealTime();

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();
