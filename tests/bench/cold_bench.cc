// Cold files: a checkpoint not in the page cache (each file fsync'd, then
// evicted with posix_fadvise(POSIX_FADV_DONTNEED), its absence checked with
// mincore before every timing) read raw and decoded with ReadSlice and
// diffed with QuantDiff over loopback, each beside a sequential read() of
// the same files into a 1 MiB buffer, evicted the same way, in the same
// run. The target (issue 20) is a ratio >= 0.8 for every row. Decoding and
// diffing cost more than the disk here even from the page cache, so those
// rows also time the same call again warm: warm_vs_cold near 1 says the
// disk is hidden behind the work.
//
// The Mmap* rows are the hints themselves, on the first 256 MiB of the
// source file, so the choice in core/io/read_ahead.h is a measurement:
// memcpy out of a mapping in 1 MiB steps as MappedFile maps (MADV_RANDOM)
// with no hint, with MADV_WILLNEED of a 32 MiB window ahead (in 2 MiB
// pieces: the kernel reads at most its read-ahead size per call), with
// MADV_NORMAL or MADV_SEQUENTIAL instead, and with ReadAhead (what the
// readers use). MADV_POPULATE_READ of each step, measured once at 0.001x
// (its faults under MADV_RANDOM stay one page each: 211 s for 256 MiB), is
// left out.
//   build/tests/bench/cold_bench
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "client/client.h"
#include "core/io/read_ahead.h"
#include "server/server.h"
#include "server/stream_heap.h"
#include "tests/bench/bench_data.h"
#include "tests/support/loopback_server.h"

namespace tensormorph {
namespace {

// As tensormorphd and the CLI do (the baseline shares the process).
const bool kHeapTuned = [] {
  KeepStreamBuffersOnHeap();
  return true;
}();

constexpr int64_t kRows = 65536;  // [65536, 4096]: 1 GiB of F32 source
constexpr size_t kStep = size_t{1} << 20;
constexpr size_t kMmapBytes = size_t{256} << 20;

struct Files {
  std::string dir, source, q8;
};

Files& Get() {
  static Files* f = [] {
    auto* f = new Files;
    f->dir = bench::WriteDiffPair(1, kRows);
    f->source = f->dir + "/source.gguf";
    f->q8 = f->dir + "/q8_0.gguf";
    return f;
  }();
  return *f;
}

// A server of its own for each timing: pages a process has mapped in stay
// in the page cache whatever posix_fadvise says, so the server that read a
// file must be gone before the file can be evicted again.
testing::LoopbackServer Serve(const Files& f) {
  return testing::StartLoopbackServer({f.dir}, /*workers=*/2);
}

int OpenOrDie(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::perror(path.c_str());
    std::abort();
  }
  return fd;
}

size_t FileSize(int fd) {
  return static_cast<size_t>(::lseek(fd, 0, SEEK_END));
}

// Pages of `path` in the page cache now, as a fraction.
double Resident(const std::string& path) {
  const int fd = OpenOrDie(path);
  const size_t size = FileSize(fd);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((size + page - 1) / page);
  ::mincore(p, size, in.data());
  ::munmap(p, size);
  size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return static_cast<double>(n) / static_cast<double>(in.size());
}

// Writes `paths` back and drops them from the page cache; aborts unless
// mincore then sees (almost) none of their pages.
void Evict(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    const int fd = OpenOrDie(path);
    ::fsync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
    const double resident = Resident(path);
    if (resident > 0.01) {
      std::fprintf(stderr, "%s: %.1f%% still cached after eviction\n",
                   path.c_str(), resident * 100);
      std::abort();
    }
  }
}

