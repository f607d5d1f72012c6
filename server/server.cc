#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <unistd.h>

#include <climits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/io/fault_guard.h"

namespace tensormorph {
namespace {

std::string WorkingDirectory() {
  char buf[PATH_MAX];
  return ::getcwd(buf, sizeof(buf)) != nullptr ? std::string(buf) : "/";
}

}  // namespace

absl::StatusOr<std::unique_ptr<TensormorphServer>> TensormorphServer::Build(
    const ServerOptions& options, bool listen) {
  absl::StatusOr<PathSandbox> sandbox =
      options.unrestricted ? PathSandbox::Unrestricted(WorkingDirectory())
                           : PathSandbox::Create(options.roots);
  if (!sandbox.ok()) return sandbox.status();
  const int workers =
      options.workers > 0
          ? options.workers
          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // A file truncated under its mapping must fail that call, not the server.
  InstallMappedFileFaultHandler();
  std::unique_ptr<TensormorphServer> s(new TensormorphServer());
  s->state_ = std::make_shared<ServiceState>(*std::move(sandbox),
                                             options.max_open_checkpoints,
                                             workers, options.limits);
  s->service_ = std::make_unique<TensormorphService>(s->state_);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (listen) {
    builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(),
                             &s->port_);
  }
  // Chunks are at most 1 MiB of data plus a small header.
  builder.SetMaxSendMessageSize(2 << 20);
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || (listen && s->port_ == 0)) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on '", options.listen,
                     "': is the address valid and the port free?"));
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

TensormorphServer::~TensormorphServer() { Shutdown(absl::ZeroDuration()); }

std::shared_ptr<grpc::Channel> TensormorphServer::InProcessChannel() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(2 << 20);
  return server_->InProcessChannel(args);
}

void TensormorphServer::Shutdown(absl::Duration grace) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  server_->Shutdown(std::chrono::system_clock::now() +
                    absl::ToChronoMilliseconds(grace));
}

void TensormorphServer::Wait() {
  if (server_ != nullptr) server_->Wait();
}

}  // namespace tensormorph
