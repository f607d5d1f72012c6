// InspectScalars over loopback: scalars per second in batches of 10,000 and
// the latency of single-scalar calls (p50, p99), beside a unary ping
// (GetServerInfo) measured in the same run on the same connection, and the
// p99 of single-scalar calls while another connection streams a 1 GiB
// ReadSlice (small calls must not queue behind stream chunks). BM_Latency
// prints every figure and its ratio in one row:
//   build/tests/bench/inspect_bench --benchmark_filter=Latency
// BM_ShardedLatency: a 280-shard checkpoint against one file of the same
// tensors. BM_ScalarCliEndToEnd: `tensormorph --json scalar` of 100,000
// indices as a user runs it, and a terminal preview of a 1 GiB tensor,
// beside the binary calls they make.
#include <benchmark/benchmark.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "server/nonblocking_log.h"
#include "server/server.h"
#include "server/stream_heap.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/loopback_server.h"
#include "tests/support/process.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

// As tensormorphd and the CLI do (the baseline shares the process); and the
// log as tensormorphd writes it (each call logs a line, off the call's
// thread).
const bool kHeapTuned = [] {
  KeepStreamBuffersOnHeap();
  InstallNonBlockingLog("inspect_bench");
  return true;
}();

constexpr int64_t kRows = 4096, kCols = 4096;  // a Q4_K [4096, 4096] matrix
constexpr int kCalls = 4000;
constexpr int64_t kStreamBytes = int64_t{1} << 30;  // the concurrent stream

struct Fixture {
  std::string dir;  // the served root: m.gguf, big.safetensors
  testing::LoopbackServer loopback;
  Client* client = nullptr;
  // A second connection (its own subchannel, not shared with `client`'s)
  // for the concurrent stream.
  std::unique_ptr<Client> streamer;
  double ping_p50_us = 0;
};

Fixture& Get() {
  static Fixture* f = [] {
    using namespace ::tensormorph::testing;
    auto* f = new Fixture;
    const std::string dir = MakeTempDir();
    f->dir = dir;
    std::vector<float> v(static_cast<size_t>(kRows * kCols));
    std::mt19937 rng(3);
    std::normal_distribution<float> g(0, 0.02f);
    for (float& x : v) x = g(rng);
    GgufSpec spec;
    GgufTensorSpec w;
    w.name = "w";
    w.ne = {kCols, kRows};
    w.type_id = 12;  // Q4_K
    w.data = QuantizeQ4_K(v);
    spec.tensors.push_back(std::move(w));
    WriteFile(dir + "/m.gguf", BuildGguf(spec));
    // A hole: the stream's bytes cost no disk, and the page cache serves
    // them as it would a warm checkpoint.
    WriteSparseSafetensors(
        dir + "/big.safetensors",
        absl::StrCat(R"({"big":{"dtype":"F32","shape":[)", kStreamBytes / 4,
                     R"(],"data_offsets":[0,)", kStreamBytes, "]}}"),
        kStreamBytes);
    f->loopback = StartLoopbackServer({dir}, /*workers=*/2);
    f->client = f->loopback.client.get();
    (void)f->client->GetCheckpoint("m.gguf");  // opened once, as when serving
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxReceiveMessageSize(-1);
    f->streamer = std::make_unique<Client>(
        grpc::CreateCustomChannel(f->loopback.address,
                                  grpc::InsecureChannelCredentials(), args),
        ClientOptions{});
    return f;
  }();
  return *f;
}

// One call's time in microseconds; a failed call aborts the benchmark.
template <typename Call>
double MicrosOf(Call call) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!call()) std::abort();
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now() - t0)
      .count();
}

// Times `call` kCalls times; reports p50 and p99 in microseconds.
template <typename Call>
std::pair<double, double> Latencies(Call call) {
  std::vector<double> us;
  us.reserve(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!call(i)) std::abort();
    us.push_back(std::chrono::duration<double, std::micro>(
                     std::chrono::steady_clock::now() - t0)
                     .count());
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 99 / 100]};
}

void BM_UnaryPingBaseline(benchmark::State& state) {
  Fixture& f = Get();
  for (auto _ : state) {
    auto [p50, p99] =
        Latencies([&](int) { return f.client->GetServerInfo().ok(); });
    f.ping_p50_us = p50;
    state.counters["p50_us"] = p50;
    state.counters["p99_us"] = p99;
  }
}
BENCHMARK(BM_UnaryPingBaseline)->Iterations(1)->UseRealTime();

