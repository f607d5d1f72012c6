// A running Tensormorph gRPC server: on a TCP port (tensormorphd) or
// in-process only (the CLI's embedded mode).
#ifndef TENSORMORPH_SERVER_SERVER_H_
#define TENSORMORPH_SERVER_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/service.h"

namespace tensormorph {

// The longest --max-connection-age: 2^31 - 1 milliseconds, about 24.8 days.
inline constexpr int64_t kMaxConnectionAgeSeconds = 2'147'483;

struct ServerOptions {
  std::string listen = "127.0.0.1:7431";  // host:port; port 0 picks one
  std::vector<std::string> roots;
  // Serve any local path, relative ones against the working directory, and
  // any storage URL (embedded mode only).
  bool unrestricted = false;
  // Checkpoints in remote storage (roots that are URLs; any URL when
  // unrestricted): the RAM their fetched bytes may hold at once
  // (MirrorBudget), and an optional disk cache of fetched blocks that
  // outlives the process (BlockCache's disk tier), capped at cache_bytes.
  uint64_t remote_ram_bytes = uint64_t{1} << 30;
  std::string cache_dir;
  uint64_t cache_bytes = uint64_t{10} << 30;
  size_t max_open_checkpoints = 64;
  // "ROOT=URL": local root ROOT (one of `roots`) backed by the storage URL
  // prefix URL; a file beneath it the disk lacks is read from the prefix
  // (PathSandbox::Create, root_backing.h). One per root.
  std::vector<std::string> backings;
  // Bearer tokens (a file, one per line); empty = no authentication.
  std::string token_file;
  // TLS: server certificate and key (PEM); with a client CA, clients must
  // present a certificate it signed (mutual TLS).
  std::string tls_cert, tls_key, tls_client_ca;
  // 0 = never; at most kMaxConnectionAgeSeconds (gRPC takes milliseconds
  // in an int).
  int64_t max_connection_age_seconds = 3600;
  // How long a recycled connection's calls in flight may run on after its
  // GOAWAY before the connection is closed under them; 0 = no limit
  // (gRPC's INT_MAX), at most kMaxConnectionAgeSeconds. No limit by
  // default: every stream is bounded by limits.max_call_seconds already, and
  // a finite grace shorter than that cuts a call the server admitted (a
  // diff part then fails on every retry).
  int64_t max_connection_age_grace_seconds = 0;
  int workers = 0;  // 0 = one per core
  ServiceLimits limits;
  // The call log (issue 28): peers whose X-Forwarded-For is believed
  // ("10.0.0.0/8", "::1"; trusted_proxies.h), process-wide.
  std::vector<std::string> trusted_proxies;
};

// Thread safety: Shutdown may be called from any thread, and again while a
// shutdown runs (see Shutdown).
class TensormorphServer {
 public:
  // Listens on options.listen with health checking and reflection.
  // Errors: INVALID_ARGUMENT (bad roots or backings, a trusted proxy that
  // is no CIDR,
  // a max connection age or grace past kMaxConnectionAgeSeconds); UNAVAILABLE
  // (cannot bind).
  static absl::StatusOr<std::unique_ptr<TensormorphServer>> Start(
      const ServerOptions& options);
  // No port: reachable only through InProcessChannel().
  static absl::StatusOr<std::unique_ptr<TensormorphServer>> StartInProcess(
      const ServerOptions& options);

  ~TensormorphServer();

  int port() const { return port_; }
  std::shared_ptr<grpc::Channel> InProcessChannel();
  ServiceState& state() { return *state_; }

  // The first moment of a drain: grpc.health.v1 answers NOT_SERVING for
  // every service from now on, and every new network call but health's is
  // refused UNAVAILABLE (auth_interceptor.h), while calls in flight run on.
  // In-process calls are still admitted: the HTTP gateway's requests in
  // flight finish, and it refuses new ones itself. Idempotent.
  void BeginDrain();

  // Stops accepting calls; lets in-flight calls finish for up to `grace`,
  // then cancels the rest (in-process calls, the HTTP gateway's, end at
  // once: drain those first). A later call with no grace, from another
  // thread while the first runs, cancels every call and closes every
  // connection now (a second signal); otherwise a later call does nothing.
  void Shutdown(absl::Duration grace);
  // Blocks until the server has shut down.
  void Wait();

 private:
  TensormorphServer() = default;
  static absl::StatusOr<std::unique_ptr<TensormorphServer>> Build(
      const ServerOptions& options, bool listen);

  std::shared_ptr<ServiceState> state_;
  std::unique_ptr<TensormorphService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
  // Read by the admission interceptor of every call; the server outlives
  // its calls, so the interceptor's pointer stays valid.
  std::atomic<bool> draining_{false};
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_SERVER_H_
