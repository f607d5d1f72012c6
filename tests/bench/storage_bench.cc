// A 1 GiB object read through core/io's storage layer from nginx on
// loopback, beside plain transfers of the same bytes from the same server
// in the same run: libcurl's single GET into the same buffer (vs_libcurl:
// the same copy out of libcurl's buffer) and the curl program writing to
// /dev/null (vs_curl). The target (issue 32) is >= 0.8 for both.
//
// Rows: the layer as ObjectStore opens a URL (block cache on: a read this
// long goes straight to nginx in parallel ranges), and one HttpObjectReader
// read of the whole range (a single stream, as a cache-less reader does).
// And the header-only listing of 280 shards behind 20 ms of latency per
// request, against the serial bound.
//   build/tests/bench/storage_bench
#include <benchmark/benchmark.h>
#include <curl/curl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "core/format/checkpoint.h"
#include "core/io/http_object.h"
#include "core/io/object_store.h"
#include "core/io/remote_files.h"
#include "tests/support/many_shards.h"
#include "tests/support/process.h"
#include "tests/support/storage_servers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

constexpr uint64_t kBytes = uint64_t{1} << 30;

struct Fixture {
  std::string dir;
  std::unique_ptr<testing::NginxServer> nginx;
  std::string url;
  std::string buffer;
  double libcurl_seconds = 0;
  double curl_program_seconds = 0;
};

Fixture& Get() {
  static Fixture* f = [] {
    auto* f = new Fixture;
    f->dir = testing::MakeTempDir();
    std::string chunk(1 << 20, '\0');
    std::mt19937 rng(5);
    for (char& c : chunk) c = static_cast<char>(rng());
    {
      std::ofstream out(f->dir + "/big.bin", std::ios::binary);
      for (uint64_t i = 0; i < kBytes / chunk.size(); ++i) {
        chunk[0] = static_cast<char>(i);  // no two MiB alike
        out.write(chunk.data(), chunk.size());
      }
    }
    f->nginx = std::make_unique<testing::NginxServer>(f->dir);
    f->url = f->nginx->Url("/big.bin");
    f->buffer.assign(kBytes, '\0');
    return f;
  }();
  return *f;
}

size_t CopyInto(char* data, size_t size, size_t n, void* user) {
  auto* at = static_cast<std::pair<char*, uint64_t>*>(user);
  const uint64_t len = uint64_t{size} * n;
  if (at->second + len > kBytes) return 0;
  std::memcpy(at->first + at->second, data, len);
  at->second += len;
  return len;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
      .count();
}

void BM_LibcurlSingleGet(benchmark::State& state) {
  Fixture& f = Get();
  CURL* h = curl_easy_init();
  double total = 0;
  for (auto _ : state) {
    std::pair<char*, uint64_t> at{f.buffer.data(), 0};
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, f.url.c_str());
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &CopyInto);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &at);
    const auto start = std::chrono::steady_clock::now();
    if (curl_easy_perform(h) != CURLE_OK || at.second != kBytes) {
      state.SkipWithError("libcurl GET failed");
      break;
    }
    const double s = Seconds(start);
    total += s;
    state.SetIterationTime(s);
  }
  curl_easy_cleanup(h);
  f.libcurl_seconds = total / static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
}

void BM_CurlProgramToDevNull(benchmark::State& state) {
  Fixture& f = Get();
  double total = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    testing::CommandResult r = testing::RunCommand(
        {"/usr/bin/curl", "-s", "-f", "-o", "/dev/null", f.url});
    if (r.exit_code != 0) {
      state.SkipWithError("curl failed");
      break;
    }
    const double s = Seconds(start);
    total += s;
    state.SetIterationTime(s);
  }
  f.curl_program_seconds = total / static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
}

