#include "client/cli/servers_listing.h"

#include <functional>
#include <future>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/endpoint_set.h"

namespace tensormorph {
namespace {

// One server's listing, every page.
struct Answer {
  std::string server;
  absl::Status status;
  std::vector<v1::CheckpointEntry> entries;
};

Answer ListOne(const std::string& server, const ClientOptions& options,
               const v1::ListCheckpointsRequest& request) {
  Answer a{server, absl::OkStatus(), {}};
  auto client = Client::Connect(server, options);
  if (!client.ok()) {
    a.status = client.status();
    return a;
  }
  a.status = (*client)->ListAllCheckpoints(
      request, [&](const v1::CheckpointEntry& e) { a.entries.push_back(e); });
  return a;
}

bool Unreachable(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded;
}

}  // namespace

absl::StatusOr<ServersListing> ListCheckpointsOfServers(
    const std::string& servers, const ClientOptions& options,
    const v1::ListCheckpointsRequest& request) {
  auto entries = ServerListEntries(servers);
  if (!entries.ok()) return entries.status();
  // Each dns:/// name stands for every address it resolves to: every pod of
  // a headless Service holds its own view, and one down is named.
  std::vector<std::future<Answer>> asked;
  for (const std::string& entry : *entries) {
    std::vector<std::string> addresses = {entry};
    if (absl::StartsWith(entry, "dns:///")) {
      auto resolved = ResolveEndpoints(entry);
      if (!resolved.ok()) {
        std::promise<Answer> failed;
        failed.set_value({entry, resolved.status(), {}});
        asked.push_back(failed.get_future());
        continue;
      }
      addresses = *std::move(resolved);
    }
    for (const std::string& address : addresses) {
      asked.push_back(std::async(std::launch::async, ListOne, address,
                                 std::cref(options), std::cref(request)));
    }
  }
  ServersListing out;
  std::set<std::string> listed;
  std::optional<absl::Status> refusal;
  int answered = 0;
  for (std::future<Answer>& f : asked) {
    Answer a = f.get();
    if (Unreachable(a.status)) {
      out.unreachable.push_back({a.server, a.status});
      continue;
    }
    if (!a.status.ok()) {
      if (!refusal) refusal = a.status;
      continue;
    }
    ++answered;
    for (v1::CheckpointEntry& e : a.entries) {
      if (listed.insert(e.path()).second) out.entries.push_back(std::move(e));
    }
  }
  if (refusal) return *refusal;
  if (answered == 0) {
    std::vector<std::string> named;
    for (const UnreachableServer& u : out.unreachable) {
      named.push_back(absl::StrCat(u.server, " (", u.status.message(), ")"));
    }
    return absl::UnavailableError(absl::StrCat(
        "no server of '", servers, "' answered: ", absl::StrJoin(named, "; ")));
  }
  return out;
}

}  // namespace tensormorph
