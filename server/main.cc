// tensormorphd: serves checkpoints under --root directories over gRPC.
#include <signal.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/call_log.h"
#include "server/http/http_gateway.h"
#include "server/log_line.h"
#include "server/nonblocking_log.h"
#include "server/prometheus.h"
#include "server/server.h"
#include "server/stream_heap.h"

namespace {

// How long the release of memory and gRPC's threads may take once the drain
// has ended (main says why it is bounded). It takes milliseconds when
// nothing holds it, more in sanitizer builds.
constexpr absl::Duration kReleaseLimit = absl::Seconds(2);

// The blocked signal among `signals` that arrived within 50 ms, or 0.
int PollForSignal(const sigset_t& signals) {
  const struct timespec poll = {0, 50'000'000};
  const int sig = sigtimedwait(&signals, nullptr, &poll);
  return sig > 0 ? sig : 0;
}

// Ends the process without destructors (other threads may still run them
// or be in gRPC), once what was logged and printed is out.
// A stalled log reader gets a second, not the process (`drain_log` false:
// it has had it). Only stdout is flushed: the log's writer may hold
// stderr's lock in a write that never returns.
[[noreturn]] void ExitNow(bool drain_log = true) {
  if (drain_log) tensormorph::DrainLog(absl::Seconds(1));
  std::fflush(stdout);
  std::_Exit(0);
}

// What the command line sets.
struct Flags {
  tensormorph::ServerOptions o;
  tensormorph::HttpGatewayOptions http;
  std::string log_level = "info";
  std::string log_format = "text";
  double grace_seconds = 10;
  bool partial_shards = false;  // refused: --backing replaced it
};

constexpr char kDescription[] =
    "tensormorphd: serve memory-mapped checkpoints (safetensors, GGUF) to "
    "the tensormorph CLI and to dashboards over gRPC.\n\n"
    "Example:\n  tensormorphd --root /models --listen 0.0.0.0:7431\n"
    "  tensormorph --server gpu-box:7431 ls llama-70b-awq/";

// --listen, the HTTP port, the roots, logging and the workers. (The three
// Add*Options run in --help's order.)
void AddServingOptions(CLI::App& app, Flags& f) {
  app.add_option("--listen", f.o.listen,
                 "host:port to listen on; port 0 picks a free one")
      ->capture_default_str();
  app.add_option("--http-listen", f.http.listen,
                 "also serve HTTP on host:port (port 0 picks one): the web "
                 "inspector at /, the API as JSON at POST /v1/<Method>, "
                 "/v1/tensor.npy, /v1/heatmap.png, /metrics and /healthz; the "
                 "calls pass the same auth and limits as gRPC ones, and TLS "
                 "options apply to it too");
  app.add_option("--http-allow-origin", f.http.allow_origin,
                 "let pages from this origin (https://dash.example:3000, or "
                 "*) call the HTTP API from a browser (CORS); unset: none");
  app.add_option("--http-connections-per-peer", f.http.connections_per_peer,
                 "connections one client address (an IPv6 /64) may have open "
                 "on the HTTP port at once, idle kept-alive ones included "
                 "(its requests get at most 8 of the 64 serving threads); "
                 "its further connections wait their turn (up to twice as "
                 "many, then 429), so one client cannot starve the others. "
                 "A --trusted-proxy has no limit")
      ->default_val(16)
      ->check(CLI::Range(1, 4096));
  app.add_option("--http-assets", f.http.assets_dir,
                 "serve the inspector's files from this directory (client/web) "
                 "instead of the copy compiled in, for working on the page");
  app.add_option("--root", f.o.roots,
                 "directory whose checkpoints may be served (repeatable); "
                 "paths are resolved through '..' and symlinks and must stay "
                 "inside a root. A storage URL prefix is a remote root: "
                 "s3://bucket/prefix/, https://host/dir/, hf://org/repo/ "
                 "(docs/storage.md: credentials from AWS_* and HF_TOKEN)")
      ->required();
  app.add_option("--remote-ram-bytes", f.o.remote_ram_bytes,
                 "RAM that bytes fetched from remote roots may hold at once; "
                 "past it the oldest are dropped and fetched again if read")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{64} << 20, uint64_t{1} << 50));
  app.add_option("--cache-dir", f.o.cache_dir,
                 "keep blocks fetched from remote roots on disk here too, "
                 "across restarts (a directory only this server's user may "
                 "write); unset: none");
  app.add_option("--cache-bytes", f.o.cache_bytes,
                 "disk the --cache-dir blocks may take")
      ->capture_default_str();
  app.add_option("--log-level", f.log_level,
                 "trace, debug, info, warn, error, off")
      ->capture_default_str();
  app.add_option("--max-open-checkpoints", f.o.max_open_checkpoints,
                 "checkpoints kept open; past it the least recently used is "
                 "closed (calls holding it finish first), never refused")
      ->capture_default_str();
  app.add_option(
      "--backing", f.o.backings,
      "ROOT=URL: read the files of checkpoints under --root ROOT that this "
      "disk lacks (shards, splits, configs) from the storage URL prefix URL "
      "(s3://bucket/prefix/, https://host/dir/, hf://org/repo/), at their "
      "path relative to ROOT; files on the disk are read from it. One per "
      "root (repeatable); listings show what either holds "
      "(docs/storage.md)");
  // Kept to say what replaced it: a server started with it would otherwise
  // fail on an unknown flag without a word on what to do.
  app.add_flag("--partial-shards", f.partial_shards,
               "removed: use --backing ROOT=URL (a server reads the shards "
               "it lacks from the backing)");
  app.add_option("--workers", f.o.workers,
                 "threads decoding and reading for interactive calls and "
                 "streams (0 = one per core); diffs and checks get workers - "
                 "1 more of their own, at a lower CPU priority")
      ->capture_default_str();
}