template <typename Fn>
double Seconds(Fn fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

// The baseline: the first `limit` bytes of each file, cold, read() front to
// back into one 1 MiB buffer. Returns the seconds.
double ColdRead(const std::vector<std::string>& paths,
                size_t limit = SIZE_MAX) {
  Evict(paths);
  std::vector<char> buf(kStep);
  return Seconds([&] {
    for (const std::string& path : paths) {
      const int fd = OpenOrDie(path);
      size_t done = 0;
      while (done < limit) {
        const ssize_t n = ::read(fd, buf.data(), std::min(kStep, limit - done));
        if (n <= 0) break;
        done += static_cast<size_t>(n);
      }
      ::close(fd);
    }
  });
}

size_t Bytes(const std::vector<std::string>& paths) {
  size_t total = 0;
  for (const std::string& p : paths) {
    const int fd = OpenOrDie(p);
    total += FileSize(fd);
    ::close(fd);
  }
  return total;
}

// The disk is shared with whatever else runs: the baseline is read() before
// and after the timing, averaged.
void Report(benchmark::State& state, size_t bytes, double seconds,
            double baseline_seconds) {
  state.counters["GB/s"] = static_cast<double>(bytes) / 1e9 / seconds;
  state.counters["read()_GB/s"] =
      static_cast<double>(bytes) / 1e9 / baseline_seconds;
  state.counters["vs_read()"] = baseline_seconds / seconds;
}

enum class Hint { kNone, kWillNeed, kNormal, kSequential, kReadAhead };

// memcpy of the source file's first kMmapBytes out of a fresh mapping, cold.
void BM_Mmap(benchmark::State& state, Hint hint) {
  Files& f = Get();
  for (auto _ : state) {
    const double base = ColdRead({f.source}, kMmapBytes);
    Evict({f.source});
    const int fd = OpenOrDie(f.source);
    auto* p = static_cast<uint8_t*>(
        ::mmap(nullptr, kMmapBytes, PROT_READ, MAP_PRIVATE, fd, 0));
    ::close(fd);
    ::madvise(p, kMmapBytes,
              hint == Hint::kSequential ? MADV_SEQUENTIAL
              : hint == Hint::kNormal   ? MADV_NORMAL
                                        : MADV_RANDOM);
    std::vector<uint8_t> out(kStep);
    ReadAhead ahead({p, kMmapBytes});
    const double s = Seconds([&] {
      for (size_t at = 0; at < kMmapBytes; at += kStep) {
        if (hint == Hint::kReadAhead) ahead.Reading({p + at, kStep});
        if (hint == Hint::kWillNeed && at % (16 * kStep) == 0) {
          // The next 32 MiB not asked for yet, every 16 MiB.
          const size_t from = at == 0 ? 0 : at + 16 * kStep;
          const size_t to = std::min(kMmapBytes, at + 32 * kStep);
          for (size_t q = from; q < to; q += 2 * kStep) {
            ::madvise(p + q, std::min(2 * kStep, to - q), MADV_WILLNEED);
          }
        }
        std::memcpy(out.data(), p + at, kStep);
        benchmark::ClobberMemory();
      }
    });
    ::munmap(p, kMmapBytes);
    Report(state, kMmapBytes, s, (base + ColdRead({f.source}, kMmapBytes)) / 2);
  }
}
BENCHMARK_CAPTURE(BM_Mmap, random_no_hint, Hint::kNone)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Mmap, random_willneed_window, Hint::kWillNeed)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Mmap, normal, Hint::kNormal)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Mmap, sequential, Hint::kSequential)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Mmap, random_then_ReadAhead, Hint::kReadAhead)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// ReadSlice of the one tensor, cold, over loopback: the F32 source raw, or
// the Q8_0 tensor decoded (against read() of its file).
void BM_ReadSlice(benchmark::State& state, bool raw) {
  Files& f = Get();
  const std::string path = raw ? f.source : f.q8;
  const std::string name = raw ? "source.gguf" : "q8_0.gguf";
  v1::ReadSliceRequest req;
  req.set_checkpoint(name);
  req.set_tensor("blk.0.ffn_down.weight");
  req.set_mode(raw ? v1::OUTPUT_MODE_RAW : v1::OUTPUT_MODE_FLOAT32);
  for (auto _ : state) {
    const double base = ColdRead({path});
    testing::LoopbackServer server = Serve(f);
    Client* c = server.client.get();
    // Opened (parsed) before eviction, as by a server that served it before.
    (void)c->GetCheckpoint(name);
    Evict({path});
    int64_t got = 0;
    auto read = [&] {
      got = 0;
      absl::Status st = c->ReadSlice(req, [&](const v1::SliceChunk& ch) {
        got += static_cast<int64_t>(ch.data().size());
        return true;
      });
      if (!st.ok()) {
        std::fprintf(stderr, "%s\n", st.ToString().c_str());
        std::abort();
      }
    };
    const double s = Seconds(read);
    // The same call again, the file now in the page cache: what the call
    // costs without the disk (decoding makes 4x the file's bytes).
    state.counters["warm_vs_cold"] = Seconds(read) / s;
    server = {};
    Report(state, Bytes({path}), s, (base + ColdRead({path})) / 2);
    state.counters["bytes_out"] = static_cast<double>(got);
  }
}
BENCHMARK_CAPTURE(BM_ReadSlice, raw_f32, true)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ReadSlice, decoded_q8_0, false)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// QuantDiff of the Q8_0 checkpoint against its F32 source, both cold.
void BM_QuantDiff(benchmark::State& state) {
  Files& f = Get();
  v1::QuantDiffRequest req;
  req.set_checkpoint("q8_0.gguf");
  req.set_reference("source.gguf");
  for (auto _ : state) {
    const double base = ColdRead({f.source, f.q8});
    testing::LoopbackServer server = Serve(f);
    Client* c = server.client.get();
    (void)c->GetCheckpoint("source.gguf");
    (void)c->GetCheckpoint("q8_0.gguf");
    Evict({f.source, f.q8});
    auto diff = [&] {
      absl::Status st =
          c->QuantDiff(req, [](const v1::QuantDiffEvent&) { return true; });
      if (!st.ok()) {
        std::fprintf(stderr, "%s\n", st.ToString().c_str());
        std::abort();
      }
    };
    const double s = Seconds(diff);
    // Again from the page cache: the diff's own cost, without the disk.
    state.counters["warm_vs_cold"] = Seconds(diff) / s;
    server = {};
    Report(state, Bytes({f.source, f.q8}), s,
           (base + ColdRead({f.source, f.q8})) / 2);
  }
}
BENCHMARK(BM_QuantDiff)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();
