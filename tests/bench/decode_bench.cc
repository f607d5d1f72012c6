// Decode throughput per type, elements per second on one thread, beside two
// baselines timed in the same iterations (so a busy machine slows all three
// alike): ggml's own to_float on the same bytes, when built against ggml,
// and memcpy of the same float32 output.
//   build/tests/bench/decode_bench --benchmark_filter=BM_Decode/
//       --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// (one line)
// Counters: Gelem/s (ours), ggml_Gelem/s, x_ggml (ggml's time over ours),
// x_memcpy (memcpy's time over ours: 1 is memcpy speed). The second argument
// is the element count: 1M (4 MiB of output, in cache) and 16M (64 MiB,
// twice the L3 of the machines we measure on: out of cache).
// The ggml baseline is the test oracle's library (tests/oracle: the pinned
// llama.cpp's libggml-base.so, fetched by tests/oracle/fetch_llama_cpp.sh,
// or $TENSORMORPH_LLAMA_CPP_DIR), loaded at run time; without it, a ggml
// source tree built with
//   cmake -S ggml -B ggml/build -DCMAKE_BUILD_TYPE=Release
//       -DBUILD_SHARED_LIBS=OFF && cmake --build ggml/build --target ggml-base
// and this project configured with -DTENSORMORPH_GGML_DIR=<that ggml tree>.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/format/checkpoint.h"
#include "core/quant/codec.h"
#include "core/quant/decode_simd.h"
#include "tests/bench/bench_data.h"
#include "tests/bench/hqq_layer.h"
#include "tests/bench/modelopt_layer.h"
#include "tests/oracle/ggml_oracle.h"
#include "tests/support/test_paths.h"

#if defined(TM_HAVE_GGML)
#include "ggml.h"
#endif

