#include "client/router.h"

#include <fnmatch.h>

#include <algorithm>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <system_error>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/diff_parts_proto.h"
#include "client/diff_plan.h"

namespace tensormorph {

// What the endpoints said about one checkpoint.
struct Router::Placement {
  enum class Kind { kWhole, kPartial, kAbsent, kRefused, kFailed };
  struct Answer {
    Kind kind = Kind::kAbsent;
    absl::Status status;  // kAbsent, kRefused, kFailed
    v1::GetCheckpointResponse info;
  };
  absl::Time created;
  Snapshot eps;                 // the endpoints the indices below are of
  std::vector<Answer> answers;  // by endpoint
  std::vector<size_t> whole, partial;
  // With no whole holder: each tensor (logical; stored parts) the partial
  // holders list, to the holders listing it, in endpoint order.
  absl::flat_hash_map<std::string, std::vector<size_t>> logical, parts;
  // Each stored tensor to the partial holders building it into a logical
  // tensor (the others withhold its module): where its name, read as a
  // tensor, resolves to that part.
  absl::flat_hash_map<std::string, std::vector<size_t>> claimed;
  // Every file a holder names, held or absent, in name order.
  std::vector<std::string> all_files;
  // Stored tensors the partial holders list as parts but build into no
  // logical tensor: their tensor straddles shards on different endpoints.
  std::vector<std::string> unbuilt;
  // Round-robin among `whole`, from a random start: every CLI run is a
  // fresh process, and a start at 0 would send them all to the first.
  std::atomic<uint64_t> next{0};
};

namespace {

// 0, 1, ..., n-1.
std::vector<size_t> All(size_t n) {
  std::vector<size_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = i;
  return out;
}

bool IsUnreachable(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded;
}

// `n` tasks run at once, one thread each (n is the number of endpoints).
// When no thread can be made (std::system_error: a process at its thread
// limit), the tasks not started run here, one after the other: slower, not
// a crash. An exception a task throws is rethrown here once every thread
// is joined, as a call on one thread would throw it, never std::terminate.
void RunEach(size_t n, const std::function<void(size_t)>& task) {
  std::vector<std::exception_ptr> thrown(n);
  auto guarded = [&](size_t i) {
    try {
      task(i);
    } catch (...) {
      thrown[i] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(n);
  size_t started = 0;
  for (; started < n; ++started) {
    try {
      threads.emplace_back(guarded, started);
    } catch (const std::system_error&) {
      break;
    }
  }
  for (size_t i = started; i < n; ++i) guarded(i);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : thrown) {
    if (e) std::rethrow_exception(e);
  }
}

// Scan order, as a server's ListCheckpoints sends entries: path components
// compared bytewise.
bool ScanLess(const std::string& a, const std::string& b) {
  const std::vector<absl::string_view> x = absl::StrSplit(a, '/');
  const std::vector<absl::string_view> y = absl::StrSplit(b, '/');
  return std::lexicographical_compare(x.begin(), x.end(), y.begin(), y.end());
}

// `*sum += bytes` for a byte count from the wire. INTERNAL naming `from`
// (the endpoint and what) for a negative count or a sum past int64.
absl::Status AddBytes(int64_t bytes, const std::string& from, int64_t* sum) {
  if (bytes < 0) {
    return absl::InternalError(
        absl::StrCat(from, ": a negative byte count (", bytes, ")"));
  }
  if (__builtin_add_overflow(*sum, bytes, sum)) {
    return absl::InternalError(absl::StrCat(
        from, ": byte counts whose sum overflows 64 bits (", bytes, ")"));
  }
  return absl::OkStatus();
}

bool Holds(const v1::GetCheckpointResponse& info, const std::string& file) {
  for (const v1::FileInfo& f : info.files()) {
    if (f.path() == file) return true;
  }
  return false;
}

}  // namespace

std::unique_ptr<Router> Router::Create(const std::string& targets,
                                       std::vector<std::string> endpoints,
                                       const ClientOptions& options,
                                       RouterOptions router_options) {
  std::unique_ptr<Router> r(new Router());
  r->options_ = options;
  r->probe_options_ = options;
  r->probe_options_.timeout =
      std::min(options.timeout.value_or(kDefaultUnaryTimeout), kProbeTimeout);
  r->probe_timeout_ = *r->probe_options_.timeout;
  r->patient_probe_options_ = r->probe_options_;
  r->patient_probe_options_.wait_for_ready = true;
  r->patient_probe_options_.timeout =
      std::min(r->probe_timeout_, kProbeConnectGrace);
  r->targets_ = targets;
  r->dynamic_ = HasDnsName(targets);
  r->router_options_ = std::move(router_options);
  auto set = std::make_shared<EndpointSet>();
  for (std::string& address : endpoints) {
    set->list.push_back(r->MakeEndpoint(address));
    set->addresses.push_back(std::move(address));
  }
  absl::MutexLock lock(&r->mu_);
  r->snapshot_ = std::move(set);
  r->resolved_at_ = absl::Now();
  return r;
}

Router::Endpoint Router::MakeEndpoint(const std::string& address) const {
  // Connect fails only for an empty target, which ResolveEndpoints never
  // gives. The three channels share one connection (gRPC's subchannel pool
  // keys it by address and arguments, which are the same).
  return Endpoint{address, *Client::Connect(address, options_),
                  *Client::Connect(address, probe_options_),
                  *Client::Connect(address, patient_probe_options_)};
}

std::vector<std::string> Router::endpoints() {
  absl::MutexLock lock(&mu_);
  return snapshot_->addresses;
}

Router::Snapshot Router::Refresh() {
  if (!dynamic_) {
    absl::MutexLock lock(&mu_);
    return snapshot_;
  }
  // One resolution at a time: the calls waiting here then find it done.
  absl::MutexLock resolving(&resolve_mu_);
  Snapshot old;
  {
    absl::MutexLock lock(&mu_);
    if (!endpoint_failed_ &&
        absl::Now() - resolved_at_ < router_options_.placement_ttl) {
      return snapshot_;
    }
    old = snapshot_;
    // At most once per TTL, and once per failure seen.
    resolved_at_ = absl::Now();
    endpoint_failed_ = false;
  }
  auto addresses = ResolveEndpoints(targets_, router_options_.resolver);
  if (addresses.ok() && addresses->empty()) {
    addresses = absl::UnavailableError("it resolves to no address");
  }
  if (!addresses.ok()) {
    // The endpoints known so far may well still answer.
    absl::MutexLock lock(&mu_);
    resolve_error_ = addresses.status();
    return snapshot_;
  }
  if (*addresses == old->addresses) {
    absl::MutexLock lock(&mu_);
    resolve_error_ = absl::OkStatus();
    return snapshot_;
  }
  auto set = std::make_shared<EndpointSet>();
  for (std::string& address : *addresses) {
    auto same =
        std::find(old->addresses.begin(), old->addresses.end(), address);
    if (same != old->addresses.end()) {
      // Its connection survives the swap.
      set->list.push_back(old->list[same - old->addresses.begin()]);
    } else {
      set->list.push_back(MakeEndpoint(address));
    }
    set->addresses.push_back(std::move(address));
  }
  absl::MutexLock lock(&mu_);
  resolve_error_ = absl::OkStatus();
  snapshot_ = std::move(set);
  // Placements of the old set still route by it until they expire or fail.
  return snapshot_;
}

std::string Router::ResolveNote() {
  absl::MutexLock lock(&mu_);
  if (resolve_error_.ok()) return "";
  // The endpoints of the last resolution that worked were asked.
  return absl::StrCat("; resolving the server list again failed: ",
                      resolve_error_.message());
}

std::vector<size_t> Router::InBoth(const EndpointSet& eps,
                                   const std::vector<size_t>& mine,
                                   const EndpointSet& other,
                                   const std::vector<size_t>& theirs) {
  std::vector<size_t> out;
  for (size_t i : mine) {
    for (size_t j : theirs) {
      if (other.addresses[j] == eps.addresses[i]) {
        out.push_back(i);
        break;
      }
    }
  }
  return out;
}

std::shared_ptr<Router::Placement> Router::Probe(
    const std::string& checkpoint) {
  auto p = std::make_shared<Placement>();
  p->eps = Refresh();
  const std::vector<Endpoint>& clients = p->eps->list;
  p->created = absl::Now();
  {
    absl::BitGen gen;
    p->next = absl::Uniform<uint64_t>(gen);
  }
  p->answers.resize(clients.size());
  RunEach(clients.size(), [&](size_t i) {
    Placement::Answer& a = p->answers[i];
    auto info = clients[i].probe->GetCheckpoint(checkpoint);
    if (info.status().code() == absl::StatusCode::kUnavailable) {
      // Asked again, waiting for a connection (kProbeConnectGrace); the
      // first answer stays when none came, as it names why.
      auto again = clients[i].patient_probe->GetCheckpoint(checkpoint);
      if (again.status().code() != absl::StatusCode::kDeadlineExceeded) {
        info = std::move(again);
      }
    }
    if (info.ok()) {
      a.kind = info->absent_files().empty() ? Placement::Kind::kWhole
                                            : Placement::Kind::kPartial;
      a.info = *std::move(info);
    } else {
      a.status = info.status();
      if (a.status.code() == absl::StatusCode::kDeadlineExceeded) {
        // The probe's own deadline, not the caller's: the Client's message
        // would point at ClientOptions::timeout.
        a.status = absl::DeadlineExceededError(absl::StrCat(
            "no reply to the placement probe (GetCheckpoint) within ",
            absl::FormatDuration(probe_timeout_),
            ": probes have a fixed deadline of ",
            absl::FormatDuration(kProbeTimeout),
            " (kProbeTimeout; ClientOptions::timeout only shortens it), so "
            "that a hung endpoint does not stall the others"));
      }
      a.kind = info.status().code() == absl::StatusCode::kNotFound
                   ? Placement::Kind::kAbsent
               : IsUnreachable(info.status()) ? Placement::Kind::kFailed
                                              : Placement::Kind::kRefused;
    }
  });
  bool any_whole = false;
  for (const Placement::Answer& a : p->answers) {
    any_whole = any_whole || a.kind == Placement::Kind::kWhole;
  }
  // Which partial holder serves which tensor matters only when no endpoint
  // holds it whole.
  if (!any_whole) {
    std::vector<std::vector<std::string>> logical(clients.size()),
        parts(clients.size()), claimed(clients.size());
    RunEach(clients.size(), [&](size_t i) {
      Placement::Answer& a = p->answers[i];
      if (a.kind != Placement::Kind::kPartial) return;
      for (bool as_parts : {false, true}) {
        v1::ListTensorsRequest req;
        req.set_checkpoint(checkpoint);
        req.set_parts(as_parts);
        std::vector<std::string>& names = as_parts ? parts[i] : logical[i];
        // The probe's deadline: a listing that hangs must not stall the
        // placement, and with it every call.
        absl::Status s =
            clients[i].probe->ListTensors(req, [&](const v1::TensorInfo& t) {
              names.push_back(t.name());
              if (as_parts) return;
              for (const v1::StoredTensorInfo& part : t.parts()) {
                claimed[i].push_back(part.name());
              }
            });
        if (!s.ok()) {
          a.kind = IsUnreachable(s) ? Placement::Kind::kFailed
                                    : Placement::Kind::kRefused;
          a.status = s;
          return;
        }
      }
    });
    for (size_t i = 0; i < clients.size(); ++i) {
      if (p->answers[i].kind != Placement::Kind::kPartial) continue;
      for (const std::string& n : logical[i]) p->logical[n].push_back(i);
      for (const std::string& n : parts[i]) p->parts[n].push_back(i);
      for (const std::string& n : claimed[i]) {
        std::vector<size_t>& at = p->claimed[n];
        if (at.empty() || at.back() != i) at.push_back(i);
      }
    }
    // One server builds every stored tensor into a logical one (itself, or
    // with its companions). A stored tensor no holder builds belongs to a
    // tensor whose parts are on different endpoints.
    absl::flat_hash_map<absl::string_view, bool> built;
    for (size_t i = 0; i < clients.size(); ++i) {
      if (p->answers[i].kind != Placement::Kind::kPartial) continue;
      for (const std::string& n : claimed[i]) built.emplace(n, true);
    }
    for (const auto& [name, holders] : p->parts) {
      if (!built.contains(name)) p->unbuilt.push_back(name);
    }
    std::sort(p->unbuilt.begin(), p->unbuilt.end());
  }
  std::set<std::string> files;
  for (size_t i = 0; i < clients.size(); ++i) {
    const Placement::Answer& a = p->answers[i];
    if (a.kind == Placement::Kind::kWhole) p->whole.push_back(i);
    if (a.kind == Placement::Kind::kPartial) p->partial.push_back(i);
    if (a.kind == Placement::Kind::kWhole ||
        a.kind == Placement::Kind::kPartial) {
      for (const v1::FileInfo& f : a.info.files()) files.insert(f.path());
      for (const std::string& f : a.info.absent_files()) files.insert(f);
    }
  }
  p->all_files.assign(files.begin(), files.end());
  return p;
}

absl::StatusOr<std::shared_ptr<Router::Placement>> Router::Place(
    const std::string& checkpoint) {
  std::shared_ptr<Placement> p;
  {
    absl::MutexLock lock(&mu_);
    auto it = placements_.find(checkpoint);
    if (it != placements_.end() &&
        absl::Now() - it->second->created < router_options_.placement_ttl) {
      p = it->second;
    }
  }
  if (p == nullptr) {
    // Probed off the lock: two first calls may both probe; the last wins.
    p = Probe(checkpoint);
    if (!p->whole.empty() || !p->partial.empty()) {
      absl::MutexLock lock(&mu_);
      // Expired ones go here: a long-lived client otherwise keeps every
      // checkpoint it ever named.
      const absl::Time now = absl::Now();
      absl::erase_if(placements_, [&](const auto& kv) {
        return now - kv.second->created >= router_options_.placement_ttl;
      });
      placements_[checkpoint] = p;
    }
  }
  if (!p->whole.empty() || !p->partial.empty()) return p;
  const std::string unreachable = Unreachable(*p);
  if (!unreachable.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "checkpoint '", checkpoint,
        "': held by no reachable endpoint; unreachable: ", unreachable,
        ResolveNote()));
  }
  for (const Placement::Answer& a : p->answers) {
    if (a.kind == Placement::Kind::kRefused) return a.status;
  }
  return p->answers[0].status;  // NOT_FOUND, as one server says it
}