void BM_InspectOneScalar(benchmark::State& state) {
  Fixture& f = Get();
  std::mt19937_64 rng(5);
  for (auto _ : state) {
    auto [p50, p99] = Latencies([&](int) {
      v1::InspectScalarsRequest r;
      r.set_checkpoint("m.gguf");
      r.set_tensor("w");
      r.add_flat_indices(static_cast<int64_t>(rng() % (kRows * kCols)));
      auto resp = f.client->InspectScalars(r);
      return resp.ok() && resp->scalars_size() == 1;
    });
    state.counters["p50_us"] = p50;
    state.counters["p99_us"] = p99;
    if (f.ping_p50_us > 0) state.counters["p50_vs_ping"] = p50 / f.ping_p50_us;
  }
}
BENCHMARK(BM_InspectOneScalar)->Iterations(1)->UseRealTime();

bool InspectOne(Client& c, std::mt19937_64& rng) {
  v1::InspectScalarsRequest r;
  r.set_checkpoint("m.gguf");
  r.set_tensor("w");
  r.add_flat_indices(static_cast<int64_t>(rng() % (kRows * kCols)));
  auto resp = c.InspectScalars(r);
  return resp.ok() && resp->scalars_size() == 1;
}

// Streams big.safetensors raw over the second connection, again and again,
// until `stop`; counts the bytes received.
void StreamUntil(Client& c, const std::atomic<bool>& stop,
                 std::atomic<int64_t>* bytes) {
  v1::ReadSliceRequest req;
  req.set_checkpoint("big.safetensors");
  req.set_tensor("big");
  req.set_mode(v1::OUTPUT_MODE_RAW);
  while (!stop.load()) {
    absl::Status s = c.ReadSlice(req, [&](const v1::SliceChunk& ch) {
      bytes->fetch_add(static_cast<int64_t>(ch.data().size()));
      return !stop.load();
    });
    if (!s.ok() && !stop.load()) {
      std::fprintf(stderr, "stream: %s\n", s.ToString().c_str());
      std::abort();
    }
  }
}

// Issue 20's latency targets in one run: one-scalar p50 against a unary
// ping's p50 on the same connection (<= 1.2), and one-scalar p99 while a
// 1 GiB stream runs on another connection against the idle p99 (<= 3).
void BM_Latency(benchmark::State& state) {
  Fixture& f = Get();
  std::mt19937_64 rng(7);
  for (auto _ : state) {
    // Warm both paths (connection, checkpoint, the stream's page cache).
    for (int i = 0; i < 200; ++i) {
      if (!f.client->GetServerInfo().ok() || !InspectOne(*f.client, rng))
        std::abort();
    }
    // Interleaved so that both see the same machine load.
    std::vector<double> ping, one;
    ping.reserve(kCalls);
    one.reserve(kCalls);
    for (int i = 0; i < kCalls; ++i) {
      ping.push_back(MicrosOf([&] { return f.client->GetServerInfo().ok(); }));
      one.push_back(MicrosOf([&] { return InspectOne(*f.client, rng); }));
    }
    std::atomic<bool> stop{false};
    std::atomic<int64_t> streamed{0};
    std::thread streamer([&] { StreamUntil(*f.streamer, stop, &streamed); });
    while (streamed.load() < (int64_t{64} << 20)) {  // the stream is flowing
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::vector<double> loaded, loaded_ping;
    loaded.reserve(kCalls);
    const int64_t streamed_before = streamed.load();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) {
      loaded.push_back(MicrosOf([&] { return InspectOne(*f.client, rng); }));
      if (i % 4 == 0) {
        loaded_ping.push_back(
            MicrosOf([&] { return f.client->GetServerInfo().ok(); }));
      }
    }
    const double loaded_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    const int64_t streamed_bytes = streamed.load() - streamed_before;
    stop.store(true);
    streamer.join();
    auto pct = [](std::vector<double>& v, int p) {
      std::sort(v.begin(), v.end());
      return v[v.size() * p / 100];
    };
    const double ping50 = pct(ping, 50), ping99 = pct(ping, 99);
    const double one50 = pct(one, 50), one99 = pct(one, 99);
    const double loaded50 = pct(loaded, 50), loaded99 = pct(loaded, 99);
    state.counters["ping_p50_us"] = ping50;
    state.counters["ping_p99_us"] = ping99;
    state.counters["one_p50_us"] = one50;
    state.counters["one_p99_us"] = one99;
    state.counters["streamed_one_p50_us"] = loaded50;
    state.counters["streamed_one_p99_us"] = loaded99;
    state.counters["streamed_ping_p99_us"] = pct(loaded_ping, 99);
    state.counters["p50_vs_ping"] = one50 / ping50;
    state.counters["streamed_p99_vs_idle_p99"] = loaded99 / one99;
    // The stream's rate while the small calls ran (it must still flow).
    state.counters["stream_GB/s"] =
        static_cast<double>(streamed_bytes) / 1e9 / loaded_seconds;
  }
}
BENCHMARK(BM_Latency)->Iterations(1)->UseRealTime();

