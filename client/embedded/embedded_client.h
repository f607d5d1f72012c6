// EmbeddedClient: the Tensormorph service run in this process, with no port
// (what the CLI asks without --server). In tensormorph_client_embedded,
// which links the server; client.h's Client links the stubs only.
#ifndef TENSORMORPH_CLIENT_EMBEDDED_EMBEDDED_CLIENT_H_
#define TENSORMORPH_CLIENT_EMBEDDED_EMBEDDED_CLIENT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "client/client.h"

namespace tensormorph {

// A Client of the service run in-process over an in-process channel,
// serving local paths (relative to the working directory, no roots); its
// slices skip the channel (EmbeddedSliceReader, local_slice_reader.h).
// Errors: those of starting the in-process server.
absl::StatusOr<std::unique_ptr<Client>> EmbeddedClient(
    const ClientOptions& options = {});

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_EMBEDDED_EMBEDDED_CLIENT_H_