void Router::Forget(const std::string& checkpoint) {
  absl::MutexLock lock(&mu_);
  placements_.erase(checkpoint);
  endpoint_failed_ = true;
}

absl::Status Router::ForgetIfUnserved(const std::string& checkpoint,
                                      absl::Status s) {
  if (s.code() == absl::StatusCode::kUnavailable) Forget(checkpoint);
  return s;
}

std::string Router::Unreachable(const Placement& p) const {
  std::vector<std::string> out;
  for (size_t i = 0; i < p.answers.size(); ++i) {
    if (p.answers[i].kind == Placement::Kind::kFailed) {
      out.push_back(absl::StrCat(p.eps->addresses[i], " (",
                                 p.answers[i].status.message(), ")"));
    }
  }
  return absl::StrJoin(out, ", ");
}

absl::Status Router::CheckServed(const std::string& what, const Placement& p,
                                 const std::vector<size_t>& live,
                                 const std::vector<absl::Status>* now) const {
  std::vector<std::string> unserved;
  for (const std::string& f : p.all_files) {
    bool held = false;
    for (size_t i : live) held = held || Holds(p.answers[i].info, f);
    if (!held) unserved.push_back(f);
  }
  if (unserved.empty()) return absl::OkStatus();
  std::vector<std::string> failed;
  for (size_t i = 0; i < p.answers.size(); ++i) {
    const bool is_live = std::find(live.begin(), live.end(), i) != live.end();
    const Placement::Answer& a = p.answers[i];
    if (a.kind == Placement::Kind::kFailed ||
        (!is_live && (a.kind == Placement::Kind::kPartial ||
                      a.kind == Placement::Kind::kWhole))) {
      const absl::Status& why =
          now != nullptr && !(*now)[i].ok() ? (*now)[i] : a.status;
      failed.push_back(absl::StrCat(p.eps->addresses[i], " (",
                                    why.ok() ? "failed" : why.message(), ")"));
    }
  }
  const std::string files = absl::StrCat("files no reachable endpoint holds: ",
                                         absl::StrJoin(unserved, ", "));
  if (failed.empty()) {
    // Every endpoint answered and none holds them: most often a server left
    // out of the list, or one not ready yet (a headless Service's DNS drops
    // unready pods). UNAVAILABLE, which retry logic retries, not DATA_LOSS.
    return absl::UnavailableError(
        absl::StrCat(what, ": files no endpoint in the list (",
                     absl::StrJoin(p.eps->addresses, ", "),
                     ") holds: ", absl::StrJoin(unserved, ", "),
                     "; is a server missing from --server, or not ready?"));
  }
  return absl::UnavailableError(absl::StrCat(
      what, ": not served by any reachable endpoint; unreachable: ",
      absl::StrJoin(failed, ", "), "; ", files));
}

