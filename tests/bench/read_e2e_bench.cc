// The user's reads, end to end, beside what they would compare them with,
// in one run (the machine is shared: read the ratios):
//  - `tensormorph --server H read big.safetensors big [--raw] -o FILE`
//    (FILE /dev/null and a file on /dev/shm) of a 1 GiB F32 tensor against
//    a tensormorphd child, beside the bare gRPC baseline
//    (../shared/tools/grpc-baseline: its 1 MiB "proto bytes" stream, best
//    of three, built by its build.sh into $TENSORMORPH_GRPC_BASELINE_DIR or
//    /tmp/tensormorph-grpc-baseline);
//  - `tensormorph read f32.safetensors big -o /dev/shm/x.npy` (embedded),
//    beside python3's numpy.memmap + np.save of the same bytes, and beside
//    the same done in this process (mmap, the .npy header, one write(2)
//    from the mapping: what np.save of a memmap does, without Python).
// A baseline that is not available (no numpy, no protoc) is skipped with a
// message. Each figure is the best of three runs in a round, the median of
// three rounds; process start and connection are in our figures, not in
// the gRPC baseline's.
//   build/tests/bench/read_e2e_bench
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/test_paths.h"

extern char** environ;

namespace tensormorph {
namespace {

using testing::CommandResult;
using testing::RunCommand;

constexpr int64_t kBytes = int64_t{1} << 30;
constexpr int kRounds = 3, kRunsPerRound = 3;

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A 1 GiB F32 tensor "big" [16384, 16384] with every byte on disk (and so
// in the page cache after writing): a pattern of 16 MiB, repeated.
std::string WriteBigF32(const std::string& dir) {
  const std::string path = dir + "/f32.safetensors";
  std::string header =
      R"({"big":{"dtype":"F32","shape":[16384,16384],"data_offsets":[0,1073741824]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  const uint64_t n = header.size();
  std::fwrite(&n, 8, 1, f);
  std::fwrite(header.data(), 1, header.size(), f);
  std::vector<float> block((16 << 20) / 4);
  uint32_t x = 12345;
  for (float& v : block) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v = static_cast<float>(static_cast<int32_t>(x)) * 1e-9f;
  }
  for (int64_t at = 0; at < kBytes; at += 16 << 20) {
    std::fwrite(block.data(), 4, block.size(), f);
  }
  if (std::fclose(f) != 0) std::abort();
  return path;
}

// The wall time of one command, or -1 (with its error printed) when it
// fails.
double TimeCommand(const std::vector<std::string>& argv,
                   int64_t* max_rss_kb = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  const CommandResult r = RunCommand(argv);
  const double s = Seconds(t0);
  if (r.exit_code != 0) {
    std::fprintf(stderr, "%s failed (%d): %s\n", argv[0].c_str(), r.exit_code,
                 r.err.c_str());
    return -1;
  }
  if (max_rss_kb != nullptr) *max_rss_kb = std::max(*max_rss_kb, r.max_rss_kb);
  return s;
}

// A free loopback port (bound, then released).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    std::abort();
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

bool Connectable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok =
      ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// The bare gRPC baseline's server, a child process for the benchmark's life.
class BaselineServer {
 public:
  BaselineServer(const std::string& server, int port) {
    const std::string addr = "127.0.0.1:" + std::to_string(port);
    char* argv[] = {const_cast<char*>(server.c_str()),
                    const_cast<char*>(addr.c_str()), nullptr};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    if (posix_spawn(&pid_, server.c_str(), &actions, nullptr, argv, environ) !=
        0) {
      pid_ = -1;
    }
    posix_spawn_file_actions_destroy(&actions);
    for (int i = 0; i < 500 && pid_ > 0 && !Connectable(port); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~BaselineServer() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  bool running() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
};

// The baseline's binaries: built by its build.sh once (kept for later runs),
// or "" with the reason printed.
std::string BaselineDir() {
  const char* given = std::getenv("TENSORMORPH_GRPC_BASELINE_DIR");
  const std::string dir =
      given != nullptr ? given : "/tmp/tensormorph-grpc-baseline";
  if (::access((dir + "/server").c_str(), X_OK) == 0 &&
      ::access((dir + "/client").c_str(), X_OK) == 0) {
    return dir;
  }
  const std::string script = std::string(TENSORMORPH_SOURCE_DIR) +
                             "/../shared/tools/grpc-baseline/build.sh";
  if (::access(script.c_str(), R_OK) != 0) {
    std::fprintf(stderr,
                 "skipping the bare gRPC baseline: no %s (set "
                 "TENSORMORPH_GRPC_BASELINE_DIR to its built binaries)\n",
                 script.c_str());
    return "";
  }
  const CommandResult r = RunCommand({"/bin/bash", script, dir});
  if (r.exit_code != 0) {
    std::fprintf(stderr, "skipping the bare gRPC baseline: %s failed: %s\n",
                 script.c_str(), r.err.c_str());
    return "";
  }
  return dir;
}

// The baseline client's 1 MiB "proto bytes" figure (best of three), GB/s;
// -1 when it fails.
double BaselineGBps(const std::string& client, int port) {
  const CommandResult r = RunCommand(
      {client, "127.0.0.1:" + std::to_string(port), std::to_string(kBytes)});
  const std::string key = "proto bytes    chunk 1048576 B: best ";
  const size_t at = r.out.find(key);
  if (r.exit_code != 0 || at == std::string::npos) {
    std::fprintf(stderr, "the baseline client failed: %s%s\n", r.out.c_str(),
                 r.err.c_str());
    return -1;
  }
  return std::atof(r.out.c_str() + at + key.size());
}

// What np.save does with a numpy.memmap, in this process: map the file,
// write the .npy header, then the mapped bytes in one write(2).
double MemmapAndWrite(const std::string& path, int64_t data_offset,
                      const std::string& out, const std::string& npy_header) {
  const auto t0 = std::chrono::steady_clock::now();
  const int in = ::open(path.c_str(), O_RDONLY);
  struct stat st {};
  ::fstat(in, &st);
  void* map = ::mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, in, 0);
  const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (in < 0 || fd < 0 || map == MAP_FAILED) std::abort();
  if (::write(fd, npy_header.data(), npy_header.size()) !=
      static_cast<ssize_t>(npy_header.size())) {
    std::abort();
  }
  const char* p = static_cast<const char*>(map) + data_offset;
  for (int64_t left = kBytes; left > 0;) {
    const ssize_t w = ::write(fd, p, static_cast<size_t>(left));
    if (w <= 0) std::abort();
    p += w;
    left -= w;
  }
  ::close(fd);
  ::munmap(map, st.st_size);
  ::close(in);
  return Seconds(t0);
}

constexpr char kNumpySave[] = R"(
import json, struct, sys
import numpy as np
path, out = sys.argv[1], sys.argv[2]
with open(path, 'rb') as f:
    n = struct.unpack('<Q', f.read(8))[0]
    t = json.loads(f.read(n))['big']
a = np.memmap(path, dtype='<f4', mode='r', offset=8 + n + t['data_offsets'][0],
              shape=tuple(t['shape']))
np.save(out, a)
)";

void BM_ReadEndToEnd(benchmark::State& state) {
  const std::string dir = testing::MakeTempDir();
  const std::string big = WriteBigF32(dir);
  const bool shm = ::access("/dev/shm", W_OK) == 0;
  if (!shm) std::fprintf(stderr, "no writable /dev/shm: its rows skipped\n");
  const std::string out = shm ? "/dev/shm/tensormorph-read-e2e-" +
                                    std::to_string(::getpid()) + ".npy"
                              : "";
  testing::ServerProcess server({dir});
  const std::string baseline = BaselineDir();
  const int baseline_port = FreePort();
  std::unique_ptr<BaselineServer> bare;
  if (!baseline.empty()) {
    bare =
        std::make_unique<BaselineServer>(baseline + "/server", baseline_port);
    if (!bare->running()) std::fprintf(stderr, "baseline server failed\n");
  }
  // Debian's interpreter first: deploy/install_deps.sh installs
  // python3-numpy for it, while a python3 earlier on PATH (pyenv, a venv)
  // may lack numpy.
  std::string python;
  for (const char* candidate : {"/usr/bin/python3", "python3"}) {
    if (RunCommand({candidate, "-c", "import numpy"}).exit_code == 0) {
      python = candidate;
      break;
    }
  }
  const bool numpy = !python.empty();
  if (!numpy) {
    std::fprintf(stderr,
                 "skipping numpy's memmap + np.save: neither /usr/bin/python3 "
                 "nor python3 imports numpy (apt install python3-numpy)\n");
  }
  int64_t data_offset = 0;  // where the tensor starts: after the header
  {
    FILE* f = std::fopen(big.c_str(), "rb");
    uint64_t n = 0;
    if (f == nullptr || std::fread(&n, 8, 1, f) != 1) std::abort();
    std::fclose(f);
    data_offset = 8 + static_cast<int64_t>(n);
  }
  std::string npy_header;
  {
    std::string dict =
        "{'descr': '<f4', 'fortran_order': False, 'shape': (16384, 16384), }";
    dict.append(128 - 10 - dict.size() - 1, ' ');
    npy_header =
        std::string("\x93NUMPY\x01\x00", 8) + '\x76' + '\x00' + dict + "\n";
  }

  struct Remote {
    const char* name;
    bool raw, to_shm;
  };
  const Remote kRemote[] = {{"raw_null", true, false},
                            {"raw_shm", true, true},
                            {"f32_null", false, false},
                            {"f32_shm", false, true}};
  std::map<std::string, std::vector<double>> seconds;  // best of each round
  std::vector<double> bare_gbps;
  int64_t embedded_rss_kb = 0;
  auto best_of = [](auto run) {
    double best = -1;
    for (int i = 0; i < kRunsPerRound; ++i) {
      const double s = run();
      if (s > 0 && (best < 0 || s < best)) best = s;
    }
    return best;
  };
  for (auto _ : state) {
    for (int round = 0; round < kRounds; ++round) {
      if (bare != nullptr && bare->running()) {
        const double g = BaselineGBps(baseline + "/client", baseline_port);
        if (g > 0) bare_gbps.push_back(g);
      }
      for (const Remote& r : kRemote) {
        if (r.to_shm && !shm) continue;
        std::vector<std::string> argv = {testing::CliPath(),
                                         "--server",
                                         server.address(),
                                         "read",
                                         "f32.safetensors",
                                         "big",
                                         "-o",
                                         r.to_shm ? out : "/dev/null"};
        if (r.raw) argv.push_back("--raw");
        seconds[r.name].push_back(best_of([&] { return TimeCommand(argv); }));
        if (r.to_shm) std::remove(out.c_str());
      }
      if (!shm) continue;
      seconds["embedded_shm"].push_back(best_of([&] {
        const double s =
            TimeCommand({testing::CliPath(), "read", big, "big", "-o", out},
                        &embedded_rss_kb);
        std::remove(out.c_str());
        return s;
      }));
      seconds["memmap_write"].push_back(best_of([&] {
        const double s = MemmapAndWrite(big, data_offset, out, npy_header);
        std::remove(out.c_str());
        return s;
      }));
      if (numpy) {
        seconds["numpy"].push_back(best_of([&] {
          const double s = TimeCommand({python, "-c", kNumpySave, big, out});
          std::remove(out.c_str());
          return s;
        }));
      }
    }
  }
  const double gb = static_cast<double>(kBytes) / 1e9;
  if (std::getenv("TENSORMORPH_BENCH_VERBOSE")) {
    for (const auto& [name, v] : seconds) {
      for (size_t i = 0; i < v.size(); ++i) {
        std::fprintf(stderr, "round %zu: %s %.3f s\n", i, name.c_str(), v[i]);
      }
    }
    for (size_t i = 0; i < bare_gbps.size(); ++i) {
      std::fprintf(stderr, "round %zu: bare %.2f GB/s\n", i, bare_gbps[i]);
    }
  }
  const double bare_median = bare_gbps.empty() ? 0 : Median(bare_gbps);
  if (bare_median > 0) state.counters["bare_GB/s"] = bare_median;
  for (const Remote& r : kRemote) {
    if (seconds[r.name].empty()) continue;
    const double gbps = gb / Median(seconds[r.name]);
    state.counters[std::string(r.name) + "_GB/s"] = gbps;
    if (bare_median > 0) {
      state.counters[std::string(r.name) + "_x_bare"] = gbps / bare_median;
    }
  }
  if (!seconds["embedded_shm"].empty()) {
    const double ours = Median(seconds["embedded_shm"]);
    state.counters["embedded_shm_s"] = ours;
    state.counters["embedded_peak_RSS_MB"] =
        static_cast<double>(embedded_rss_kb) / 1024;
    const double mm = Median(seconds["memmap_write"]);
    state.counters["memmap_write_s"] = mm;
    state.counters["embedded_x_memmap_write"] = mm / ours;
    if (!seconds["numpy"].empty()) {
      const double np = Median(seconds["numpy"]);
      state.counters["numpy_s"] = np;
      state.counters["embedded_x_numpy"] = np / ours;
    }
  }
}
BENCHMARK(BM_ReadEndToEnd)
    ->Iterations(1)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();
