#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/io/fault_guard.h"
#include "core/io/remote_files.h"
#include "core/request_limits.h"
#include "core/util/read_whole.h"
#include "server/auth_interceptor.h"
#include "server/call_log.h"
#include "server/call_metrics_interceptor.h"
#include "server/trusted_proxies.h"

namespace tensormorph {
namespace {

std::string WorkingDirectory() {
  char buf[PATH_MAX];
  return ::getcwd(buf, sizeof(buf)) != nullptr ? std::string(buf) : "/";
}

// Far more than a certificate chain or a key holds.
constexpr size_t kMaxPemFileBytes = size_t{1} << 20;

// A PEM file's text. Refused here, naming the file: gRPC reports a
// directory (read as nothing) or a file without a PEM block only as a
// failure to listen.
absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  const std::string name = absl::StrCat(what, " '", path, "'");
  absl::StatusOr<std::string> text =
      ReadWholeFile(path, name, kMaxPemFileBytes);
  if (!text.ok()) return text.status();
  if (!absl::StrContains(*text, "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " holds no PEM block (-----BEGIN ...)"));
  }
  return text;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const ServerOptions& o) {
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (o.tls_cert.empty()) {
    if (!o.tls_client_ca.empty()) {
      return absl::InvalidArgumentError(
          "--tls-client-ca needs --tls-cert and --tls-key");
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions ssl(
      o.tls_client_ca.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  auto cert = ReadPem(o.tls_cert, "TLS certificate");
  auto key = ReadPem(o.tls_key, "TLS key");
  if (!cert.ok()) return cert.status();
  if (!key.ok()) return key.status();
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  if (!o.tls_client_ca.empty()) {
    auto ca = ReadPem(o.tls_client_ca, "client CA");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
  }
  return grpc::SslServerCredentials(ssl);
}

// Remote storage for roots that are URLs and for the backings of local
// roots (any URL when unrestricted); null when there are none.
absl::StatusOr<std::shared_ptr<const RemoteFiles>> RemoteStorage(
    const ServerOptions& o) {
  RemoteFilesOptions r;
  for (const std::string& root : o.roots) {
    if (!RemoteFiles::IsUrl(root)) continue;
    r.roots.push_back(absl::EndsWith(root, "/") ? root
                                                : absl::StrCat(root, "/"));
  }
  // A backing's prefix is opened as a remote root's is.
  absl::StatusOr<std::vector<std::string>> backed =
      PathSandbox::BackingPrefixes(o.backings);
  if (!backed.ok()) return backed.status();
  r.roots.insert(r.roots.end(), backed->begin(), backed->end());
  if (r.roots.empty() && !o.unrestricted) return nullptr;
  r.budget_bytes = o.remote_ram_bytes;
  if (!o.cache_dir.empty()) {
    BlockCacheOptions cache;
    cache.disk_dir = o.cache_dir;
    cache.disk_bytes = o.cache_bytes;
    // Fetched bytes live in the mirrors' RAM budget; the block cache's own
    // RAM tier only passes blocks to and from the disk.
    cache.ram_bytes = cache.block_bytes * 64;
    r.storage.cache = cache;
  }
  return RemoteFiles::Create(std::move(r));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TensormorphServer>> TensormorphServer::Build(
    const ServerOptions& options, bool listen) {
  // A larger age would wrap the int gRPC takes, and the server would listen
  // without accepting a connection.
  if (options.max_connection_age_seconds < 0 ||
      options.max_connection_age_seconds > kMaxConnectionAgeSeconds) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max connection age must be 0 (never) to ", kMaxConnectionAgeSeconds,
        " seconds, got ", options.max_connection_age_seconds));
  }
  if (options.max_connection_age_grace_seconds < 0 ||
      options.max_connection_age_grace_seconds > kMaxConnectionAgeSeconds) {
    return absl::InvalidArgumentError(
        absl::StrCat("max connection age grace must be 0 (no limit) to ",
                     kMaxConnectionAgeSeconds, " seconds, got ",
                     options.max_connection_age_grace_seconds));
  }
  if (options.unrestricted && !options.backings.empty()) {
    return absl::InvalidArgumentError(
        "backings are for a server's roots; an unrestricted server has none");
  }
  absl::StatusOr<std::shared_ptr<const RemoteFiles>> remote =
      RemoteStorage(options);
  if (!remote.ok()) return remote.status();
  absl::StatusOr<PathSandbox> sandbox =
      options.unrestricted
          ? PathSandbox::Unrestricted(WorkingDirectory(), *remote)
          : PathSandbox::Create(options.roots, *remote, options.backings);
  if (!sandbox.ok()) return sandbox.status();
  const int workers =
      options.workers > 0
          ? options.workers
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // A file truncated under its mapping must fail that call, not the server.
  InstallMappedFileFaultHandler();
  absl::StatusOr<TrustedProxies> proxies =
      TrustedProxies::Parse(options.trusted_proxies);
  if (!proxies.ok()) return proxies.status();
  if (!proxies->empty()) SetTrustedProxies(*std::move(proxies));
  std::unique_ptr<TensormorphServer> s(new TensormorphServer());
  s->state_ = std::make_shared<ServiceState>(
      *std::move(sandbox), options.max_open_checkpoints, workers,
      options.limits, OpenOptions{.remote = *remote});
  if (!options.token_file.empty()) {
    if (absl::Status t = s->state_->tokens.Load(options.token_file); !t.ok())
      return t;
  }
  s->service_ = std::make_unique<TensormorphService>(s->state_);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (listen) {
    auto creds = ServerCredentials(options);
    if (!creds.ok()) return creds.status();
    builder.AddListeningPort(options.listen, *creds, &s->port_);
  }
  // gRPC sets SO_REUSEPORT by default: a second tensormorphd started on
  // the same --listen (say, without --token-file) then bound beside the
  // first and the kernel split the connections between them. One server
  // per address: the second fails as the port is taken.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Keepalive enforcement: clients may ping every 10 s at most; idle peers
  // are probed; connections are recycled after max_connection_age.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20'000);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10'000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
  if (options.max_connection_age_seconds > 0) {
    builder.AddChannelArgument(
        GRPC_ARG_MAX_CONNECTION_AGE_MS,
        static_cast<int>(options.max_connection_age_seconds * 1000));
    // INT_MAX is gRPC's "no limit".
    builder.AddChannelArgument(
        GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
        options.max_connection_age_grace_seconds > 0
            ? static_cast<int>(options.max_connection_age_grace_seconds * 1000)
            : std::numeric_limits<int>::max());
  }
  // Every reply is checked against max_reply_bytes before it is sent
  // (CheckReplySize), so this cap is never what refuses one.
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  builder.SetMaxSendMessageSize(
      static_cast<int>(options.limits.max_reply_bytes));
  builder.RegisterService(s->service_.get());
  // Every method but health's needs the token, reflection's included (it
  // describes the API): checked once, by the interceptor.
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  // Counting comes first (call_metrics_interceptor.h says why).
  interceptors.push_back(NewCallMetricsInterceptorFactory(
      &s->state_->call_stats, &s->state_->refused_calls));
  interceptors.push_back(NewAuthInterceptorFactory(
      &s->state_->tokens, &s->state_->refused_calls, &s->draining_));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || (listen && s->port_ == 0)) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on '", options.listen,
                     "': is the address valid and the port free?"));
  }
  // Health by the service's own name too (`tensormorph health --service
  // tensormorph.v1.Tensormorph`, grpc_health_probe -service), not only the
  // server's "".
  if (grpc::HealthCheckServiceInterface* health =
          s->server_->GetHealthCheckService();
      health != nullptr) {
    health->SetServingStatus(v1::Tensormorph::service_full_name(), true);
  }
  return s;
}