absl::Status Router::UnbuiltError(const std::string& what, const Placement& p,
                                  const std::string& tensor) const {
  // The stored tensors of its module (its name less the last component)
  // that no endpoint builds, and where each is.
  const size_t dot = tensor.rfind('.');
  const std::string module =
      dot == std::string::npos ? std::string() : tensor.substr(0, dot + 1);
  std::vector<std::string> named;
  for (const std::string& n : p.unbuilt) {
    if (n != tensor && (module.empty() || !absl::StartsWith(n, module))) {
      continue;
    }
    named.push_back(WhereIs(p, n));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      what,
      ": no endpoint builds it, its stored tensors being in shard files on "
      "different endpoints: ",
      absl::StrJoin(named, ", "),
      "; its stored part of that name alone is read with part=true (--part). "
      "Serve each module's shards on one endpoint, or the checkpoint whole on "
      "one"));
}

// "name (on 127.0.0.1:7431, 127.0.0.1:7432)": a stored tensor no endpoint
// builds, and the endpoints holding it.
std::string Router::WhereIs(const Placement& p, const std::string& stored) {
  std::vector<std::string> at;
  for (size_t i : p.parts.find(stored)->second) {
    at.push_back(p.eps->addresses[i]);
  }
  return absl::StrCat(stored, " (on ", absl::StrJoin(at, ", "), ")");
}

absl::Status Router::CheckBuilt(const std::string& what, const Placement& p,
                                const std::string& filter) const {
  // Only what the listing would include: a filter may leave them out.
  std::vector<std::string> unbuilt;
  for (const std::string& n : p.unbuilt) {
    if (filter.empty() || ::fnmatch(filter.c_str(), n.c_str(), 0) == 0) {
      unbuilt.push_back(n);
    }
  }
  if (unbuilt.empty()) return absl::OkStatus();
  std::vector<std::string> named;
  for (const std::string& n : unbuilt) {
    if (named.size() == 5) {
      named.push_back(absl::StrCat("and ", unbuilt.size() - 5, " more"));
      break;
    }
    named.push_back(WhereIs(p, n));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      what,
      ": no endpoint builds the tensors these stored tensors belong to, whose "
      "companions are in shard files on other endpoints: ",
      absl::StrJoin(named, ", "),
      "; a merged listing would drop them. Serve each module's shards on one "
      "endpoint, or the checkpoint whole on one; the other tensors read as "
      "usual"));
}

absl::StatusOr<std::vector<size_t>> Router::Candidates(
    const std::string& checkpoint, const std::string& tensor, bool part,
    Snapshot* eps) {
  auto placed = Place(checkpoint);
  if (!placed.ok()) return placed.status();
  Placement& p = **placed;
  *eps = p.eps;
  if (!p.whole.empty()) {
    std::vector<size_t> order = p.whole;
    std::rotate(order.begin(), order.begin() + p.next++ % order.size(),
                order.end());
    return order;
  }
  if (!part) {
    if (auto it = p.logical.find(tensor); it != p.logical.end()) {
      return it->second;
    }
    // A stored tensor's name read as a tensor: only where its module is
    // built (a holder withholding the module answers NOT_FOUND), and never
    // the half of a tensor straddling endpoints, whose values alone are
    // wrong (FP8 codes without their scale).
    if (auto it = p.claimed.find(tensor); it != p.claimed.end()) {
      return it->second;
    }
    if (p.parts.contains(tensor)) {
      return UnbuiltError(
          absl::StrCat("tensor '", tensor, "' of '", checkpoint, "'"), p,
          tensor);
    }
  }
  if (auto it = p.parts.find(tensor); it != p.parts.end()) return it->second;
  const std::string what =
      absl::StrCat("tensor '", tensor, "' of '", checkpoint, "'");
  if (absl::Status s = CheckServed(what, p, p.partial); !s.ok()) {
    return ForgetIfUnserved(checkpoint, std::move(s));
  }
  if (const std::string failed = Unreachable(p); !failed.empty()) {
    return ForgetIfUnserved(
        checkpoint,
        absl::UnavailableError(absl::StrCat(
            what,
            ": not served by any reachable endpoint; unreachable: ", failed)));
  }
  // No endpoint lists it and none is missing: the first partial holder
  // says why (a near name, or the shard it would be in).
  return std::vector<size_t>{p.partial[0]};
}

