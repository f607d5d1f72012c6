// Decode throughput per type, elements per second on one thread, beside
// memcpy of the same float32 output measured in the same run.
//   build/tests/bench/decode_bench
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/quant/codec.h"

namespace tensormorph {
namespace {

constexpr int64_t kElements = int64_t{1} << 22;  // 16 MiB of float32 output

// Random bytes make valid blocks for every type (scales are finite or not;
// decoding speed does not depend on it).
std::vector<uint8_t> RandomBlocks(DType d) {
  const DTypeInfo& info = GetDTypeInfo(d);
  std::vector<uint8_t> bytes(
      static_cast<size_t>(kElements / info.block_elems * info.block_bytes));
  std::mt19937 rng(7);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

void BM_MemcpyBaseline(benchmark::State& state) {
  std::vector<float> src(kElements, 1.0f), dst(kElements);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kElements * sizeof(float));
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
  state.counters["Gelem/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kElements) / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MemcpyBaseline)->Unit(benchmark::kMillisecond);

void BM_Decode(benchmark::State& state) {
  const DType d = static_cast<DType>(state.range(0));
  state.SetLabel(std::string(DTypeName(d)));
  const std::vector<uint8_t> blocks = RandomBlocks(d);
  std::vector<float> out(kElements);
  for (auto _ : state) {
    (void)DecodeElements(d, blocks, 0, kElements, out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kElements);
  state.counters["Gelem/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * kElements) / 1e9,
      benchmark::Counter::kIsRate);
}

void Types(benchmark::internal::Benchmark* b) {
  for (DType d :
       {DType::kQ8_0, DType::kQ4_K, DType::kBF16, DType::kQ5_K, DType::kQ4_0,
        DType::kQ4_1, DType::kQ5_0, DType::kQ2_K, DType::kQ6_K, DType::kIQ4_NL,
        DType::kMXFP4, DType::kQ3_K, DType::kF16}) {
    b->Arg(static_cast<int>(d));
  }
}
BENCHMARK(BM_Decode)->Apply(Types)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();
