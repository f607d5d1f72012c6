// Several tensormorphd behind one Client: which endpoint holds which
// checkpoint (whole, or some of its shard files), and every call routed to
// one that holds the data, replies merged as one server would give them.
#ifndef TENSORMORPH_CLIENT_ROUTER_H_
#define TENSORMORPH_CLIENT_ROUTER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "client/endpoint_set.h"
#include "tensormorph/v1/tensormorph.grpc.pb.h"

namespace tensormorph {

// How long a checkpoint's placement is trusted before it is asked again: a
// long-lived client (the HTTP gateway, a dashboard) sees pods come and go.
inline constexpr absl::Duration kPlacementTtl = absl::Seconds(30);
// The deadline of each endpoint's GetCheckpoint when placing a checkpoint
// (shorter when the call's own is): a dead endpoint must not stall a call
// that other endpoints can serve.
inline constexpr absl::Duration kProbeTimeout = absl::Seconds(5);
// How long a probe that met a failed connect waits for a second one (gRPC
// reconnects after a backoff of 1 s +-20%): one refused connect is not a
// dead endpoint. A server just started or restarting, or a loaded machine,
// would otherwise be left out of the placement until it expires.
inline constexpr absl::Duration kProbeConnectGrace = absl::Seconds(2);

// How a Router re-resolves its dns:/// names; tests shorten and fake them.
struct RouterOptions {
  // The placement TTL (above), and the least time between two resolutions
  // of the dns:/// names when no endpoint failed.
  absl::Duration placement_ttl = kPlacementTtl;
  Resolver resolver = ResolveWithGetaddrinfo;
};

// Endpoints: the targets' dns:/// names are resolved again when a placement
// is made after the last resolution is placement_ttl old, or at once after
// an endpoint failed, so that a long-lived client follows a rollout. The
// new set keeps the connection of every address it still holds; each
// placement and the calls routed by it keep the set it was made with. A
// resolution that fails keeps the previous set; its error is named only
// when no endpoint answers.
//
// Placement: on a checkpoint's first use (then every kPlacementTtl, and at
// once after an endpoint of it failed) every endpoint is asked GetCheckpoint
// in parallel. Each holds it whole (no absent_files), holds some files
// (absent_files: a server run with --partial-shards, whose ListTensors then
// says which tensors it serves), does not hold it (NOT_FOUND), refuses it
// (another error) or fails (UNAVAILABLE, DEADLINE_EXCEEDED: unreachable).
//
// Routing: a call naming a tensor goes to an endpoint holding the
// checkpoint whole, round-robin per call among them so replicas share the
// load (from a random start per placement: each CLI run is a fresh
// process); with none, to the first partial holder listing the tensor. A
// logical tensor no endpoint builds (its module's stored tensors straddle
// endpoints) is FAILED_PRECONDITION, never its stored part of that name,
// which only `part` reads. A call naming a reference tensor too goes where
// both are. When the endpoint chosen turns out unreachable, or refuses with
// RESOURCE_EXHAUSTED (a server at max_concurrent_diffs), before any reply,
// the next candidate is tried; RESOURCE_EXHAUSTED is returned only when
// every reachable candidate refused so. GetServerInfo asks the first
// endpoint that answers.
//
// Merging (no endpoint holds the checkpoint whole): GetCheckpoint and
// ListTensors are what one server holding every file gives: files in name
// order (a shard index's order), counts and total_bytes of the union,
// metadata in file order, conventions and notes of the holders in endpoint
// order; ListTensors sorted by name (bytewise, as a server sorts logical
// tensors and stored parts alike), with list_count of the union. A tensor
// whose stored tensors are in shards on different endpoints is built by
// none (a partial holder withholds a module with a tensor in an absent
// shard): the merge then fails FAILED_PRECONDITION naming them rather than
// drop them, while calls naming other tensors go on.
// ListCheckpoints: every page of every endpoint, sent as one page (no
// next_page_token; page_size and page_token are ignored) in scan order, each
// path once: the entry with the most files; for a path endpoints list
// differently (file_count, total_bytes or format: replicas list it alike and
// are not asked more) and only partial holders hold, file_count and
// total_bytes of the union of their files (and stored_tensor_count, when
// the servers set it and every file is held), as one server holding it all
// would list it. Byte counts are checked: a negative one, or a sum past
// int64, is INTERNAL naming the endpoint.
//
// QuantDiff: on an endpoint holding both checkpoints whole when one does
// (round-robin). Otherwise split into sub-diffs, one per endpoint: the
// router pairs the merged listings by name exactly as one server would
// (client/diff_plan.h: the same pairs in the same order, the same lists,
// refusals and, with QuantDiffRequest.part, the same parts and
// fingerprint), gives each pair to an endpoint listing both its halves (the
// one with the fewest bytes given so far; ties to the first), sends each
// endpoint one request naming its pairs (QuantDiffRequest.tensors), all at
// once, and passes every TensorDiffReport on as it arrives, with progress
// summed over the endpoints (at most two a second) and a summary of its
// own, built by the server's rules (core/diff_parts/ranked_lists.h). A GGUF
// against a non-GGUF source is paired by translated names on a server only: it
// needs an endpoint holding both whole.
//
// CheckCheckpoint: on an endpoint holding the checkpoint whole
// (round-robin); a checkpoint split across endpoints cannot be checked.
//
// Errors: UNAVAILABLE naming the unreachable endpoints and their errors
// (and the files no reachable endpoint holds) when a call needs data only
// they may hold: "tensor T of C: not served by any reachable endpoint;
// unreachable: 127.0.0.1:7433 (connection refused)"; UNAVAILABLE too when
// every endpoint answered and files of the index are on none ("files no
// endpoint in the list holds: X; is a server missing from --server, or not
// ready?": a headless Service drops unready pods from DNS); a merged
// listing never drops tensors silently. FAILED_PRECONDITION for GetArchitecture
// and CheckCheckpoint of a checkpoint no endpoint holds whole, naming who holds
// what; for a split QuantDiff with pairs whose halves no one endpoint holds
// (naming them, before any diff runs) or a GGUF to translate; and for a
// merge some tensors of which no endpoint builds (above). A sub-diff that
// fails stops the others and fails the call with its status, naming its
// endpoint. Otherwise an endpoint's own status.
// Thread safety: every method may be called from many threads at once.
class Router {
 public:
  // One Client per endpoint, with `options` (and a probe deadline of at
  // most kProbeTimeout). `endpoints` is `targets` resolved now
  // (ResolveEndpoints with router_options.resolver).
  // REQUIRES: endpoints not empty.
  static std::unique_ptr<Router> Create(const std::string& targets,
                                        std::vector<std::string> endpoints,
                                        const ClientOptions& options,
                                        RouterOptions router_options = {});

