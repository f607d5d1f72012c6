// CheckCheckpoint throughput (best of 3, in thread CPU time: the machine is
// shared with builds, and every timed call runs on this thread alone)
// beside a plain decode pass of the same tensors and the XXH3 hash pass of
// the same stored bytes, measured in the same run. Issue 21 asks a check at
// >= 0.5x the speed of decoding (vs_decode). One checkpoint per format, each
// two 4096 x 4096 tensors from the same gaussian values: GGUF F32, F16,
// BF16, Q8_0, Q4_K, and a safetensors GPTQ int4 layer (group 128).
// BM_Check/F/0 is `check`, BM_Check/F/1 `check --manifest` (every stored
// byte hashed too, in the value pass).
//   build/tests/bench/check_bench
//   TENSORMORPH_CHECK_BENCH_ITERATIONS=40 perf record -g
//   build/tests/bench/check_bench --benchmark_filter=BM_Check/4/0
#include <benchmark/benchmark.h>
#include <time.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/check/check.h"
#include "core/check/manifest.h"
#include "core/format/checkpoint.h"
#include "tests/bench/bench_data.h"
#include "tests/bench/bench_timing.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

constexpr int64_t kRows = 4096, kCols = 4096;
const char* const kFormats[] = {"f32",  "f16",  "bf16",
                                "q8_0", "q4_k", "gptq_int4"};
constexpr int kNumFormats = 6;

struct Data {
  std::map<std::string, std::shared_ptr<const Checkpoint>> ckpt;
  std::map<std::string, double> decode_seconds;  // the baseline
};

Data& GetData() {
  static Data* d = [] {
    using namespace ::tensormorph::testing;
    auto* d = new Data;
    const std::vector<float> a = Gaussian(kRows * kCols, 7, 0.02f);
    const std::vector<float> b = Gaussian(kRows * kCols, 8, 0.02f);
    auto f16 = [](const std::vector<float>& v) {
      std::string s(v.size() * 2, '\0');
      for (size_t i = 0; i < v.size(); ++i) {
        const uint16_t h = F32ToF16Bits(v[i]);
        std::memcpy(s.data() + 2 * i, &h, 2);
      }
      return s;
    };
    const std::string dir = MakeTempDir();
    auto write = [&](const std::string& name, uint32_t type, std::string x,
                     std::string y) {
      GgufSpec s;
      s.kv.push_back({"general.architecture", GgufString("llama")});
      s.tensors.push_back({"blk.0.w", {kCols, kRows}, type, std::move(x)});
      s.tensors.push_back({"blk.1.w", {kCols, kRows}, type, std::move(y)});
      const std::string path = dir + "/" + name + ".gguf";
      WriteFile(path, BuildGguf(s));
      d->ckpt[name] = *Checkpoint::Open(path);
    };
    write("f32", 0, ToF32Bytes(a), ToF32Bytes(b));
    write("f16", 1, f16(a), f16(b));
    write("bf16", 30, ToBF16Bytes(a), ToBF16Bytes(b));
    write("q8_0", 8, QuantizeQ8_0(a), QuantizeQ8_0(b));
    write("q4_k", 12, QuantizeQ4_K(a), QuantizeQ4_K(b));
    d->ckpt["gptq_int4"] = *Checkpoint::Open(bench::WriteConventionCheckpoint(
        bench::Convention::kGptqInt4, kRows, kCols));
    return d;
  }();
  return *d;
}

using ::tensormorph::bench::DecodePass;
using ::tensormorph::bench::ThreadSeconds;

int64_t StoredBytes(const Checkpoint& c) {
  int64_t b = 0;
  for (const StoredTensor& t : c.stored_tensors())
    b += static_cast<int64_t>(t.nbytes);
  return b;
}

int64_t Elements(const Checkpoint& c) {
  int64_t n = 0;
  for (const LogicalTensor& t : c.tensors()) n += t.num_elements;
  return n;
}

// Throughput of the best iteration, and the ratio to each baseline measured
// so far in this run (vs_decode > 1 means faster than decoding).
void Report(benchmark::State& state, const std::string& format, double best) {
  const Data& d = GetData();
  const Checkpoint& c = *d.ckpt.at(format);
  state.counters["GB/s"] = StoredBytes(c) / 1e9 / best;
  state.counters["G_elements/s"] = Elements(c) / 1e9 / best;
  if (auto it = d.decode_seconds.find(format); it != d.decode_seconds.end())
    state.counters["vs_decode"] = it->second / best;
  state.SetLabel(format);
}