absl::Status Router::Route(
    const std::string& checkpoint, const std::string& tensor, bool part,
    const std::string& reference, const std::string& reference_tensor,
    const std::function<absl::Status(Client&, bool* delivered)>& call) {
  Snapshot eps, ref_eps;
  auto cands = Candidates(checkpoint, tensor, part, &eps);
  if (!cands.ok()) return cands.status();
  std::vector<size_t> order = *std::move(cands);
  if (!reference.empty()) {
    const std::string& ref_tensor =
        reference_tensor.empty() ? tensor : reference_tensor;
    auto ref = Candidates(reference, ref_tensor, false, &ref_eps);
    if (!ref.ok()) return ref.status();
    // The two placements may be of different endpoint sets: matched by
    // address.
    std::vector<size_t> both = InBoth(*eps, order, *ref_eps, *ref);
    if (both.empty()) {
      auto names = [&](const EndpointSet& set, const std::vector<size_t>& v) {
        std::vector<std::string> out;
        for (size_t i : v) out.push_back(set.addresses[i]);
        return absl::StrJoin(out, ", ");
      };
      return absl::FailedPreconditionError(absl::StrCat(
          "tensor '", tensor, "' of '", checkpoint, "' is served by ",
          names(*eps, order), " and its reference '", ref_tensor, "' of '",
          reference, "' by ", names(*ref_eps, *ref),
          ": no endpoint holds both, and the comparison runs on one"));
    }
    order = std::move(both);
  }
  return TryInOrder(*eps, order,
                    absl::StrCat("tensor '", tensor, "' of '", checkpoint, "'"),
                    {checkpoint, reference}, call);
}

absl::Status Router::RouteWhole(
    const std::string& what, const std::string& checkpoint, Placement& p,
    const std::function<absl::Status(Client&, bool* delivered)>& call) {
  std::vector<size_t> order = p.whole;
  std::rotate(order.begin(), order.begin() + p.next++ % order.size(),
              order.end());
  return TryInOrder(*p.eps, order, what, {checkpoint}, call);
}

absl::Status Router::TryInOrder(
    const EndpointSet& eps, const std::vector<size_t>& order,
    const std::string& what, const std::vector<std::string>& placed,
    const std::function<absl::Status(Client&, bool* delivered)>& call) {
  std::vector<std::string> failed, busy;
  absl::Status first_busy;
  for (size_t i : order) {
    bool delivered = false;
    absl::Status s = call(*eps.list[i].client, &delivered);
    if (s.ok() || delivered) return s;
    // A server at its limit (max_concurrent_diffs, ...) refused before
    // starting: another holder may have room.
    if (s.code() == absl::StatusCode::kResourceExhausted) {
      if (busy.empty()) first_busy = s;
      busy.push_back(absl::StrCat(eps.addresses[i], " (", s.message(), ")"));
      continue;
    }
    if (!IsUnreachable(s)) return s;
    failed.push_back(absl::StrCat(eps.addresses[i], " (", s.message(), ")"));
    // Placed again on the next call, without it.
    for (const std::string& c : placed) {
      if (!c.empty()) Forget(c);
    }
  }
  if (!busy.empty()) {
    // Some holder is up but refused: its own words (as one server says
    // them: a per-request limit reads the same), then who else refused.
    if (busy.size() == 1 && failed.empty()) return first_busy;
    return absl::ResourceExhaustedError(absl::StrCat(
        first_busy.message(), " (", what,
        ": every reachable endpoint holding it refused so: ",
        absl::StrJoin(busy, ", "), failed.empty() ? "" : "; unreachable: ",
        absl::StrJoin(failed, ", "), ")"));
  }
  return absl::UnavailableError(absl::StrCat(
      what, ": not served by any reachable endpoint; unreachable: ",
      absl::StrJoin(failed, ", ")));
}

absl::StatusOr<v1::GetServerInfoResponse> Router::GetServerInfo() {
  const Snapshot eps = Refresh();
  std::vector<std::string> failed;
  for (size_t i = 0; i < eps->list.size(); ++i) {
    auto info = eps->list[i].client->GetServerInfo();
    if (info.ok() || !IsUnreachable(info.status())) return info;
    failed.push_back(
        absl::StrCat(eps->addresses[i], " (", info.status().message(), ")"));
  }
  {
    absl::MutexLock lock(&mu_);
    endpoint_failed_ = true;
  }
  return absl::UnavailableError(absl::StrCat(
      "GetServerInfo: no endpoint reachable: ", absl::StrJoin(failed, ", "),
      ResolveNote()));
}