  // The addresses of the current endpoint set.
  std::vector<std::string> endpoints();

  absl::StatusOr<v1::GetServerInfoResponse> GetServerInfo();
  absl::StatusOr<v1::GetCheckpointResponse> GetCheckpoint(
      const std::string& checkpoint);
  absl::StatusOr<v1::TensorInfo> GetTensor(const std::string& checkpoint,
                                           const std::string& tensor,
                                           bool part);
  absl::Status ListTensors(
      const v1::ListTensorsRequest& request,
      const std::function<void(const v1::TensorInfo&)>& on_tensor);
  absl::Status ReadSlice(
      const v1::ReadSliceRequest& request,
      const std::function<bool(const v1::SliceChunk&)>& on_chunk);
  absl::Status InspectScalars(const v1::InspectScalarsRequest& request,
                              v1::InspectScalarsResponse* response);
  absl::StatusOr<v1::ComputeStatsResponse> ComputeStats(
      const v1::ComputeStatsRequest& request);
  absl::StatusOr<v1::GetHeatmapResponse> GetHeatmap(
      const v1::GetHeatmapRequest& request);
  absl::StatusOr<v1::GetArchitectureResponse> GetArchitecture(
      const std::string& checkpoint);
  absl::Status ListCheckpoints(
      const v1::ListCheckpointsRequest& request,
      const std::function<bool(const v1::CheckpointEntry&)>& on_entry);
  absl::Status QuantDiff(
      const v1::QuantDiffRequest& request,
      const std::function<bool(const v1::QuantDiffEvent&)>& on_event);
  absl::Status CheckCheckpoint(
      const v1::CheckCheckpointRequest& request,
      const std::function<bool(const v1::CheckEvent&)>& on_event);

