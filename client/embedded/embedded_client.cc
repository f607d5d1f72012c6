// EmbeddedClient: the real service, in-process, with no port.
#include "client/embedded/embedded_client.h"

#include "client/client.h"
#include "client/embedded/local_slice_reader.h"
#include "server/server.h"

namespace tensormorph {

absl::StatusOr<std::unique_ptr<Client>> EmbeddedClient(
    const ClientOptions& options) {
  ServerOptions server_options;
  server_options.unrestricted = true;
  auto server = TensormorphServer::StartInProcess(server_options);
  if (!server.ok()) return server.status();
  std::shared_ptr<TensormorphServer> keepalive = *std::move(server);
  auto channel = keepalive->InProcessChannel();
  // Slices skip the in-process channel: chunks go from the service's reader
  // to the caller with no serialization and no transport queue between.
  auto slices = std::make_shared<EmbeddedSliceReader>(keepalive);
  return std::make_unique<Client>(std::move(channel), options,
                                  std::move(keepalive), std::move(slices));
}

}  // namespace tensormorph
