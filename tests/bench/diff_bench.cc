// QuantDiff throughput: GB of F32 source read per second, against Q8_0 and
// Q4_K, beside a plain pass that decodes both sides and sums them, measured
// in the same run.
//   build/tests/bench/diff_bench   (TENSORMORPH_BENCH_GB=1 by default)
// TENSORMORPH_DIFF_BENCH_DIR=DIR keeps the generated files in DIR and reuses
// them in later runs, so that a profile sees the diff, not the writing.
#include <benchmark/benchmark.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>

#include "client/client.h"
#include "core/diff/pairing.h"
#include "core/diff/tensor_diff.h"
#include "core/format/checkpoint.h"
#include "process/stream_heap.h"
#include "server/server.h"
#include "tests/bench/bench_data.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/loopback_server.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"

namespace tensormorph {
namespace {

// As tensormorphd and the CLI do (the baseline shares the process).
const bool kHeapTuned = [] {
  KeepStreamBuffersOnHeap();
  return true;
}();

// The quantized sides, by benchmark argument.
constexpr const char* kQuantFiles[] = {"q8_0.gguf", "q4_k.gguf"};
constexpr const char* kQuantNames[] = {"Q8_0", "Q4_K"};

struct Data {
  std::string dir;
  std::shared_ptr<const Checkpoint> quant[2], ref;
  int64_t source_bytes = 0;
  double plain_seconds[2] = {0, 0};  // the baselines, measured once each
  double plain_cpu[2] = {0, 0};      // their CPU seconds
};

// q4_k.gguf beside the pair: the source's values quantized to Q4_K.
void WriteQ4K(const std::string& dir) {
  auto src = *Checkpoint::Open(dir + "/source.gguf");
  testing::GgufSpec spec;
  for (const LogicalTensor& t : src->tensors()) {
    std::vector<float> v(static_cast<size_t>(t.num_elements));
    (void)t.encoding->Decode(0, t.num_elements, v.data());
    spec.tensors.push_back({t.name,
                            {t.shape.back(), t.num_elements / t.shape.back()},
                            12,
                            testing::QuantizeQ4_K(v)});
  }
  testing::WriteFile(dir + "/q4_k.gguf", testing::BuildGguf(spec));
}

double PlainPass(const Checkpoint& quant, const Checkpoint& ref);

Data& GetData() {
  static Data* d = [] {
    auto* d = new Data;
    const char* keep = std::getenv("TENSORMORPH_DIFF_BENCH_DIR");
    if (keep != nullptr &&
        std::filesystem::exists(std::string(keep) + "/q4_k.gguf")) {
      d->dir = keep;
    } else {
      const double gb = std::getenv("TENSORMORPH_BENCH_GB")
                            ? std::atof(std::getenv("TENSORMORPH_BENCH_GB"))
                            : 1.0;
      // 8 tensors of [rows, 4096] F32 make `gb` GB of source.
      const int64_t rows = static_cast<int64_t>(gb * 1e9 / 8 / 4096 / 4);
      d->dir = bench::WriteDiffPair(8, rows);
      WriteQ4K(d->dir);
      if (keep != nullptr) {  // kept for the next run (the temp dir is not)
        std::filesystem::create_directories(keep);
        std::filesystem::copy(
            d->dir, keep,
            std::filesystem::copy_options::overwrite_existing |
                std::filesystem::copy_options::recursive);
        d->dir = keep;
      }
    }
    std::fprintf(stderr, "diff_bench data: %s\n", d->dir.c_str());
    for (int q = 0; q < 2; ++q) {
      d->quant[q] = *Checkpoint::Open(d->dir + "/" + kQuantFiles[q]);
    }
    d->ref = *Checkpoint::Open(d->dir + "/source.gguf");
    for (const auto& t : d->ref->stored_tensors()) d->source_bytes += t.nbytes;
    // Touch every mapping once, so that no benchmark pays the others' page
    // faults (a fresh mapping's faults are measured end to end, by the CLI).
    for (int q = 0; q < 2; ++q) PlainPass(*d->quant[q], *d->ref);
    return d;
  }();
  return *d;
}

// Baseline: decode both sides in 16 Ki-element chunks (both fit in L2) and
// sum their differences in 16 float lanes, which the compiler vectorizes:
// what any pass over the pair must at least do.
double PlainPass(const Checkpoint& quant, const Checkpoint& ref) {
  constexpr int64_t kChunk = 1 << 14;
  std::vector<float> a(kChunk), b(kChunk);
  float lane[16] = {};
  for (const auto& q : quant.tensors()) {
    const LogicalTensor* r = ref.FindTensor(q.name);
    for (int64_t i = 0; i < q.num_elements; i += kChunk) {
      const int64_t n = std::min<int64_t>(kChunk, q.num_elements - i);
      (void)q.encoding->Decode(i, n, a.data());
      (void)r->encoding->Decode(i, n, b.data());
      int64_t k = 0;
      for (; k + 16 <= n; k += 16) {
        for (int l = 0; l < 16; ++l) lane[l] += a[k + l] - b[k + l];
      }
      for (; k < n; ++k) lane[0] += a[k] - b[k];
    }
  }
  double sum = 0;
  for (float v : lane) sum += v;
  return sum;
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

// CPU seconds of the whole process (the loopback server's threads too): on
// a loaded machine wall time says more about the neighbours than the code,
// so each benchmark also reports source GB per CPU second.
double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void BM_PlainPassBaseline(benchmark::State& state) {
  Data& d = GetData();
  const int q = static_cast<int>(state.range(0));
  state.SetLabel(kQuantNames[q]);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = CpuSeconds();
    benchmark::DoNotOptimize(PlainPass(*d.quant[q], *d.ref));
    d.plain_seconds[q] = Seconds(t0);
    d.plain_cpu[q] = CpuSeconds() - c0;
  }
  state.SetBytesProcessed(state.iterations() * d.source_bytes);
  state.counters["source_GB/s"] = d.source_bytes / 1e9 / d.plain_seconds[q];
  state.counters["GB_per_cpu_s"] = d.source_bytes / 1e9 / d.plain_cpu[q];
}
BENCHMARK(BM_PlainPassBaseline)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();

void BM_DiffTensorCore(benchmark::State& state) {
  Data& d = GetData();
  const int q = static_cast<int>(state.range(0));
  state.SetLabel(kQuantNames[q]);
  auto pairing = *PairTensors(*d.quant[q], *d.ref);
  double seconds = 0, cpu = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = CpuSeconds();
    DiffWorkspace workspace;  // as the server keeps one per tensor in flight
    for (const TensorPair& p : pairing.pairs) {
      benchmark::DoNotOptimize(DiffTensor(*p.quant, *p.ref, DiffOptions(), {},
                                          nullptr, {}, &workspace));
    }
    seconds = Seconds(t0);
    cpu = CpuSeconds() - c0;
  }
  state.SetBytesProcessed(state.iterations() * d.source_bytes);
  state.counters["source_GB/s"] = d.source_bytes / 1e9 / seconds;
  state.counters["GB_per_cpu_s"] = d.source_bytes / 1e9 / cpu;
  if (d.plain_seconds[q] > 0) {
    state.counters["vs_plain_pass"] = d.plain_seconds[q] / seconds;
    state.counters["cpu_vs_plain_pass"] = d.plain_cpu[q] / cpu;
  }
}
BENCHMARK(BM_DiffTensorCore)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();

// Args: quantized side, workers. Two workers report their speed-up over
// one in the same run as vs_1_worker.
void BM_QuantDiffRpc(benchmark::State& state) {
  static std::map<int, double> one_worker;  // seconds, by quantized side
  Data& d = GetData();
  const int q = static_cast<int>(state.range(0));
  const int workers = static_cast<int>(state.range(1));
  state.SetLabel(kQuantNames[q]);
  testing::LoopbackServer loopback =
      testing::StartLoopbackServer({d.dir}, workers);
  Client* client = loopback.client.get();
  v1::QuantDiffRequest req;
  req.set_checkpoint(kQuantFiles[q]);
  req.set_reference("source.gguf");
  double seconds = 0, cpu = 0;
  int64_t progress = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = CpuSeconds();
    absl::Status s = client->QuantDiff(req, [&](const v1::QuantDiffEvent& e) {
      progress += e.has_progress();
      return true;
    });
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    seconds = Seconds(t0);
    cpu = CpuSeconds() - c0;
  }
  if (workers == 1) one_worker[q] = seconds;
  state.SetBytesProcessed(state.iterations() * d.source_bytes);
  state.counters["source_GB/s"] = d.source_bytes / 1e9 / seconds;
  state.counters["GB_per_cpu_s"] = d.source_bytes / 1e9 / cpu;
  state.counters["progress_events"] = static_cast<double>(progress);
  if (d.plain_seconds[q] > 0)
    state.counters["vs_plain_pass"] = d.plain_seconds[q] / seconds;
  if (workers > 1 && one_worker.count(q) > 0)
    state.counters["vs_1_worker"] = one_worker[q] / seconds;
}
BENCHMARK(BM_QuantDiffRpc)
    ->Args({0, 1})
    ->Args({0, 2})
    ->Args({1, 1})
    ->Args({1, 2})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();