absl::StatusOr<std::unique_ptr<TensormorphServer>> TensormorphServer::Start(
    const ServerOptions& options) {
  return Build(options, /*listen=*/true);
}

absl::StatusOr<std::unique_ptr<TensormorphServer>>
TensormorphServer::StartInProcess(const ServerOptions& options) {
  return Build(options, /*listen=*/false);
}

TensormorphServer::~TensormorphServer() {
  // Only when not shut down yet: a second call is the one that cancels and
  // closes whatever a shutdown still waits for (see Shutdown), and a server
  // shut down has nothing left to end.
  if (!std::atomic_ref<bool>(shut_down_).load()) {
    Shutdown(absl::ZeroDuration());
  }
}

std::shared_ptr<grpc::Channel> TensormorphServer::InProcessChannel() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // the server's own replies
  return server_->InProcessChannel(args);
}

void TensormorphServer::BeginDrain() {
  if (server_ == nullptr || draining_.exchange(true)) return;
  // NOT_SERVING for "" and every service, and later SetServingStatus calls
  // are ignored: a probe never sees SERVING again.
  if (grpc::HealthCheckServiceInterface* health =
          server_->GetHealthCheckService();
      health != nullptr) {
    health->Shutdown();
  }
}

void TensormorphServer::Shutdown(absl::Duration grace) {
  if (server_ == nullptr) return;
  // Atomic: a second call comes from another thread while the first one
  // waits out its grace (tensormorphd's second signal).
  if (std::atomic_ref<bool>(shut_down_).exchange(true)) {
    // A later call with no grace ends the running one now. gRPC's own
    // Shutdown cannot: it holds its lock while it waits. Cancelling our
    // streams is not enough either: the shutdown also waits for every
    // connection to close, which after the GOAWAY takes a PING round trip
    // with the client, and a client that polls nothing (a blocked
    // synchronous reader; gRPC's backup poll runs every 5 s) or has gone
    // silent holds that for seconds. This cancels every call and closes
    // every connection at once, as gRPC does when the grace runs out.
    if (grace <= absl::ZeroDuration()) {
      grpc_server_cancel_all_calls(server_->c_server());
    }
    return;
  }
  server_->Shutdown(std::chrono::system_clock::now() +
                    absl::ToChronoMilliseconds(grace));
}

void TensormorphServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace tensormorph