 private:
  struct Endpoint {
    std::string address;
    // Shared by the sets that follow while the address stays.
    std::shared_ptr<Client> client;  // the caller's options
    std::shared_ptr<Client> probe;   // deadline at most kProbeTimeout
    // The probe again, waiting for the connection (kProbeConnectGrace).
    std::shared_ptr<Client> patient_probe;
  };
  // One resolution of the targets; never changed once made.
  struct EndpointSet {
    std::vector<Endpoint> list;
    std::vector<std::string> addresses;  // list[i].address
  };
  using Snapshot = std::shared_ptr<const EndpointSet>;
  struct Placement;

  Router() = default;

  // The placement of `checkpoint`, cached for kPlacementTtl.
  // Errors: what one server would answer when no endpoint holds it
  // (NOT_FOUND, or the refusal of the first that refused), UNAVAILABLE
  // when only unreachable endpoints might.
  absl::StatusOr<std::shared_ptr<Placement>> Place(
      const std::string& checkpoint);
  std::shared_ptr<Placement> Probe(const std::string& checkpoint);
  // Forgets the placement of `checkpoint` after one of its endpoints
  // failed; the next placement resolves the dns:/// names again.
  void Forget(const std::string& checkpoint);
  // `s`, after forgetting `checkpoint`'s placement when `s` is UNAVAILABLE
  // (an endpoint it needs was unreachable when placed): the next call asks
  // again, so an endpoint back up serves it before the placement expires.
  absl::Status ForgetIfUnserved(const std::string& checkpoint, absl::Status s);
  // The endpoint set to place with: resolved again first when it is due
  // (see the class comment).
  Snapshot Refresh();
  // "; resolving the server list again failed: ..." when the last
  // resolution did.
  std::string ResolveNote();
  // The endpoints of `eps` whose addresses `other` has, as indices in eps.
  static std::vector<size_t> InBoth(const EndpointSet& eps,
                                    const std::vector<size_t>& mine,
                                    const EndpointSet& other,
                                    const std::vector<size_t>& theirs);

  // The endpoints to try for `tensor` (a part with `part`), in order.
  // Errors: UNAVAILABLE as the class comment says; FAILED_PRECONDITION for
  // a logical tensor no endpoint builds (UnbuiltError); NOT_FOUND when no
  // endpoint lists it and every file is served (then the first partial
  // holder is still asked, for its message: see Route).
  // `eps` is set to the endpoint set the indices are of.
  absl::StatusOr<std::vector<size_t>> Candidates(const std::string& checkpoint,
                                                 const std::string& tensor,
                                                 bool part, Snapshot* eps);
  // Runs `call` on the endpoints holding {checkpoint, tensor} and, when
  // `reference` is set, {reference, reference_tensor} too, trying the next
  // when one is unreachable. `call` returns whether it delivered anything to
  // the caller (after which no other endpoint is tried).
  absl::Status Route(
      const std::string& checkpoint, const std::string& tensor, bool part,
      const std::string& reference, const std::string& reference_tensor,
      const std::function<absl::Status(Client&, bool* delivered)>& call);
  // "name (on ADDRESS, ...)": a stored tensor that no endpoint builds into
  // a logical tensor, and the endpoints holding it.
  static std::string WhereIs(const Placement& p, const std::string& stored);

