// QuantDiff throughput: GB of source read per second, beside a plain pass
// that decodes both sides and sums them, measured in the same run.
//   build/tests/bench/diff_bench   (TENSORMORPH_BENCH_GB=1 by default)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <memory>

#include "client/client.h"
#include "core/diff/pairing.h"
#include "core/diff/tensor_diff.h"
#include "core/format/checkpoint.h"
#include "process/stream_heap.h"
#include "server/server.h"
#include "tests/bench/bench_data.h"
#include "tests/support/loopback_server.h"

namespace tensormorph {
namespace {

// As tensormorphd and the CLI do (the baseline shares the process).
const bool kHeapTuned = [] {
  KeepStreamBuffersOnHeap();
  return true;
}();

struct Data {
  std::string dir;
  std::shared_ptr<const Checkpoint> quant, ref;
  int64_t source_bytes = 0;
  double plain_seconds = 0;  // the baseline, measured once
};

Data& GetData() {
  static Data* d = [] {
    auto* d = new Data;
    const double gb = std::getenv("TENSORMORPH_BENCH_GB")
                          ? std::atof(std::getenv("TENSORMORPH_BENCH_GB"))
                          : 1.0;
    // 8 tensors of [rows, 4096] F32 make `gb` GB of source.
    const int64_t rows = static_cast<int64_t>(gb * 1e9 / 8 / 4096 / 4);
    d->dir = bench::WriteDiffPair(8, rows);
    d->quant = *Checkpoint::Open(d->dir + "/q8_0.gguf");
    d->ref = *Checkpoint::Open(d->dir + "/source.gguf");
    for (const auto& t : d->ref->stored_tensors()) d->source_bytes += t.nbytes;
    return d;
  }();
  return *d;
}

// Baseline: decode both sides in 256 Ki-element chunks and sum them.
double PlainPass(const Data& d) {
  std::vector<float> a(1 << 18), b(1 << 18);
  double sum = 0;
  for (const auto& q : d.quant->tensors()) {
    const LogicalTensor* r = d.ref->FindTensor(q.name);
    for (int64_t i = 0; i < q.num_elements; i += a.size()) {
      const int64_t n = std::min<int64_t>(a.size(), q.num_elements - i);
      (void)q.encoding->Decode(i, n, a.data());
      (void)r->encoding->Decode(i, n, b.data());
      for (int64_t k = 0; k < n; ++k) sum += a[k] - b[k];
    }
  }
  return sum;
}

void BM_PlainPassBaseline(benchmark::State& state) {
  Data& d = GetData();
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(PlainPass(d));
    d.plain_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
  }
  state.SetBytesProcessed(state.iterations() * d.source_bytes);
  state.counters["source_GB/s"] = d.source_bytes / 1e9 / d.plain_seconds;
}
BENCHMARK(BM_PlainPassBaseline)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();

void BM_DiffTensorCore(benchmark::State& state) {
  Data& d = GetData();
  auto pairing = *PairTensors(*d.quant, *d.ref);
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    DiffWorkspace workspace;  // as the server keeps one per tensor in flight
    for (const TensorPair& p : pairing.pairs) {
      benchmark::DoNotOptimize(DiffTensor(*p.quant, *p.ref, DiffOptions(), {},
                                          nullptr, {}, &workspace));
    }
    seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
  }
  state.SetBytesProcessed(state.iterations() * d.source_bytes);
  state.counters["source_GB/s"] = d.source_bytes / 1e9 / seconds;
  if (d.plain_seconds > 0)
    state.counters["vs_plain_pass"] = d.plain_seconds / seconds;
}
BENCHMARK(BM_DiffTensorCore)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();

void BM_QuantDiffRpc(benchmark::State& state) {
  Data& d = GetData();
  testing::LoopbackServer loopback =
      testing::StartLoopbackServer({d.dir}, static_cast<int>(state.range(0)));
  Client* client = loopback.client.get();
  v1::QuantDiffRequest req;
  req.set_checkpoint("q8_0.gguf");
  req.set_reference("source.gguf");
  double seconds = 0;
  int64_t progress = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = client->QuantDiff(req, [&](const v1::QuantDiffEvent& e) {
      progress += e.has_progress();
      return true;
    });
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
  }
  state.SetBytesProcessed(state.iterations() * d.source_bytes);
  state.counters["source_GB/s"] = d.source_bytes / 1e9 / seconds;
  state.counters["progress_events"] = static_cast<double>(progress);
  if (d.plain_seconds > 0)
    state.counters["vs_plain_pass"] = d.plain_seconds / seconds;
}
BENCHMARK(BM_QuantDiffRpc)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();