namespace tensormorph {
namespace {

// Random bytes make valid blocks for every type (scales are finite or not;
// decoding speed does not depend on it).
std::vector<uint8_t> RandomBlocks(DType d, int64_t elements) {
  const DTypeInfo& info = GetDTypeInfo(d);
  std::vector<uint8_t> bytes(
      static_cast<size_t>(elements / info.block_elems * info.block_bytes));
  std::mt19937 rng(7);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

using ToFloat = void (*)(const void* src, float* dst, int64_t n);

// struct ggml_type_traits of the pinned ggml (tests/oracle/ggml_oracle.cc
// reads the same layout).
struct OracleTypeTraits {
  const char* type_name;
  int64_t blck_size;
  int64_t blck_size_interleave;
  size_t type_size;
  bool is_quantized;
  ToFloat to_float;
  void* from_float_ref;
};

// The oracle library's to_float for ggml type `id`, or nullptr when the
// library is absent.
ToFloat OracleToFloat(uint32_t id) {
  static void* handle = [] {
    const std::string path =
        testing::GgmlOracle::DefaultDir() + "/libggml-base.so";
    return dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  }();
  if (handle == nullptr) return nullptr;
  using Traits = const OracleTypeTraits* (*)(int);
  auto traits = reinterpret_cast<Traits>(dlsym(handle, "ggml_get_type_traits"));
  if (traits == nullptr || id >= testing::GgmlOracle::kTypeCount) {
    return nullptr;
  }
  return traits(static_cast<int>(id))->to_float;
}

// ggml's to_float for `d`: the oracle library's, else (built against ggml)
// matched by type name; nullptr without either.
ToFloat GgmlToFloat(DType d) {
  if (const auto id = GgmlTypeIdOf(d)) {
    if (ToFloat f = OracleToFloat(*id)) return f;
  }
#if defined(TM_HAVE_GGML)
  const std::string want(DTypeName(d));
  for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
    const char* name = ggml_type_name(static_cast<ggml_type>(t));
    if (name == nullptr || want.size() != std::strlen(name)) continue;
    if (std::equal(want.begin(), want.end(), name, [](char a, char b) {
          return std::tolower(a) == std::tolower(b);
        })) {
      return ggml_get_type_traits(static_cast<ggml_type>(t))->to_float;
    }
  }
#else
  (void)d;
#endif
  return nullptr;
}

double Seconds(std::chrono::steady_clock::time_point a,
               std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// TENSORMORPH_DECODE_SIMD=0 (or 1) caps the decoders at the scalar
// references (or AVX2), to measure what the vector paths gain.
void CapFromEnvironment() {
  static const bool done = [] {
    if (const char* v = std::getenv("TENSORMORPH_DECODE_SIMD"))
      CapDecodeSimdForTesting(static_cast<DecodeSimd>(std::atoi(v)));
    return true;
  }();
  (void)done;
}

void BM_Decode(benchmark::State& state) {
  CapFromEnvironment();
  const DType d = static_cast<DType>(state.range(0));
  const int64_t n = state.range(1);
  state.SetLabel(std::string(DTypeName(d)));
  const std::vector<uint8_t> blocks = RandomBlocks(d, n);
  // Both sized from n: sized from out.size() (a pointer difference), the
  // second one's destruction draws a false -Wfree-nonheap-object from GCC 12
  // at -O3, which loses track of the allocation.
  const size_t count = static_cast<size_t>(n);
  std::vector<float> out(count);
  const std::vector<float> copy_src(count, 1.0f);
  const ToFloat ggml = GgmlToFloat(d);
  double ours = 0, theirs = 0, memcpy_s = 0;
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    (void)DecodeElements(d, blocks, 0, n, out.data());
    benchmark::ClobberMemory();
    const auto t1 = Clock::now();
    if (ggml != nullptr) ggml(blocks.data(), out.data(), n);
    benchmark::ClobberMemory();
    const auto t2 = Clock::now();
    std::memcpy(out.data(), copy_src.data(), out.size() * sizeof(float));
    benchmark::ClobberMemory();
    const auto t3 = Clock::now();
    ours += Seconds(t0, t1);
    theirs += Seconds(t1, t2);
    memcpy_s += Seconds(t2, t3);
    state.SetIterationTime(Seconds(t0, t1));
  }
  const double elems = static_cast<double>(state.iterations()) * n;
  state.SetItemsProcessed(static_cast<int64_t>(elems));
  state.counters["Gelem/s"] = elems / ours / 1e9;
  state.counters["x_memcpy"] = memcpy_s / ours;
  if (ggml != nullptr) {
    state.counters["ggml_Gelem/s"] = elems / theirs / 1e9;
    state.counters["x_ggml"] = theirs / ours;
  }
}

// Every ggml type we decode.
void Types(benchmark::internal::Benchmark* b) {
  for (int64_t n : {int64_t{1} << 16, int64_t{1} << 20, int64_t{1} << 24}) {
    for (DType d :
         {DType::kF16,     DType::kBF16,   DType::kQ4_0,  DType::kQ4_1,
          DType::kQ5_0,    DType::kQ5_1,   DType::kQ8_0,  DType::kQ2_K,
          DType::kQ3_K,    DType::kQ4_K,   DType::kQ5_K,  DType::kQ6_K,
          DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S, DType::kIQ3_XXS,
          DType::kIQ3_S,   DType::kIQ1_S,  DType::kIQ1_M, DType::kIQ4_NL,
          DType::kIQ4_XS,  DType::kTQ1_0,  DType::kTQ2_0, DType::kMXFP4,
          DType::kNVFP4,   DType::kQ1_0,   DType::kQ2_0}) {
      if (GetCodec(d) == nullptr) continue;
      b->Args({static_cast<int>(d), n});
    }
  }
}
BENCHMARK(BM_Decode)->Apply(Types)->UseManualTime()->Unit(
    benchmark::kMillisecond);

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

// The layer rows: a realistic layer (4096 x 4096; groups of 128 for the
// existing conventions, the format's own for the rest; gpt-oss: two experts)
// decoded as ReadSlice does, 1 MiB of float32 at a time into one reused
// buffer, so the codes stream from memory and the output stays in cache.
// Counters: Gelem/s, and x_gptq / x_ct_int4: that rate over the GPTQ int4 and
// compressed-tensors int4 layers' (the bars issue 30 sets). The two baseline
// layers are written and opened once per process; each iteration times one
// pass of the row and one of each baseline by the same loop and clock
// (thread CPU time), as BM_Decode times ggml and memcpy beside its rows: on
// this shared machine a baseline timed once drifted by up to 1.6x against
// rows timed later, the compressed-tensors row reading 0.63x of itself.
constexpr int64_t kLayerOut = 4096, kLayerIn = 4096;
constexpr char kLayerWeight[] = "model.layers.0.mlp.down_proj.weight";

// A layer checkpoint, written once per process per key, and its quantized
// weight (nullptr when it did not open).
struct Layer {
  std::shared_ptr<const Checkpoint> ckpt;
  const LogicalTensor* t = nullptr;
  std::string error;
};

const Layer& OpenLayer(const std::string& key,
                       const std::function<std::string()>& write) {
  static std::map<std::string, Layer> layers;
  auto [it, fresh] = layers.try_emplace(key);
  Layer& l = it->second;
  if (!fresh) return l;
  auto ckpt = Checkpoint::Open(write());
  if (!ckpt.ok()) {
    l.error = ckpt.status().ToString();
    return l;
  }
  l.ckpt = *std::move(ckpt);
  l.t = l.ckpt->FindTensor(kLayerWeight);
  if (l.t == nullptr) {  // gpt-oss: its experts tensor
    for (const LogicalTensor& t : l.ckpt->tensors()) {
      if (t.encoding->info().quantized) l.t = &t;
    }
  }
  if (l.t == nullptr || !l.t->encoding->info().quantized) {
    l.t = nullptr;
    l.error = "no quantized tensor";
  }
  return l;
}

const Layer& ConventionLayer(bench::Convention c) {
  return OpenLayer(std::string("convention/") + bench::ConventionName(c), [c] {
    return bench::WriteConventionCheckpoint(c, kLayerOut, kLayerIn);
  });
}

// One pass over the whole tensor, as ReadSlice reads it.
bool DecodeLayerOnce(const LogicalTensor& t, std::vector<float>& out) {
  const int64_t chunk = static_cast<int64_t>(out.size());
  for (int64_t first = 0; first < t.num_elements; first += chunk) {
    const int64_t n = std::min(chunk, t.num_elements - first);
    if (!t.encoding->Decode(first, n, out.data()).ok()) return false;
    benchmark::ClobberMemory();
  }
  return true;
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) +
         1e-9 * static_cast<double>(ts.tv_nsec);
}

constexpr int64_t kLayerChunk = (int64_t{1} << 20) / sizeof(float);

// Thread CPU seconds of one pass over `t`; negative when a decode fails.
double TimedPass(const LogicalTensor& t, std::vector<float>& out) {
  const double t0 = ThreadCpuSeconds();
  if (!DecodeLayerOnce(t, out)) return -1;
  return ThreadCpuSeconds() - t0;
}

// The body every layer row shares.
void RunLayer(benchmark::State& state, const Layer& l,
              const std::string& label) {
  CapFromEnvironment();
  const Layer& gptq = ConventionLayer(bench::Convention::kGptqInt4);
  const Layer& ct = ConventionLayer(bench::Convention::kCtInt4Group);
  for (const Layer* x : {&l, &gptq, &ct}) {
    if (x->t == nullptr) {
      state.SkipWithError(x->error.c_str());
      return;
    }
  }
  state.SetLabel(label + " " + l.t->encoding->info().scheme);
  std::vector<float> out(kLayerChunk);
  double ours = 0, gptq_s = 0, ct_s = 0;
  for (auto _ : state) {
    const double a = TimedPass(*l.t, out);
    state.PauseTiming();
    const double g = TimedPass(*gptq.t, out), c = TimedPass(*ct.t, out);
    state.ResumeTiming();
    if (a < 0 || g < 0 || c < 0) {
      state.SkipWithError("decode failed");
      return;
    }
    ours += a, gptq_s += g, ct_s += c;
  }
  // Per element: a baseline's seconds per element over ours.
  const double n = static_cast<double>(state.iterations());
  const double per = ours / (n * static_cast<double>(l.t->num_elements));
  state.counters["Gelem/s"] = 1e-9 / per;
  state.counters["x_gptq"] =
      gptq_s / (n * static_cast<double>(gptq.t->num_elements)) / per;
  state.counters["x_ct_int4"] =
      ct_s / (n * static_cast<double>(ct.t->num_elements)) / per;
}

void BM_DecodeConventionLayer(benchmark::State& state) {
  const auto c = static_cast<bench::Convention>(state.range(0));
  RunLayer(state, ConventionLayer(c), bench::ConventionName(c));
}
BENCHMARK(BM_DecodeConventionLayer)
    ->DenseRange(0, static_cast<int>(bench::Convention::kMlxInt6))
    ->Unit(benchmark::kMillisecond);

// ModelOpt layers (NVFP4, FP8 per tensor, MXFP8, W4A8_AWQ and NVFP4_AWQ
// with their pre_quant_scale).
void BM_DecodeModelOptLayer(benchmark::State& state) {
  const auto m = static_cast<bench::ModelOptLayer>(state.range(0));
  const std::string name = bench::ModelOptLayerName(m);
  RunLayer(state,
           OpenLayer("modelopt/" + name,
                     [m] {
                       return bench::WriteModelOptLayer(m, kLayerOut, kLayerIn);
                     }),
           name);
}
BENCHMARK(BM_DecodeModelOptLayer)
    ->DenseRange(0, static_cast<int>(bench::ModelOptLayer::kNvfp4Awq))
    ->Unit(benchmark::kMillisecond);

// HQQ (4-bit, groups of 64, float16 arithmetic), grouped along axis 1 (/1)
// or axis 0 (/0).
void BM_DecodeHqqLayer(benchmark::State& state) {
  const int axis = static_cast<int>(state.range(0));
  RunLayer(state,
           OpenLayer("hqq/" + std::to_string(axis),
                     [axis] {
                       return bench::WriteHqqLayer(kLayerOut, kLayerIn, axis);
                     }),
           "hqq axis " + std::to_string(axis));
}
BENCHMARK(BM_DecodeHqqLayer)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();