absl::StatusOr<v1::GetCheckpointResponse> Router::GetCheckpoint(
    const std::string& checkpoint) {
  auto placed = Place(checkpoint);
  if (!placed.ok()) return placed.status();
  if ((*placed)->whole.empty()) return MergeCheckpoint(checkpoint, **placed);
  v1::GetCheckpointResponse out;
  absl::Status s =
      RouteWhole(absl::StrCat("checkpoint '", checkpoint, "'"), checkpoint,
                 **placed, [&](Client& c, bool*) -> absl::Status {
                   auto r = c.GetCheckpoint(checkpoint);
                   if (r.ok()) out = *std::move(r);
                   return r.status();
                 });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<v1::GetCheckpointResponse> Router::MergeCheckpoint(
    const std::string& checkpoint, Placement& p) {
  if (absl::Status s = CheckServed(
          absl::StrCat("checkpoint '", checkpoint, "'"), p, p.partial);
      !s.ok()) {
    return ForgetIfUnserved(checkpoint, std::move(s));
  }
  if (absl::Status s =
          CheckBuilt(absl::StrCat("checkpoint '", checkpoint, "'"), p);
      !s.ok()) {
    return s;
  }
  v1::GetCheckpointResponse out;
  out.set_checkpoint(checkpoint);
  out.set_format(p.answers[p.partial[0]].info.format());
  int64_t total = 0;
  for (const std::string& f : p.all_files) {
    for (size_t i : p.partial) {
      const v1::GetCheckpointResponse& info = p.answers[i].info;
      if (!Holds(info, f)) continue;
      for (const v1::FileInfo& fi : info.files()) {
        if (fi.path() == f) {
          *out.add_files() = fi;
          if (absl::Status s = AddBytes(
                  fi.size_bytes(),
                  absl::StrCat("checkpoint '", checkpoint, "': file '", f,
                               "' as ", p.eps->addresses[i], " lists it"),
                  &total);
              !s.ok()) {
            return s;
          }
        }
      }
      // Its metadata entries, named by file as a server of several files
      // names them (one holding a single file leaves the name out).
      for (const v1::MetadataEntry& m : info.metadata()) {
        const std::string& file = m.file().empty() && info.files_size() == 1
                                      ? info.files(0).path()
                                      : m.file();
        if (file != f) continue;
        v1::MetadataEntry* e = out.add_metadata();
        *e = m;
        e->set_file(p.all_files.size() > 1 ? f : "");
      }
      break;
    }
  }
  out.set_total_bytes(total);
  out.set_tensor_count(static_cast<int64_t>(p.logical.size()));
  out.set_stored_tensor_count(static_cast<int64_t>(p.parts.size()));
  for (size_t i : p.partial) {
    const v1::GetCheckpointResponse& info = p.answers[i].info;
    for (const std::string& c : info.conventions()) {
      if (std::find(out.conventions().begin(), out.conventions().end(), c) ==
          out.conventions().end()) {
        out.add_conventions(c);
      }
    }
    for (const std::string& n : info.notes()) {
      if (std::find(out.notes().begin(), out.notes().end(), n) ==
          out.notes().end()) {
        out.add_notes(n);
      }
    }
  }
  // The configs sit beside the shards, in the checkpoint's directory: every
  // server read the same files.
  const v1::GetCheckpointResponse& first = p.answers[p.partial[0]].info;
  *out.mutable_quant_config() = first.quant_config();
  *out.mutable_config_files() = first.config_files();
  return out;
}

absl::StatusOr<v1::TensorInfo> Router::GetTensor(const std::string& checkpoint,
                                                 const std::string& tensor,
                                                 bool part) {
  v1::TensorInfo out;
  absl::Status s = Route(checkpoint, tensor, part, "", "",
                         [&](Client& c, bool*) -> absl::Status {
                           auto r = c.GetTensor(checkpoint, tensor, part);
                           if (r.ok()) out = *std::move(r);
                           return r.status();
                         });
  if (!s.ok()) return s;
  return out;
}

absl::Status Router::ListTensors(
    const v1::ListTensorsRequest& request,
    const std::function<void(const v1::TensorInfo&)>& on_tensor) {
  auto placed = Place(request.checkpoint());
  if (!placed.ok()) return placed.status();
  if ((*placed)->whole.empty()) {
    return MergeTensors(request, **placed, on_tensor);
  }
  return RouteWhole(
      absl::StrCat("ListTensors of \'", request.checkpoint(), "\'"),
      request.checkpoint(), **placed, [&](Client& c, bool* delivered) {
        return c.ListTensors(request, [&](const v1::TensorInfo& t) {
          *delivered = true;
          on_tensor(t);
        });
      });
}

absl::Status Router::MergeTensors(
    const v1::ListTensorsRequest& request, Placement& p,
    const std::function<void(const v1::TensorInfo&)>& on_tensor) {
  const std::vector<Endpoint>& clients = p.eps->list;
  std::vector<std::vector<v1::TensorInfo>> lists(clients.size());
  std::vector<absl::Status> status(clients.size());
  RunEach(p.partial.size(), [&](size_t k) {
    const size_t i = p.partial[k];
    status[i] = clients[i].client->ListTensors(
        request, [&](const v1::TensorInfo& t) { lists[i].push_back(t); });
  });
  std::vector<size_t> live;
  for (size_t i : p.partial) {
    if (status[i].ok()) {
      for (const v1::TensorInfo& t : lists[i]) {
        if (t.stored_bytes() < 0) {
          return absl::InternalError(absl::StrCat(
              "ListTensors of '", request.checkpoint(),
              "': ", p.eps->addresses[i], " lists tensor '", t.name(),
              "' with a negative stored_bytes (", t.stored_bytes(), ")"));
        }
      }
      live.push_back(i);
    } else if (IsUnreachable(status[i])) {
      Forget(request.checkpoint());  // named by CheckServed below
    } else {
      return status[i];
    }
  }
  const std::string what =
      absl::StrCat("ListTensors of '", request.checkpoint(), "'");
  if (absl::Status s = CheckServed(what, p, live, &status); !s.ok()) {
    return ForgetIfUnserved(request.checkpoint(), std::move(s));
  }
  // A listing of stored parts drops none of them: they are parts.
  if (!request.parts()) {
    if (absl::Status s = CheckBuilt(what, p, request.filter()); !s.ok()) {
      return s;
    }
  }
  // One server lists logical tensors and stored parts alike sorted by name
  // (bytewise); a name several holders list is taken from the first.
  std::map<absl::string_view, const v1::TensorInfo*> by_name;
  for (size_t i : live) {
    for (const v1::TensorInfo& t : lists[i]) by_name.emplace(t.name(), &t);
  }
  std::vector<const v1::TensorInfo*> merged;
  merged.reserve(by_name.size());
  for (const auto& [name, t] : by_name) merged.push_back(t);
  for (const v1::TensorInfo* t : merged) {
    v1::TensorInfo copy = *t;
    copy.set_list_count(static_cast<int64_t>(merged.size()));
    on_tensor(copy);
  }
  return absl::OkStatus();
}

absl::Status Router::ReadSlice(
    const v1::ReadSliceRequest& request,
    const std::function<bool(const v1::SliceChunk&)>& on_chunk) {
  return Route(request.checkpoint(), request.tensor(), request.part(), "", "",
               [&](Client& c, bool* delivered) {
                 return c.ReadSlice(request, [&](const v1::SliceChunk& chunk) {
                   *delivered = true;
                   return on_chunk(chunk);
                 });
               });
}

absl::Status Router::InspectScalars(const v1::InspectScalarsRequest& request,
                                    v1::InspectScalarsResponse* response) {
  // With a reference, an endpoint holding both (as ComputeStats routes).
  return Route(request.checkpoint(), request.tensor(), request.part(),
               request.reference(), request.reference_tensor(),
               [&](Client& c, bool*) {
                 response->Clear();
                 return c.InspectScalars(request, response);
               });
}

absl::StatusOr<v1::ComputeStatsResponse> Router::ComputeStats(
    const v1::ComputeStatsRequest& request) {
  v1::ComputeStatsResponse out;
  absl::Status s =
      Route(request.checkpoint(), request.tensor(), false, request.reference(),
            request.reference_tensor(), [&](Client& c, bool*) -> absl::Status {
              auto r = c.ComputeStats(request);
              if (r.ok()) out = *std::move(r);
              return r.status();
            });
  if (!s.ok()) return s;
  return out;
}

absl::StatusOr<v1::GetHeatmapResponse> Router::GetHeatmap(
    const v1::GetHeatmapRequest& request) {
  v1::GetHeatmapResponse out;
  absl::Status s =
      Route(request.checkpoint(), request.tensor(), false, request.reference(),
            request.reference_tensor(), [&](Client& c, bool*) -> absl::Status {
              auto r = c.GetHeatmap(request);
              if (r.ok()) out = *std::move(r);
              return r.status();
            });
  if (!s.ok()) return s;
  return out;
}

namespace {

// "127.0.0.1:7431 holds it whole; 127.0.0.1:7432 holds a.safetensors" ...
std::string DescribeHolders(
    const std::vector<std::string>& addresses, const std::vector<size_t>& whole,
    const std::vector<size_t>& partial,
    const std::function<const v1::GetCheckpointResponse&(size_t)>& info) {
  std::vector<std::string> out;
  for (size_t i : whole) out.push_back(addresses[i] + " whole");
  for (size_t i : partial) {
    std::vector<std::string> files;
    for (const v1::FileInfo& f : info(i).files()) files.push_back(f.path());
    out.push_back(
        absl::StrCat(addresses[i], " (", absl::StrJoin(files, ", "), ")"));
  }
  return out.empty() ? "no endpoint" : absl::StrJoin(out, "; ");
}

}  // namespace

absl::StatusOr<v1::GetArchitectureResponse> Router::GetArchitecture(
    const std::string& checkpoint) {
  auto placed = Place(checkpoint);
  if (!placed.ok()) return placed.status();
  Placement& p = **placed;
  if (p.whole.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "GetArchitecture of '", checkpoint,
        "' needs an endpoint holding it whole, and its files are split "
        "across endpoints: ",
        DescribeHolders(p.eps->addresses, p.whole, p.partial,
                        [&](size_t i) -> const v1::GetCheckpointResponse& {
                          return p.answers[i].info;
                        }),
        "; `tensormorph ls`, `info` and the commands naming one tensor work "
        "across them"));
  }
  v1::GetArchitectureResponse out;
  absl::Status s =
      RouteWhole(absl::StrCat("GetArchitecture of '", checkpoint, "'"),
                 checkpoint, p, [&](Client& c, bool*) -> absl::Status {
                   auto r = c.GetArchitecture(checkpoint);
                   if (r.ok()) out = *std::move(r);
                   return r.status();
                 });
  if (!s.ok()) return s;
  return out;
}