// Baseline: decode every logical tensor in the value scan's pieces (256 Ki
// elements), touching one value of each so that nothing is skipped.
void BM_DecodePass(benchmark::State& state) {
  Data& d = GetData();
  const std::string format = kFormats[state.range(0)];
  const Checkpoint& c = *d.ckpt.at(format);
  std::vector<float> buf(1 << 18);
  double best = 1e30;
  for (auto _ : state) {
    const double t0 = ThreadSeconds();
    float acc = 0;
    for (const LogicalTensor& t : c.tensors()) acc += DecodePass(t, buf);
    benchmark::DoNotOptimize(acc);
    best = std::min(best, ThreadSeconds() - t0);
  }
  d.decode_seconds[format] = best;
  Report(state, format, best);
}

// XXH3 of every stored tensor in a pass of its own (HashStoredTensor, the
// reference the value pass's hashes are held to; check --manifest ran it
// before the values until it hashed in the value pass).
void BM_HashPass(benchmark::State& state) {
  Data& d = GetData();
  const std::string format = kFormats[state.range(0)];
  const Checkpoint& c = *d.ckpt.at(format);
  double best = 1e30;
  for (auto _ : state) {
    const double t0 = ThreadSeconds();
    for (const StoredTensor& t : c.stored_tensors()) {
      auto e = HashStoredTensor(c, t);
      if (!e.ok())
        state.SkipWithError(std::string(e.status().message()).c_str());
      benchmark::DoNotOptimize(e);
    }
    best = std::min(best, ThreadSeconds() - t0);
  }
  Report(state, format, best);
}

// The whole check as `tensormorph check` runs it: without --manifest or
// --verify (range(1) == 0), duplicates from sampled fingerprints and no
// hashes; with --manifest (range(1) == 1), every stored byte hashed in the
// value pass as well.
void BM_Check(benchmark::State& state) {
  Data& d = GetData();
  const std::string format = kFormats[state.range(0)];
  const bool manifest = state.range(1) != 0;
  const Checkpoint& c = *d.ckpt.at(format);
  CheckOptions o;
  o.hashes = manifest;
  double best = 1e30;
  int64_t findings = 0;
  for (auto _ : state) {
    findings = 0;
    const double t0 = ThreadSeconds();
    auto s = CheckCheckpoint(
        c, o, nullptr, [](const CheckProgress&) {},
        [&](const Finding&) { ++findings; },
        manifest ? [](const ManifestEntry&) {}
                 : std::function<void(const ManifestEntry&)>());
    if (!s.ok()) state.SkipWithError(std::string(s.status().message()).c_str());
    benchmark::DoNotOptimize(s);
    best = std::min(best, ThreadSeconds() - t0);
  }
  Report(state, format, best);
  if (manifest) state.SetLabel(format + ",manifest");
  state.counters["findings"] = static_cast<double>(findings);
}

// TENSORMORPH_CHECK_BENCH_ITERATIONS=N runs N iterations (for perf record).
void Timing(benchmark::internal::Benchmark* b) {
  const char* iters = std::getenv("TENSORMORPH_CHECK_BENCH_ITERATIONS");
  b->Unit(benchmark::kMillisecond)
      ->Iterations(iters != nullptr ? std::atoi(iters) : 3)
      ->UseRealTime();
}

void Args(benchmark::internal::Benchmark* b) {
  for (int f = 0; f < kNumFormats; ++f) b->Arg(f);
  Timing(b);
}

// Every format without --manifest, then every format with it.
void CheckArgs(benchmark::internal::Benchmark* b) {
  for (int m = 0; m < 2; ++m) {
    for (int f = 0; f < kNumFormats; ++f) b->Args({f, m});
  }
  Timing(b);
}

BENCHMARK(BM_DecodePass)->Apply(Args);
BENCHMARK(BM_HashPass)->Apply(Args);
BENCHMARK(BM_Check)->Apply(CheckArgs);

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();