// The limits every call is held to, and connection recycling.
void AddLimitOptions(CLI::App& app, tensormorph::ServerOptions& o) {
  app.add_option("--max-scalars-per-call", o.limits.max_scalars_per_call,
                 "scalars one InspectScalars call may ask for (a reply of "
                 "more than about 200,000 may pass the 64 MiB reply limit)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000}));
  app.add_option("--max-concurrent-streams", o.limits.max_concurrent_streams,
                 "ReadSlice/ListTensors/QuantDiff streams at once")
      ->capture_default_str();
  app.add_option("--max-slice-bytes", o.limits.max_slice_bytes,
                 "bytes one ReadSlice may return")
      ->capture_default_str();
  app.add_option("--max-concurrent-diffs", o.limits.max_concurrent_diffs,
                 "QuantDiff calls at once")
      ->capture_default_str();
  app.add_option("--diff-reports-kept", o.limits.diff_reports_kept,
                 "last diff reports kept for GetDiffReport (a page restores "
                 "a diff from them after a reload; 0 = none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--diff-reports-bytes", o.limits.diff_reports_bytes,
                 "bytes of the kept diff reports (serialized), the least "
                 "recently used evicted first; capped at the reply limit")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option(
         "--error-grids-bytes", o.limits.error_grids_bytes,
         "bytes of error heatmaps' grids kept (4 per element of an "
         "F16/BF16 view, else 8), so that zooming and panning one reduces "
         "its cells instead of decoding again; the least recently "
         "used evicted first; 0 = none")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-call-seconds", o.limits.max_call_seconds,
                 "a stream ends with RESOURCE_EXHAUSTED past this, whatever "
                 "its deadline, and whether or not its client reads (one "
                 "that does not is cancelled a second later)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-idle-write-seconds", o.limits.max_idle_write_seconds,
                 "a stream whose client takes no data for this long is "
                 "cancelled, freeing its slot (0 = no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  // Fair shares (issue 28): one client cannot take every stream slot, nor
  // hold the server's memory in replies it does not read.
  app.add_option("--max-streams-per-peer", o.limits.max_streams_per_peer,
                 "streams one client address (any port, any connection) may "
                 "hold of --max-concurrent-streams")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max-reply-bytes-in-flight",
                 o.limits.max_reply_bytes_in_flight,
                 "bytes of replies built and not yet sent, to all clients; "
                 "past it new calls are refused RESOURCE_EXHAUSTED (e.g. "
                 "1GiB; 0 = no limit)")
      ->capture_default_str()
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-reply-bytes-per-peer",
                 o.limits.max_reply_bytes_per_peer,
                 "the same for one client address: a client that stops "
                 "reading holds at most this (e.g. 256MiB; 0 = no limit)")
      ->capture_default_str()
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-connection-age", o.max_connection_age_seconds,
                 "seconds before a connection is recycled, so clients "
                 "re-resolve and new replicas get calls (0 = never)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, tensormorph::kMaxConnectionAgeSeconds));
  app.add_option("--max-connection-age-grace",
                 o.max_connection_age_grace_seconds,
                 "seconds a recycled connection's calls in flight may run on "
                 "before it is closed under them (0 = no limit: each runs to "
                 "its end, which --max-call-seconds bounds)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, tensormorph::kMaxConnectionAgeSeconds));
}