  // Runs `call` on a whole holder of `p` (round-robin), the next when one
  // is unreachable.
  absl::Status RouteWhole(
      const std::string& what, const std::string& checkpoint, Placement& p,
      const std::function<absl::Status(Client&, bool* delivered)>& call);
  // Runs `call` on the endpoints of `order` until one answers, fails
  // otherwise than unreachable or RESOURCE_EXHAUSTED, or has delivered a
  // reply; forgets the placements of `placed` when one is unreachable.
  // When none answered and some refused RESOURCE_EXHAUSTED: the first
  // refusal (as is when it is the only failure, else followed by every
  // refusal and unreachable endpoint); else UNAVAILABLE "<what>: not served
  // by any reachable endpoint; unreachable: ..." when all are unreachable.
  absl::Status TryInOrder(
      const EndpointSet& eps, const std::vector<size_t>& order,
      const std::string& what, const std::vector<std::string>& placed,
      const std::function<absl::Status(Client&, bool* delivered)>& call);
  // GetCheckpoint and ListTensors merged over the partial holders.
  absl::StatusOr<v1::GetCheckpointResponse> MergeCheckpoint(
      const std::string& checkpoint, Placement& p);
  absl::Status MergeTensors(
      const v1::ListTensorsRequest& request, Placement& p,
      const std::function<void(const v1::TensorInfo&)>& on_tensor);
  // UNAVAILABLE naming the files of `p` that no endpoint in `live` holds, and
  // the endpoints that failed (at placement, or now: `now`, by endpoint, when
  // given); OK when every file is held.
  absl::Status CheckServed(
      const std::string& what, const Placement& p,
      const std::vector<size_t>& live,
      const std::vector<absl::Status>* now = nullptr) const;
  // QuantDiff when no endpoint holds both checkpoints whole: sub-diffs
  // (see the class comment).
  absl::Status SplitQuantDiff(
      const v1::QuantDiffRequest& request, const Placement& quant,
      const Placement& ref,
      const std::function<bool(const v1::QuantDiffEvent&)>& on_event);
  // The endpoints that list `tensor` of `p`'s checkpoint: its whole holders
  // when it has any, else the partial holders listing it.
  static std::vector<size_t> Holding(const Placement& p,
                                     const std::string& tensor);
  // FAILED_PRECONDITION for `tensor` (a name in p.unbuilt, read as a
  // logical tensor), naming the stored tensors of its module no endpoint
  // builds and where they are.
  absl::Status UnbuiltError(const std::string& what, const Placement& p,
                            const std::string& tensor) const;
  // FAILED_PRECONDITION naming the stored tensors no partial holder builds
  // into a logical tensor (see Placement::unbuilt) that `filter` (a glob, as
  // ListTensorsRequest.filter; empty: all) matches; OK when none.
  absl::Status CheckBuilt(const std::string& what, const Placement& p,
                          const std::string& filter = "") const;
  // "127.0.0.1:7433 (connection refused), ..." for the endpoints of `p`
  // that failed.
  std::string Unreachable(const Placement& p) const;

  Endpoint MakeEndpoint(const std::string& address) const;

  ClientOptions options_, probe_options_, patient_probe_options_;
  absl::Duration probe_timeout_;  // the probes' deadline
  std::string targets_;
  bool dynamic_ = false;  // targets_ has a dns:/// name
  RouterOptions router_options_;
  absl::Mutex resolve_mu_;  // one resolution at a time
  absl::Mutex mu_;
  Snapshot snapshot_ ABSL_GUARDED_BY(mu_);
  absl::Time resolved_at_ ABSL_GUARDED_BY(mu_);
  bool endpoint_failed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status resolve_error_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<Placement>> placements_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_ROUTER_H_