absl::Status Router::ListCheckpoints(
    const v1::ListCheckpointsRequest& request,
    const std::function<bool(const v1::CheckpointEntry&)>& on_entry) {
  const Snapshot eps = Refresh();
  const std::vector<Endpoint>& clients = eps->list;
  const std::vector<std::string>& addrs = eps->addresses;
  v1::ListCheckpointsRequest all = request;
  all.clear_page_token();
  std::vector<std::vector<v1::CheckpointEntry>> lists(clients.size());
  std::vector<absl::Status> status(clients.size());
  RunEach(clients.size(), [&](size_t i) {
    status[i] = clients[i].client->ListAllCheckpoints(
        all, [&](const v1::CheckpointEntry& e) { lists[i].push_back(e); });
  });
  std::vector<std::string> failed;
  absl::Status first_error;
  bool any = false;
  for (size_t i = 0; i < clients.size(); ++i) {
    if (status[i].ok()) {
      any = true;
    } else if (IsUnreachable(status[i])) {
      failed.push_back(absl::StrCat(addrs[i], " (", status[i].message(), ")"));
    } else if (first_error.ok()) {
      first_error = status[i];
    }
  }
  // A listing never drops what an unreachable endpoint may hold.
  if (!failed.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "ListCheckpoints of '", request.directory(),
        "': endpoints unreachable: ", absl::StrJoin(failed, ", ")));
  }
  if (!any) return first_error;
  std::map<std::string, v1::CheckpointEntry, decltype(&ScanLess)> by_path(
      &ScanLess);
  // Paths whose entries differ between endpoints: replicas list the same
  // entry, and only a checkpoint split across partial holders differs.
  std::vector<std::string> differing;
  absl::flat_hash_set<std::string> differs;
  for (const auto& list : lists) {
    for (const v1::CheckpointEntry& e : list) {
      auto [it, inserted] = by_path.emplace(e.path(), e);
      if (inserted) continue;
      v1::CheckpointEntry& kept = it->second;
      if (e.file_count() != kept.file_count() ||
          e.total_bytes() != kept.total_bytes() ||
          e.format() != kept.format()) {
        if (differs.insert(e.path()).second) differing.push_back(e.path());
      }
      if (e.file_count() > kept.file_count()) kept = e;
    }
  }
  // The token of an endpoint's page is no position in this one.
  for (auto& [path, e] : by_path) e.clear_next_page_token();
  // A path endpoints list differently may be split across partial holders,
  // each listing its own files: its entry then counts the union, as one
  // server holding every file would. Placed in parallel, a few at a time (a
  // placement asks every endpoint); then cached for the calls that follow.
  constexpr size_t kPlacedAtOnce = 8;
  std::vector<absl::StatusOr<std::shared_ptr<Placement>>> placements(
      differing.size(), absl::UnknownError("not placed"));
  for (size_t from = 0; from < differing.size(); from += kPlacedAtOnce) {
    RunEach(std::min(kPlacedAtOnce, differing.size() - from), [&](size_t k) {
      placements[from + k] = Place(differing[from + k]);
    });
  }
  for (size_t k = 0; k < differing.size(); ++k) {
    const auto& placed = placements[k];
    if (!placed.ok() || !(*placed)->whole.empty()) continue;
    const Placement& p = **placed;
    v1::CheckpointEntry& e = by_path.find(differing[k])->second;
    int64_t files = 0, bytes = 0;
    for (const std::string& f : p.all_files) {
      for (size_t i : p.partial) {
        const v1::GetCheckpointResponse& info = p.answers[i].info;
        auto it = std::find_if(
            info.files().begin(), info.files().end(),
            [&](const v1::FileInfo& fi) { return fi.path() == f; });
        if (it == info.files().end()) continue;
        ++files;
        if (absl::Status s = AddBytes(
                it->size_bytes(),
                absl::StrCat("checkpoint '", differing[k], "': file '", f,
                             "' as ", p.eps->addresses[i], " lists it"),
                &bytes);
            !s.ok()) {
          return s;
        }
        break;
      }
    }
    e.set_file_count(files);
    e.set_total_bytes(bytes);
    if (e.has_stored_tensor_count() && files == std::ssize(p.all_files)) {
      e.set_stored_tensor_count(static_cast<int64_t>(p.parts.size()));
    }
  }
  for (const auto& [path, e] : by_path) {
    if (!on_entry(e)) {
      return absl::CancelledError("checkpoint listing cancelled by the caller");
    }
  }
  return absl::OkStatus();
}

absl::Status Router::QuantDiff(
    const v1::QuantDiffRequest& request,
    const std::function<bool(const v1::QuantDiffEvent&)>& on_event) {
  auto q = Place(request.checkpoint());
  if (!q.ok()) return q.status();
  auto ref = Place(request.reference());
  if (!ref.ok()) return ref.status();
  // Where both checkpoints are whole, the diff runs there as one call.
  std::vector<size_t> both =
      InBoth(*(*q)->eps, (*q)->whole, *(*ref)->eps, (*ref)->whole);
  if (both.empty()) return SplitQuantDiff(request, **q, **ref, on_event);
  std::rotate(both.begin(), both.begin() + (*q)->next++ % both.size(),
              both.end());
  return TryInOrder(*(*q)->eps, both,
                    absl::StrCat("QuantDiff of '", request.checkpoint(),
                                 "' against '", request.reference(), "'"),
                    {request.checkpoint(), request.reference()},
                    [&](Client& c, bool* delivered) {
                      return c.QuantDiff(request,
                                         [&](const v1::QuantDiffEvent& e) {
                                           *delivered = true;
                                           return on_event(e);
                                         });
                    });
}