// Issue 35 point 6: one-scalar p50 on a 280-shard safetensors checkpoint
// against the same tensors in one file, interleaved on one connection (the
// target: <= 1.2). Each call used to stat every shard (286 newfstatat);
// the registry now asks inotify whether anything changed instead.
constexpr int kShards = 280;

void WriteShardedPair(const std::string& dir) {
  using namespace ::tensormorph::testing;
  std::vector<StTensor> all;
  std::string index = R"({"weight_map": {)";
  std::filesystem::create_directories(dir + "/sharded");
  for (int i = 0; i < kShards; ++i) {
    const std::string name = absl::StrCat("layers.", i, ".weight");
    const std::string file = absl::StrCat("model-", i, ".safetensors");
    StTensor t{name, "F32", {64, 64}, std::string(64 * 64 * 4, '\x01')};
    WriteFile(dir + "/sharded/" + file, BuildSafetensors({t}));
    absl::StrAppend(&index, i == 0 ? "" : ",", "\"", name, "\": \"", file,
                    "\"");
    all.push_back(std::move(t));
  }
  WriteFile(dir + "/sharded/model.safetensors.index.json", index + "}}");
  WriteFile(dir + "/one.safetensors", BuildSafetensors(all));
}

void BM_ShardedLatency(benchmark::State& state) {
  static const std::string dir = [] {
    std::string d = testing::MakeTempDir();
    WriteShardedPair(d);
    return d;
  }();
  static testing::LoopbackServer loopback =
      testing::StartLoopbackServer({dir}, /*workers=*/2);
  Client& c = *loopback.client;
  std::mt19937_64 rng(8);
  auto inspect = [&](const char* ckpt) {
    v1::InspectScalarsRequest r;
    r.set_checkpoint(ckpt);
    r.set_tensor(absl::StrCat("layers.", rng() % kShards, ".weight"));
    r.add_flat_indices(static_cast<int64_t>(rng() % 4096));
    auto resp = c.InspectScalars(r);
    return resp.ok() && resp->scalars_size() == 1;
  };
  for (auto _ : state) {
    for (int i = 0; i < 200; ++i) {  // open both, warm the connection
      if (!inspect("sharded") || !inspect("one.safetensors")) std::abort();
    }
    std::vector<double> sharded, one;
    for (int i = 0; i < kCalls; ++i) {
      sharded.push_back(MicrosOf([&] { return inspect("sharded"); }));
      one.push_back(MicrosOf([&] { return inspect("one.safetensors"); }));
    }
    std::sort(sharded.begin(), sharded.end());
    std::sort(one.begin(), one.end());
    const double s50 = sharded[sharded.size() / 2], o50 = one[one.size() / 2];
    state.counters["shards"] = kShards;
    state.counters["sharded_p50_us"] = s50;
    state.counters["one_file_p50_us"] = o50;
    state.counters["sharded_vs_one_file"] = s50 / o50;
  }
}
BENCHMARK(BM_ShardedLatency)->Iterations(1)->UseRealTime();

v1::InspectScalarsRequest RandomBatch() {
  std::mt19937_64 rng(6);
  v1::InspectScalarsRequest r;
  r.set_checkpoint("m.gguf");
  r.set_tensor("w");
  for (int i = 0; i < 10000; ++i)
    r.add_flat_indices(static_cast<int64_t>(rng() % (kRows * kCols)));
  return r;
}

// Batches of 10,000 random scalars, the reply parsed on an arena (the client
// library's batch path).
void BM_InspectBatchesOf10000(benchmark::State& state) {
  Fixture& f = Get();
  const v1::InspectScalarsRequest r = RandomBatch();
  int64_t scalars = 0;
  for (auto _ : state) {
    google::protobuf::Arena arena;
    auto* resp =
        google::protobuf::Arena::CreateMessage<v1::InspectScalarsResponse>(
            &arena);
    if (absl::Status s = f.client->InspectScalars(r, resp); !s.ok()) {
      state.SkipWithError(s.ToString().c_str());
    }
    scalars += resp->scalars_size();
  }
  state.counters["scalars/s"] = benchmark::Counter(static_cast<double>(scalars),
                                                   benchmark::Counter::kIsRate);
}
BENCHMARK(BM_InspectBatchesOf10000)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2)
    ->UseRealTime();

// The same returned by value: every scalar's message allocated on the heap.
void BM_InspectBatchesOf10000ByValue(benchmark::State& state) {
  Fixture& f = Get();
  const v1::InspectScalarsRequest r = RandomBatch();
  int64_t scalars = 0;
  for (auto _ : state) {
    auto resp = f.client->InspectScalars(r);
    if (!resp.ok()) state.SkipWithError(resp.status().ToString().c_str());
    scalars += resp->scalars_size();
  }
  state.counters["scalars/s"] = benchmark::Counter(static_cast<double>(scalars),
                                                   benchmark::Counter::kIsRate);
}
BENCHMARK(BM_InspectBatchesOf10000ByValue)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2)
    ->UseRealTime();