void Report(benchmark::State& state, double total) {
  Fixture& f = Get();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytes));
  const double mean = total / static_cast<double>(state.iterations());
  if (f.libcurl_seconds > 0 && total > 0) {
    state.counters["vs_libcurl"] = f.libcurl_seconds / mean;
  }
  if (f.curl_program_seconds > 0 && total > 0) {
    state.counters["vs_curl"] = f.curl_program_seconds / mean;
  }
}

void BM_StoreOpenAndRead(benchmark::State& state) {
  Fixture& f = Get();
  StorageOptions o;
  o.cache = BlockCacheOptions{};
  o.cache->parallel_fetches = static_cast<int>(state.range(0));
  auto store = ObjectStore::Create(std::move(o));
  if (!store.ok()) {
    state.SkipWithError("ObjectStore::Create failed");
    return;
  }
  double total = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    auto r = (*store)->Open(f.url);
    if (!r.ok() || !(*r)->ReadAt(0, kBytes, f.buffer.data()).ok()) {
      state.SkipWithError("read through the layer failed");
      break;
    }
    const double s = Seconds(start);
    total += s;
    state.SetIterationTime(s);
  }
  Report(state, total);
}

void BM_HttpObjectSingleRange(benchmark::State& state) {
  Fixture& f = Get();
  auto http = std::make_shared<HttpClient>(HttpOptions{});
  double total = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    HttpSource s;
    s.url = f.url;
    auto r = HttpObjectReader::Open(http, s);
    if (!r.ok() || !(*r)->ReadAt(0, kBytes, f.buffer.data()).ok()) {
      state.SkipWithError("read failed");
      break;
    }
    const double sec = Seconds(start);
    total += sec;
    state.SetIterationTime(sec);
  }
  Report(state, total);
}

// Issue 32: the header-only listing of a 280-shard checkpoint through a
// proxy that delays every request by 20 ms, against the serial bound (its
// requests one after another, each paying the delay): opening reads the
// index, then each shard's length and header in parallel (bounded), so it
// costs a few round trips, not one per shard.
void BM_List280ShardsWith20msLatency(benchmark::State& state) {
  constexpr int kShards = 280;
  constexpr double kDelaySeconds = 0.020;
  static const std::string dir = [] {
    std::string d = testing::MakeTempDir() + "/big";
    std::filesystem::create_directories(d);
    testing::WriteManyShards(d, kShards);
    return d;
  }();
  static testing::NginxServer nginx(
      std::filesystem::path(dir).parent_path().string());
  static testing::FaultProxy proxy(nginx.port());
  proxy.Inject("delay_ms=20&count=100000000");
  int requests = 0;
  double total = 0;
  for (auto _ : state) {
    RemoteFilesOptions o;
    o.storage.env = [](absl::string_view) -> std::optional<std::string> {
      return std::nullopt;
    };
    auto remote = RemoteFiles::Create(std::move(o));  // no cache between runs
    if (!remote.ok()) {
      state.SkipWithError("RemoteFiles::Create failed");
      return;
    }
    OpenOptions open;
    open.remote = *remote;
    const int before = proxy.Requests();
    const auto start = std::chrono::steady_clock::now();
    auto c = Checkpoint::Open(proxy.Url("/big/"), open);
    const double s = Seconds(start);
    if (!c.ok() || (*c)->stored_tensors().size() != 3u * kShards) {
      state.SkipWithError("the listing failed");
      return;
    }
    requests = proxy.Requests() - before;
    total += s;
    state.SetIterationTime(s);
  }
  const double mean = total / static_cast<double>(state.iterations());
  const double serial = requests * kDelaySeconds;
  state.counters["shards"] = kShards;
  state.counters["requests"] = requests;
  state.counters["serial_bound_s"] = serial;
  state.counters["seconds"] = mean;
  state.counters["vs_serial_bound"] = mean / serial;
}
BENCHMARK(BM_List280ShardsWith20msLatency)
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_LibcurlSingleGet)
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CurlProgramToDevNull)
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StoreOpenAndRead)
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_HttpObjectSingleRange)
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();