std::vector<size_t> Router::Holding(const Placement& p,
                                    const std::string& tensor) {
  if (!p.whole.empty()) return p.whole;
  auto it = p.logical.find(tensor);
  return it == p.logical.end() ? std::vector<size_t>{} : it->second;
}

absl::Status Router::SplitQuantDiff(
    const v1::QuantDiffRequest& request, const Placement& quant,
    const Placement& ref,
    const std::function<bool(const v1::QuantDiffEvent&)>& on_event) {
  const absl::Time start = absl::Now();
  const std::string what =
      absl::StrCat("QuantDiff of '", request.checkpoint(), "' against '",
                   request.reference(), "'");
  // Refused first, as a server refuses it before opening anything.
  if (absl::Status s = CheckDiffPart(request); !s.ok()) return s;
  auto describe = [&](const Placement& p) {
    return DescribeHolders(p.eps->addresses, p.whole, p.partial,
                           [&](size_t i) -> const v1::GetCheckpointResponse& {
                             return p.answers[i].info;
                           });
  };
  auto format = [&](const Placement& p) {
    const size_t i = p.whole.empty() ? p.partial[0] : p.whole[0];
    return p.answers[i].info.format();
  };
  if (format(quant) == v1::CHECKPOINT_FORMAT_GGUF &&
      format(ref) != v1::CHECKPOINT_FORMAT_GGUF) {
    return absl::FailedPreconditionError(absl::StrCat(
        what,
        " pairs GGUF names with Hugging Face ones from the GGUF's metadata, "
        "so it runs on one endpoint holding both whole, and none does: '",
        request.checkpoint(), "' is on ", describe(quant), "; '",
        request.reference(), "' is on ", describe(ref)));
  }

  // The plan, from the listings merged over the endpoints.
  std::vector<v1::TensorInfo> quant_list, ref_list;
  for (const auto& entry : {std::pair{&request.checkpoint(), &quant_list},
                            std::pair{&request.reference(), &ref_list}}) {
    // Named, not a structured binding: clang 14 lets no lambda capture one.
    std::vector<v1::TensorInfo>* list = entry.second;
    v1::ListTensorsRequest req;
    req.set_checkpoint(*entry.first);
    if (absl::Status s = ListTensors(
            req, [&](const v1::TensorInfo& t) { list->push_back(t); });
        !s.ok()) {
      return s;
    }
  }
  auto plan_or =
      PlanDiffByName(request, std::move(quant_list), std::move(ref_list));
  if (!plan_or.ok()) return plan_or.status();
  const ListedDiffPlan& plan = *plan_or;
  auto selected = SelectDiffPart(request, plan);
  if (!selected.ok()) return selected.status();
  const DiffSelection& sel = *selected;

  // Each pair to an endpoint listing both halves: the one given the fewest
  // bytes so far, ties to the first, so that the split is the same every
  // time for the same placement.
  auto q_placed = Place(request.checkpoint());
  if (!q_placed.ok()) return q_placed.status();
  auto r_placed = Place(request.reference());
  if (!r_placed.ok()) return r_placed.status();
  // Indices are of the quantized checkpoint's endpoint set; the source's
  // holders are matched to it by address.
  const EndpointSet& eps = *(*q_placed)->eps;
  const std::vector<Endpoint>& clients = eps.list;
  const std::vector<std::string>& addrs = eps.addresses;
  std::vector<int64_t> given(clients.size(), 0);
  std::vector<std::vector<std::string>> names(clients.size());
  std::vector<std::string> stranded;
  size_t stranded_count = 0;
  for (size_t k : sel.todo) {
    const DiffPlanItem& item = plan.items[k];
    const std::vector<size_t> qh = Holding(**q_placed, item.name);
    const std::vector<size_t> rh =
        InBoth(eps, All(eps.list.size()), *(*r_placed)->eps,
               Holding(**r_placed, item.reference_name));
    size_t best = clients.size();
    for (size_t i : qh) {
      if (std::find(rh.begin(), rh.end(), i) == rh.end()) continue;
      if (best == clients.size() || given[i] < given[best] ||
          (given[i] == given[best] && i < best)) {
        best = i;
      }
    }
    if (best == clients.size()) {
      if (++stranded_count <= 5) {
        auto at = [&](const std::vector<size_t>& v) {
          std::vector<std::string> out;
          for (size_t i : v) out.push_back(addrs[i]);
          return out.empty() ? std::string("no endpoint")
                             : absl::StrJoin(out, ", ");
        };
        stranded.push_back(absl::StrCat("'", item.name, "' (quantized on ",
                                        at(qh), "; source on ", at(rh), ")"));
      }
      continue;
    }
    given[best] += item.bytes;
    names[best].push_back(item.name);
  }
  if (stranded_count > 0) {
    if (stranded_count > stranded.size()) {
      stranded.push_back(
          absl::StrCat("and ", stranded_count - stranded.size(), " more"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": ", stranded_count,
        " pair(s) have their quantized tensor and its source on no common "
        "endpoint, and each pair is compared on one: ",
        absl::StrJoin(stranded, ", "),
        ". Keep a model's quantized and source shards on the same server "
        "(the shards of the same tensors), or both checkpoints whole on "
        "one"));
  }

  // The sub-diffs, one thread each; the caller's callback under mu.
  struct Run {
    size_t endpoint;
    v1::QuantDiffRequest request;
    absl::Status status;
    std::optional<v1::DiffSummary> summary;
    int64_t reports = 0;
    v1::DiffProgress progress;
  };
  std::vector<Run> runs;
  for (size_t i = 0; i < clients.size(); ++i) {
    if (names[i].empty()) continue;
    Run& r = runs.emplace_back();
    r.endpoint = i;
    r.request = request;
    r.request.clear_part();
    r.request.clear_tensors();
    for (std::string& n : names[i]) r.request.add_tensors(std::move(n));
  }
  // Each sub-diff ends at once when another fails or the caller stops: one
  // whose endpoint sends nothing would never see `stop` at its next event.
  std::vector<std::unique_ptr<CallCanceller>> cancels;
  for (size_t k = 0; k < runs.size(); ++k) {
    cancels.push_back(std::make_unique<CallCanceller>());
  }
  absl::Mutex mu;
  bool stop = false, caller_stopped = false;
  // REQUIRES: mu held.
  auto stop_all = [&] {
    stop = true;
    for (auto& c : cancels) c->Cancel();
  };
  // The caller's callback, which runs on the sub-diffs' threads too: one
  // that throws (client.h says it must not) fails the call INTERNAL rather
  // than end the process.
  absl::Status callback_error;
  // REQUIRES: mu held.
  auto deliver = [&](const v1::QuantDiffEvent& e) {
    try {
      if (on_event(e)) return true;
    } catch (const std::exception& x) {
      callback_error = absl::InternalError(absl::StrCat(
          what, ": the caller's event callback threw: ", x.what()));
    } catch (...) {
      callback_error = absl::InternalError(
          absl::StrCat(what, ": the caller's event callback threw"));
    }
    caller_stopped = true;
    stop_all();
    return false;
  };
  std::optional<size_t> failed;  // index into runs
  int64_t done = 0;
  int64_t last_progress_ms = 0;
  std::vector<DiffSummaryEntry> entries;
  // REQUIRES: mu held.
  auto progress = [&](bool final) {
    v1::QuantDiffEvent e;
    v1::DiffProgress* p = e.mutable_progress();
    p->set_tensors_done(done);
    p->set_tensors_total(static_cast<int64_t>(sel.todo.size()));
    int64_t bytes = 0;
    for (const Run& r : runs) {
      // Progress only: a count off the wire that is negative or overflows
      // is left out here (the summary's are checked).
      const int64_t b = final && r.summary ? r.summary->bytes_read()
                                           : r.progress.bytes_done();
      int64_t next = 0;
      if (b >= 0 && !__builtin_add_overflow(bytes, b, &next)) bytes = next;
    }
    p->set_bytes_done(bytes);
    p->set_bytes_total(sel.bytes_total);
    p->set_elapsed_seconds(absl::ToDoubleSeconds(absl::Now() - start));
    last_progress_ms = absl::ToUnixMillis(absl::Now());
    deliver(e);
  };
  {
    absl::MutexLock lock(&mu);
    progress(false);
    if (!callback_error.ok()) return callback_error;
    if (caller_stopped) {
      return absl::CancelledError("diff cancelled by the caller");
    }
  }
  RunEach(runs.size(), [&](size_t k) {
    Run& run = runs[k];
    absl::Status s = clients[run.endpoint].client->QuantDiff(
        run.request,
        [&](const v1::QuantDiffEvent& e) {
          absl::MutexLock lock(&mu);
          if (stop) return false;
          if (e.has_tensor()) {
            ++done;
            ++run.reports;
            entries.push_back(EntryOf(e.tensor()));
            deliver(e);
          } else if (e.has_progress()) {
            run.progress = e.progress();
            // At most two a second, as a server sends them.
            if (absl::ToUnixMillis(absl::Now()) - last_progress_ms >= 500) {
              progress(false);
            }
          } else if (e.has_summary()) {
            run.summary = e.summary();
          }
          return !stop;
        },
        cancels[k].get());
    absl::MutexLock lock(&mu);
    if (s.ok() && !run.summary.has_value()) {
      s = absl::InternalError(
          "the stream ended without a summary (a server older than "
          "QuantDiffRequest.tensors, or a broken stream)");
    } else if (s.ok() && run.summary->tensors_compared() != run.reports) {
      s = absl::InternalError(absl::StrCat(
          "its summary counts ", run.summary->tensors_compared(),
          " tensors compared but it sent ", run.reports, " reports"));
    } else if (s.ok() && run.summary->bytes_read() < 0) {
      s = absl::InternalError(
          absl::StrCat("its summary's bytes_read is negative (",
                       run.summary->bytes_read(), ")"));
    } else if (s.ok() && run.reports != run.request.tensors_size()) {
      s = absl::InternalError(
          absl::StrCat("it compared ", run.reports, " of the ",
                       run.request.tensors_size(), " pairs it was sent"));
    }
    run.status = s;
    // The first failure stops the others; theirs are then only that.
    if (!s.ok() && !stop) {
      failed = k;
      stop_all();
    }
  });
  // The threads are joined: mu is no longer needed to read these.
  if (!callback_error.ok()) return callback_error;
  if (caller_stopped) {
    return absl::CancelledError("diff cancelled by the caller");
  }
  if (failed.has_value()) {
    const Run& run = runs[*failed];
    const std::string& address = addrs[run.endpoint];
    if (IsUnreachable(run.status)) {
      Forget(request.checkpoint());
      Forget(request.reference());
      return absl::UnavailableError(
          absl::StrCat(what,
                       ": not served by any reachable endpoint; "
                       "unreachable: ",
                       address, " (", run.status.message(), ")"));
    }
    return absl::Status(
        run.status.code(),
        absl::StrCat(what, ": the sub-diff of ", run.request.tensors_size(),
                     " pair(s) on ", address,
                     " failed: ", run.status.message()));
  }

  absl::MutexLock lock(&mu);
  progress(true);
  if (!callback_error.ok()) return callback_error;
  if (caller_stopped) {
    return absl::CancelledError("diff cancelled by the caller");
  }
  v1::QuantDiffEvent e;
  v1::DiffSummary* s = e.mutable_summary();
  s->set_pairing(v1::DIFF_PAIRING_BY_NAME);
  int64_t compared = 0, bytes_read = 0;
  for (const Run& r : runs) {
    // Each equals the reports received (checked above).
    compared += r.summary->tensors_compared();
    if (absl::Status st =
            AddBytes(r.summary->bytes_read(),
                     absl::StrCat(what, ": the summary of ", addrs[r.endpoint]),
                     &bytes_read);
        !st.ok()) {
      return st;
    }
  }
  s->set_tensors_compared(compared);
  for (const auto& n : plan.only_in_checkpoint) s->add_only_in_checkpoint(n);
  for (const auto& n : plan.only_in_reference) s->add_only_in_reference(n);
  for (const auto& n : plan.shape_mismatches) s->add_shape_mismatches(n);
  for (const auto& n : plan.skipped_empty) s->add_skipped_empty(n);
  SetRankedLists(std::move(entries), s);
  if (sel.part.has_value()) *s->mutable_part() = *sel.part;
  s->set_wall_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  s->set_bytes_read(bytes_read);
  if (!deliver(e)) {
    if (!callback_error.ok()) return callback_error;
    return absl::CancelledError("diff cancelled by the caller");
  }
  return absl::OkStatus();
}

absl::Status Router::CheckCheckpoint(
    const v1::CheckCheckpointRequest& request,
    const std::function<bool(const v1::CheckEvent&)>& on_event) {
  auto placed = Place(request.checkpoint());
  if (!placed.ok()) return placed.status();
  Placement& p = **placed;
  if (p.whole.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CheckCheckpoint of '", request.checkpoint(),
        "' needs an endpoint holding it whole, and its files are split "
        "across endpoints: ",
        DescribeHolders(p.eps->addresses, p.whole, p.partial,
                        [&](size_t i) -> const v1::GetCheckpointResponse& {
                          return p.answers[i].info;
                        }),
        "; a check covers every shard of a checkpoint in one pass on one "
        "server: serve every shard of it on one server to check it"));
  }
  return RouteWhole(
      absl::StrCat("CheckCheckpoint of '", request.checkpoint(), "'"),
      request.checkpoint(), p, [&](Client& c, bool* delivered) {
        return c.CheckCheckpoint(request, [&](const v1::CheckEvent& e) {
          *delivered = true;
          return on_event(e);
        });
      });
}

}  // namespace tensormorph