// Issue 35 point 4, as a user meets it: `tensormorph --server H --json
// scalar m.gguf w --indices-file F` of 100,000 random indices (a process,
// its start, connection, calls and the JSON it prints, read through a pipe
// by this process) against the binary calls it makes: the same indices in
// InspectScalars calls of 10,000 from this process (the CLI's batch),
// replies parsed, nothing printed. The target: <= 2x, and a peak RSS under
// 100 MB. Also the same command as text, and `tensormorph --server H read
// big.safetensors big` (a terminal preview of a 1 GiB F32 tensor: it reads
// only what it prints) beside `tensormorph --server H info` of the same
// file (one process, one connection, one call). Best of three each.
constexpr int kCliScalars = 100'000;

void BM_ScalarCliEndToEnd(benchmark::State& state) {
  Fixture& f = Get();
  std::mt19937_64 rng(9);
  std::vector<int64_t> flat(kCliScalars);
  std::string lines;
  for (int64_t& i : flat) {
    i = static_cast<int64_t>(rng() % (kRows * kCols));
    absl::StrAppend(&lines, i / kCols, ",", i % kCols, "\n");
  }
  const std::string file = f.dir + "/indices.txt";
  testing::WriteFile(file, lines);
  auto best_of_three = [](auto run) {
    double best = -1;
    for (int k = 0; k < 3; ++k) {
      const double s = run();
      if (s < 0) return -1.0;
      if (best < 0 || s < best) best = s;
    }
    return best;
  };
  auto binary_calls = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    for (int from = 0; from < kCliScalars; from += 10'000) {
      v1::InspectScalarsRequest r;
      r.set_checkpoint("m.gguf");
      r.set_tensor("w");
      for (int i = from; i < from + 10'000; ++i) {
        r.add_coords(flat[i] / kCols);
        r.add_coords(flat[i] % kCols);
      }
      google::protobuf::Arena arena;
      auto* resp =
          google::protobuf::Arena::CreateMessage<v1::InspectScalarsResponse>(
              &arena);
      if (!f.client->InspectScalars(r, resp).ok() ||
          resp->scalars_size() != 10'000) {
        return -1.0;
      }
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
        .count();
  };
  int64_t rss_kb = 0;
  auto cli = [&](std::vector<std::string> args, int64_t* peak) {
    args.insert(args.begin(),
                {testing::CliPath(), "--server", f.loopback.address});
    const auto t0 = std::chrono::steady_clock::now();
    const testing::CommandResult r = testing::RunCommand(args);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    if (r.exit_code != 0) {
      std::fprintf(stderr, "tensormorph failed (%d): %s\n", r.exit_code,
                   r.err.c_str());
      return -1.0;
    }
    if (peak != nullptr) *peak = std::max(*peak, r.max_rss_kb);
    return s;
  };
  const std::vector<std::string> json = {"--json", "scalar",         "m.gguf",
                                         "w",      "--indices-file", file};
  const std::vector<std::string> text = {"scalar", "m.gguf", "w",
                                         "--indices-file", file};
  int64_t preview_rss_kb = 0;
  for (auto _ : state) {
    const double base = best_of_three(binary_calls);
    const double js = best_of_three([&] { return cli(json, &rss_kb); });
    const double tx = best_of_three([&] { return cli(text, nullptr); });
    const double preview = best_of_three([&] {
      return cli({"read", "big.safetensors", "big"}, &preview_rss_kb);
    });
    const double info = best_of_three([&] {
      return cli({"info", "big.safetensors"}, nullptr);
    });
    if (base < 0 || js < 0 || tx < 0 || preview < 0 || info < 0) {
      state.SkipWithError("a call or command failed (see above)");
      break;
    }
    state.counters["binary_calls_s"] = base;
    state.counters["json_cli_s"] = js;
    state.counters["json_x_binary"] = js / base;
    state.counters["json_peak_RSS_MB"] = static_cast<double>(rss_kb) / 1024;
    state.counters["text_cli_s"] = tx;
    state.counters["text_x_binary"] = tx / base;
    state.counters["preview_1GiB_ms"] = preview * 1e3;
    state.counters["preview_x_info"] = preview / info;
    state.counters["info_ms"] = info * 1e3;
    state.counters["preview_peak_RSS_MB"] =
        static_cast<double>(preview_rss_kb) / 1024;
  }
}
BENCHMARK(BM_ScalarCliEndToEnd)->Iterations(1)->UseRealTime();

}  // namespace
}  // namespace tensormorph

BENCHMARK_MAIN();