// Tokens, TLS, the log's format and whom it believes, the HTTP port's
// hosts, and the shutdown grace.
void AddSecurityOptions(CLI::App& app, Flags& f) {
  app.add_option(
      "--token-file", f.o.token_file,
      "bearer tokens, one per line: calls, server reflection included, need "
      "'authorization: Bearer <token>' (health checks excepted); SIGHUP "
      "reloads the file");
  app.add_option("--tls-cert", f.o.tls_cert, "server certificate (PEM)");
  app.add_option("--tls-key", f.o.tls_key, "server private key (PEM)");
  app.add_option(
      "--tls-client-ca", f.o.tls_client_ca,
      "CA for client certificates: clients must present one (mutual TLS)");
  // What the log believes and how it is written, and whom the HTTP port
  // answers (issue 28).
  app.add_option("--log-format", f.log_format,
                 "text, or json: one object per line with time (UTC, "
                 "2026-12-02T05:15:43.123Z), level, and for calls method, "
                 "peer, checkpoint, tensor, status, bytes, ms, error; every "
                 "string a client or a file supplied is escaped in both")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
  app.add_option("--trusted-proxy", f.o.trusted_proxies,
                 "CIDR (10.0.0.0/8, ::1) of a proxy whose X-Forwarded-For "
                 "the log believes (repeatable); the log's peer is always "
                 "the connection's own address, and the header from any "
                 "other peer is ignored");
  app.add_option("--http-allow-host", f.http.allow_hosts,
                 "a name the HTTP port answers as in the Host header "
                 "(repeatable), besides localhost, 127.0.0.1, [::1] and the "
                 "--http-listen host; other names are refused 421, so a web "
                 "page cannot reach a local server through DNS rebinding. "
                 "'*' allows any (behind a proxy that checks it)");
  app.add_option("--shutdown-grace", f.grace_seconds,
                 "seconds in-flight calls may run after SIGINT/SIGTERM (from "
                 "the signal on, gRPC health is NOT_SERVING and new calls on "
                 "both ports are refused UNAVAILABLE / HTTP 503); a second "
                 "signal cancels them at once")
      ->capture_default_str();
}

// Logs go to stderr; stdout carries only the "listening on" lines that
// scripts read. A closed stdout or peer must never kill the server.
void SetUpLogging(const Flags& f) {
  ::signal(SIGPIPE, SIG_IGN);
  tensormorph::InstallNonBlockingLog("tensormorphd");
  spdlog::set_level(spdlog::level::from_str(f.log_level));
  tensormorph::UseLogFormat(f.log_format == "json"
                                ? tensormorph::LogFormat::kJson
                                : tensormorph::LogFormat::kText);
}

// Blocks SIGINT, SIGTERM and SIGHUP in every thread (the log's and gRPC's
// included, so before any starts): main takes them with sigwait.
sigset_t BlockSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// The HTTP port (--http-listen), with the server's TLS and tokens; its
// requests are calls on the server's own in-process channel, and `serving`
// turns new ones away once the drain begins. Null without --http-listen.
absl::StatusOr<std::unique_ptr<tensormorph::HttpGateway>> StartGateway(
    Flags& f, tensormorph::TensormorphServer& server,
    const std::atomic<bool>& serving) {
  if (f.http.listen.empty()) return nullptr;
  tensormorph::HttpGatewayOptions& http = f.http;
  http.tls_cert = f.o.tls_cert;
  http.tls_key = f.o.tls_key;
  http.tls_client_ca = f.o.tls_client_ca;
  http.serving = [&serving] { return serving.load(); };
  http.check_authorization_first = !f.o.token_file.empty();
  http.max_reply_bytes_per_peer = f.o.limits.max_reply_bytes_per_peer;
  http.max_reply_bytes_in_flight = f.o.limits.max_reply_bytes_in_flight;
  http.unshared_peer = [](const std::string& address) {
    return tensormorph::IsTrustedProxy(address);
  };
  http.metrics = [state = &server.state()] {
    return tensormorph::PrometheusText(*state);
  };
  http.on_refused = [](const tensormorph::HttpRefusal& r) {
    tensormorph::RecordHttpRefusal(r.method, r.path, r.peer, r.forwarded_for,
                                   static_cast<grpc::StatusCode>(r.code),
                                   r.http_status, r.reason, r.message);
  };
  return tensormorph::HttpGateway::Start(http, server.InProcessChannel());
}

