// Decode throughput per type, elements per second on one thread, beside
// memcpy of the same float32 output measured in the same run.
//   build/tests/bench/decode_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/format/checkpoint.h"
#include "core/quant/codec.h"
#include "tests/bench/bench_data.h"
#include "tests/support/test_paths.h"

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

// The conventions' decoders (GPTQ, AWQ, compressed-tensors, FP8 blocks,
// bitsandbytes NF4, gpt-oss MXFP4) on the golden fixtures' largest tensor,
// decoded over and over. The fixtures are small (8 K to 60 K elements), so
// these are in-cache figures: the per-element cost, not memory bandwidth.
void BM_DecodeConvention(benchmark::State& state, const char* fixture) {
  auto ckpt = Checkpoint::Open(testing::Fixture(fixture));
  if (!ckpt.ok()) {
    state.SkipWithError(ckpt.status().ToString().c_str());
    return;
  }
  const LogicalTensor* t = nullptr;
  for (const LogicalTensor& l : (*ckpt)->tensors()) {
    if (l.encoding->info().quantized &&
        (t == nullptr || l.num_elements > t->num_elements))
      t = &l;
  }
  state.SetLabel(t->encoding->info().convention + " " +
                 t->encoding->info().scheme + " " + t->name);
  std::vector<float> out(static_cast<size_t>(t->num_elements));
  for (auto _ : state) {
    (void)t->encoding->Decode(0, t->num_elements, out.data());
    benchmark::ClobberMemory();
  }
  state.counters["Gelem/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * t->num_elements) / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_DecodeConvention, gptq_int4_g32,
                  "safetensors/gptq_4bit_g32");
BENCHMARK_CAPTURE(BM_DecodeConvention, awq_int4_g32,
                  "safetensors/awq_4bit_g32");
BENCHMARK_CAPTURE(BM_DecodeConvention, ct_int4_group,
                  "safetensors/ct_w4a16_group");
BENCHMARK_CAPTURE(BM_DecodeConvention, ct_int8_channel,
                  "safetensors/ct_int8_channel");
BENCHMARK_CAPTURE(BM_DecodeConvention, fp8_block,
                  "safetensors/fp8_block_sharded");
BENCHMARK_CAPTURE(BM_DecodeConvention, bnb_nf4, "safetensors/bnb_nf4");
BENCHMARK_CAPTURE(BM_DecodeConvention, gptoss_mxfp4,
                  "safetensors/mxfp4_gptoss");

// The same decoders on a realistic layer (4096 x 4096, groups of 128; gpt-oss:
// two experts), decoded as ReadSlice does: 1 MiB of float32 at a time into
// one reused buffer, so the codes stream from memory and the output stays in
// cache.
void BM_DecodeConventionLayer(benchmark::State& state) {
  const auto c = static_cast<bench::Convention>(state.range(0));
  static std::map<int, std::string> dirs;  // written once per convention
  std::string& dir = dirs[static_cast<int>(c)];
  if (dir.empty()) dir = bench::WriteConventionCheckpoint(c, 4096, 4096);
  auto ckpt = Checkpoint::Open(dir);
  if (!ckpt.ok()) {
    state.SkipWithError(ckpt.status().ToString().c_str());
    return;
  }
  const LogicalTensor* t = nullptr;
  for (const LogicalTensor& l : (*ckpt)->tensors()) {
    if (l.encoding->info().quantized) t = &l;
  }
  if (t == nullptr) {
    state.SkipWithError("no quantized tensor");
    return;
  }
  state.SetLabel(std::string(bench::ConventionName(c)) + " " +
                 t->encoding->info().scheme);
  constexpr int64_t kChunk = (int64_t{1} << 20) / sizeof(float);
  std::vector<float> out(kChunk);
  for (auto _ : state) {
    for (int64_t first = 0; first < t->num_elements; first += kChunk) {
      const int64_t n = std::min(kChunk, t->num_elements - first);
      if (!t->encoding->Decode(first, n, out.data()).ok()) {
        state.SkipWithError("decode failed");
        return;
      }
      benchmark::ClobberMemory();
    }
  }
  state.counters["Gelem/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * t->num_elements) / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DecodeConventionLayer)
    ->DenseRange(0, static_cast<int>(bench::Convention::kGptOssMxfp4))
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();
