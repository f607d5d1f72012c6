// `tensormorph ls` of checkpoints over a server list: every server is asked
// on its own, what the reachable ones hold is listed once, and the ones that
// could not be reached are named instead of failing the listing. (Other
// calls go to one server of the list, Client's failover; only a listing of
// what the servers hold is about each of them.)
#ifndef TENSORMORPH_CLIENT_CLI_SERVERS_LISTING_H_
#define TENSORMORPH_CLIENT_CLI_SERVERS_LISTING_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/client.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

struct UnreachableServer {
  std::string server;   // "127.0.0.1:7433", or a dns:/// entry that failed
  absl::Status status;  // UNAVAILABLE or DEADLINE_EXCEEDED
};

struct ServersListing {
  // Every page of every server that answered, each path once: the servers
  // in list order, each one's entries in its order, a path already listed
  // left out (equivalent servers list a path alike).
  std::vector<v1::CheckpointEntry> entries;
  // In list order.
  std::vector<UnreachableServer> unreachable;
};

// `request` (ListAllCheckpoints: every page) asked of each server of
// `servers` (a --server list: each host:port, and each address a dns:///
// entry resolves to now, one by one, in parallel), with `options`.
// A server is unreachable when its listing fails UNAVAILABLE or
// DEADLINE_EXCEEDED (a dns:/// entry that does not resolve too).
// Errors: the first other failure, in list order (a refusal any one server
// would give: PERMISSION_DENIED, NOT_FOUND for the directory, ...);
// UNAVAILABLE naming every server when none answered; INVALID_ARGUMENT for
// a malformed list (ServerListEntries).
absl::StatusOr<ServersListing> ListCheckpointsOfServers(
    const std::string& servers, const ClientOptions& options,
    const v1::ListCheckpointsRequest& request);

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_CLI_SERVERS_LISTING_H_