// Serves until SIGINT or SIGTERM, which it returns; SIGHUP reloads the
// tokens meanwhile.
int ServeUntilStopped(tensormorph::TensormorphServer& server,
                      const sigset_t& signals, const std::string& token_file) {
  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
    if (token_file.empty()) continue;
    const absl::Status s = server.state().tokens.Reload();
    if (s.ok()) {
      spdlog::info("SIGHUP: reloaded tokens from {}", token_file);
    } else {
      spdlog::warn("SIGHUP: kept the previous tokens: {}",
                   std::string(s.message()));
    }
  }
  return sig;
}

struct Drained {
  bool hurried = false;      // a second signal cut the drain short
  bool http_stopped = true;  // no HTTP client held on past the drain
};

// Lets in-flight calls run for up to `grace_seconds` while new ones are
// refused, then shuts both ports down.
Drained Drain(tensormorph::TensormorphServer& server,
              tensormorph::HttpGateway* gateway, std::atomic<bool>& serving,
              const sigset_t& signals, double grace_seconds) {
  std::atomic<bool> drained{false};
  // New HTTP API requests are turned away from here on, and /healthz says
  // so, before anything else of the drain begins.
  if (gateway != nullptr) gateway->BeginDrain();
  serving.store(false);
  // And gRPC: health NOT_SERVING, new network calls refused UNAVAILABLE.
  server.BeginDrain();
  std::atomic<bool> hurry{false};
  bool http_stopped = true;
  std::thread drain([&] {
    const absl::Time end = absl::Now() + absl::Seconds(grace_seconds);
    // HTTP requests are calls on the server's in-process channel, which the
    // server's shutdown ends at once: they drain first, within the grace,
    // while new ones are answered 503.
    // So do the gRPC streams, before gRPC's shutdown sends its GOAWAY. After
    // a GOAWAY gRPC closes a connection the moment its last stream ends,
    // with the client's window updates still arriving: the close resets the
    // connection, and the client's kernel drops the stream's tail that its
    // gRPC had not read yet. A GOAWAY sent once the streams have ended is
    // followed by a PING, which the client answers only after reading all
    // that came before it. Meanwhile new calls are refused UNAVAILABLE with
    // the drain's reason (auth_interceptor.h), and health says NOT_SERVING.
    auto idle = [&] {
      return (gateway == nullptr ||
              gateway->WaitIdle(absl::Milliseconds(50))) &&
             server.state().watchdog.WaitIdle(absl::Milliseconds(50));
    };
    while (!idle() && !hurry.load() && absl::Now() < end) {
    }
    server.Shutdown(std::max(end - absl::Now(), absl::ZeroDuration()));
    server.Wait();
    // Every call has ended; a client still holding an HTTP thread (a body
    // trickling in) is ended by the exit, not waited for.
    if (gateway != nullptr) http_stopped = gateway->Stop(absl::Seconds(2));
    drained.store(true);
  });
  // A second SIGINT/SIGTERM (an impatient ^C, a supervisor's stop) cancels
  // every stream still running and closes every connection without waiting
  // for its client, so the drain ends at once.
  bool hurried = false;
  while (!drained.load()) {
    const int again = PollForSignal(signals);
    if ((again == SIGINT || again == SIGTERM) && !hurried) {
      hurried = true;
      hurry.store(true);
      if (gateway != nullptr) gateway->CancelAll();
      const int n = server.state().watchdog.CancelAll(
          absl::CancelledError("a second signal ended the drain"));
      spdlog::warn("received signal {} again; cancelled {} streams", again, n);
    }
    // Again on every turn: the drain thread may not have begun the shutdown
    // this cuts short when the signal came.
    if (hurried) server.Shutdown(absl::ZeroDuration());
  }
  drain.join();
  spdlog::info("stopped");
  return {hurried, http_stopped};
}

