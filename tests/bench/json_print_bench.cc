// The gateway's JSON printer on the largest reply it prints: a 1024x1024-cell
// GetHeatmapResponse (1M doubles in `values`, 1M int64 in `groups`, ~26 MB
// of JSON), beside protobuf's MessageToJsonString timed in the same
// iterations (so a busy machine slows both alike).
//   build/tests/bench/json_print_bench
// Counters: MB/s (ours, of JSON), protobuf_MB/s, x_protobuf (protobuf's
// time over ours).
#include <benchmark/benchmark.h>
#include <google/protobuf/util/json_util.h>

#include <chrono>
#include <random>
#include <string>

#include "proto/json_print.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {
namespace {

// Cells as the server fills them: means at full double precision (which
// take %.17g, protobuf's slow path too), group ids of 8x8-cell blocks.
v1::GetHeatmapResponse Heatmap(int side) {
  v1::GetHeatmapResponse h;
  h.set_tensor("blk.0.ffn_down.weight");
  h.add_shape(side * 4);
  h.add_shape(side * 4);
  h.set_rows(side * 4);
  h.set_cols(side * 4);
  h.set_width(side);
  h.set_height(side);
  for (int i = 0; i <= side; ++i) {
    h.add_row_edges(i * 4);
    h.add_col_edges(i * 4);
  }
  std::mt19937_64 rng(1);
  std::normal_distribution<double> value(0.0, 0.02);
  for (int r = 0; r < side; ++r) {
    for (int c = 0; c < side; ++c) {
      h.add_values(value(rng));
      h.add_groups(int64_t{r / 8} * (side / 8) + c / 8);
    }
  }
  h.set_min(-0.1);
  h.set_max(0.1);
  return h;
}

double Seconds(std::chrono::steady_clock::time_point a,
               std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void BM_HeatmapJson(benchmark::State& state) {
  const v1::GetHeatmapResponse h = Heatmap(static_cast<int>(state.range(0)));
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  double ours = 0, theirs = 0;
  size_t bytes = 0;
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    std::string a = PrintMessageJson(h);
    benchmark::DoNotOptimize(a.data());
    const auto t1 = Clock::now();
    std::string b;
    (void)google::protobuf::util::MessageToJsonString(h, &b, options);
    benchmark::DoNotOptimize(b.data());
    const auto t2 = Clock::now();
    if (a != b) {
      state.SkipWithError("the printers disagree");
      return;
    }
    bytes = a.size();
    ours += Seconds(t0, t1);
    theirs += Seconds(t1, t2);
    state.SetIterationTime(Seconds(t0, t1));
  }
  const double mb = static_cast<double>(state.iterations()) * bytes / 1e6;
  state.SetLabel(std::to_string(bytes / 1000000) + " MB of JSON");
  state.counters["MB/s"] = mb / ours;
  state.counters["protobuf_MB/s"] = mb / theirs;
  state.counters["x_protobuf"] = theirs / ours;
}
BENCHMARK(BM_HeatmapJson)
    ->Arg(1024)
    ->Arg(256)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();
