// Client::Embedded: the real service, in-process, with no port.
#include "client/client.h"
#include "server/server.h"

namespace tensormorph {

absl::StatusOr<std::unique_ptr<Client>> Client::Embedded(
    const ClientOptions& options) {
  ServerOptions server_options;
  server_options.unrestricted = true;
  auto server = TensormorphServer::StartInProcess(server_options);
  if (!server.ok()) return server.status();
  std::shared_ptr<TensormorphServer> keepalive = *std::move(server);
  auto channel = keepalive->InProcessChannel();
  return std::make_unique<Client>(std::move(channel), options,
                                  std::move(keepalive));
}

}  // namespace tensormorph