// Every call has ended and every socket is closed: what is left is freeing
// memory and gRPC's own threads, which the end of the process does as well.
// The process must not wait on it, though: gRPC's release (grpc_shutdown,
// run by ~grpc::Server) joins its executor thread, and in gRPC 1.51 that
// thread spends 10 s in one poll (the TCP backup poller) whenever a socket
// write had to wait for a client that read slower than the server sent;
// nothing wakes that poll once the sockets are closed. After a second
// signal the process ends now; otherwise the release (which lets
// LeakSanitizer check the server in sanitizer builds) gets kReleaseLimit,
// and a signal ends it at once. Returns main's exit code when the release
// ended in time (a normal exit, which LeakSanitizer checks); else ends the
// process itself.
int Exit(std::unique_ptr<tensormorph::TensormorphServer> server,
         std::unique_ptr<tensormorph::HttpGateway> gateway,
         const sigset_t& signals, const Drained& d) {
  if (!d.http_stopped) {
    spdlog::info("HTTP clients still hold connections; the exit ends them");
  }
  if (!d.hurried && d.http_stopped) {
    std::atomic<bool> released{false};
    std::thread release([&] {
      gateway.reset();
      server.reset();
      released.store(true);
    });
    const absl::Time limit = absl::Now() + kReleaseLimit;
    while (!released.load() && absl::Now() < limit) {
      const int again = PollForSignal(signals);
      if (again == SIGINT || again == SIGTERM) break;
    }
    if (released.load()) {
      release.join();
      // What was logged is written before the process ends (a stalled
      // reader gets a second, then the exit goes on without it).
      if (!tensormorph::DrainLog(absl::Seconds(1))) ExitNow(false);
      return 0;
    }
    spdlog::info("ending without waiting for gRPC's threads");
    ExitNow();  // here: `release` still runs, and must not be destroyed
  }
  ExitNow();
}

}  // namespace

int main(int argc, char** argv) {
  tensormorph::KeepStreamBuffersOnHeap();
  Flags f;
  CLI::App app{kDescription};
  AddServingOptions(app, f);
  AddLimitOptions(app, f.o);
  AddSecurityOptions(app, f);
  CLI11_PARSE(app, argc, argv);
  if (f.partial_shards) {
    std::fprintf(stderr,
                 "tensormorphd: --partial-shards is gone: a server now reads "
                 "the shards its disk lacks from a backing, --backing "
                 "ROOT=URL (docs/storage.md)\n");
    return 1;
  }
  // Before the log's writer thread starts (SetUpLogging): a thread that
  // does not block them takes SIGTERM whenever main is not in sigwait, and
  // its default action ends the process (exit 143) with no drain.
  const sigset_t signals = BlockSignals();
  SetUpLogging(f);

  auto server = tensormorph::TensormorphServer::Start(f.o);
  if (!server.ok()) {
    std::fprintf(stderr, "tensormorphd: %s\n",
                 std::string(server.status().message()).c_str());
    return 1;
  }
  const std::string host = f.o.listen.substr(0, f.o.listen.rfind(':'));
  // Tests and scripts read the port from this line.
  std::printf("tensormorphd listening on %s:%d\n", host.c_str(),
              (*server)->port());
  std::fflush(stdout);
  spdlog::info("serving roots: {}",
               (*server)->state().registry.sandbox().DescribeRoots());

  std::atomic<bool> serving{true};
  auto gateway = StartGateway(f, **server, serving);
  if (!gateway.ok()) {
    std::fprintf(stderr, "tensormorphd: %s\n",
                 std::string(gateway.status().message()).c_str());
    (*server)->Shutdown(absl::ZeroDuration());
    return 1;
  }
  if (*gateway != nullptr) {
    // Scripts read the port from this line, as from the one above.
    std::printf("tensormorphd http on %s\n", (*gateway)->url().c_str());
    std::fflush(stdout);
  }

  const int sig = ServeUntilStopped(**server, signals, f.o.token_file);
  spdlog::info(
      "received signal {}; draining for up to {}s (a second signal ends the "
      "drain now)",
      sig, f.grace_seconds);
  const Drained d =
      Drain(**server, gateway->get(), serving, signals, f.grace_seconds);
  return Exit(*std::move(server), *std::move(gateway), signals, d);
}
