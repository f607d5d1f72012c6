// Timing pieces the CPU-time benchmarks share: a thread's CPU clock (on a
// loaded machine wall time measures the neighbours) and the plain decode
// pass their ratios are taken against.
#ifndef TENSORMORPH_TESTS_BENCH_BENCH_TIMING_H_
#define TENSORMORPH_TESTS_BENCH_BENCH_TIMING_H_

#include <benchmark/benchmark.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace tensormorph::bench {

// Seconds of CPU this thread has used.
inline double ThreadSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

// Decodes every element of `t` into `buf`, a piece at a time, and returns
// a sum of one value per piece so that nothing is optimized away.
inline float DecodePass(const LogicalTensor& t, std::vector<float>& buf) {
  float acc = 0;
  for (int64_t i = 0; i < t.num_elements;
       i += static_cast<int64_t>(buf.size())) {
    const int64_t n =
        std::min<int64_t>(static_cast<int64_t>(buf.size()), t.num_elements - i);
    (void)t.encoding->Decode(i, n, buf.data());
    benchmark::DoNotOptimize(buf.data());
    acc += buf[0];
  }
  return acc;
}

}  // namespace tensormorph::bench

#endif  // TENSORMORPH_TESTS_BENCH_BENCH_TIMING_H_
