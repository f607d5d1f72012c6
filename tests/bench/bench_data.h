// Checkpoints generated for benchmarks: sizes chosen by the benchmark,
// written once per process into a temporary directory.
#ifndef TENSORMORPH_TESTS_BENCH_BENCH_DATA_H_
#define TENSORMORPH_TESTS_BENCH_BENCH_DATA_H_

#include <cstdint>
#include <string>

namespace tensormorph::bench {

// A pair of GGUF files under a fresh directory: `source.gguf` with
// `tensors` F32 tensors of [rows, 4096] and `q8_0.gguf` with the same values
// in Q8_0. Returns the directory.
std::string WriteDiffPair(int tensors, int64_t rows);

}  // namespace tensormorph::bench

#endif  // TENSORMORPH_TESTS_BENCH_BENCH_DATA_H_
