#include "server/call_log.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/util/peer_ledger.h"
#include "server/auth_interceptor.h"
#include "server/gateway_metadata.h"
#include "server/log_line.h"
#include "server/refusals.h"

namespace tensormorph {
namespace {

// Set once at start, read by every call: never freed, so a call logging
// while the process ends still reads valid memory.
std::atomic<const TrustedProxies*> g_trusted{nullptr};

bool Trusted(absl::string_view address) {
  const TrustedProxies* t = g_trusted.load(std::memory_order_acquire);
  return t != nullptr && t->Contains(address);
}

absl::string_view Value(
    const std::multimap<grpc::string_ref, grpc::string_ref>& md,
    absl::string_view key, bool* found) {
  auto it = md.find(grpc::string_ref(key.data(), key.size()));
  *found = it != md.end();
  return *found ? absl::string_view(it->second.data(), it->second.size())
                : absl::string_view();
}

std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

void AddPeer(std::vector<LogField>& fields, const CallPeer& peer) {
  fields.push_back({"peer", peer.address, LogField::kToken});
  if (!peer.forwarded_for.empty()) {
    fields.push_back({"forwarded_for", peer.forwarded_for});
  }
  if (!peer.http_route.empty()) {
    fields.push_back({"http", peer.http_route});
  }
}

}  // namespace

bool IsTrustedProxy(absl::string_view address) { return Trusted(address); }

void SetTrustedProxies(TrustedProxies proxies) {
  g_trusted.store(new TrustedProxies(std::move(proxies)),
                  std::memory_order_release);
}

bool IsInProcessPeer(absl::string_view grpc_peer) {
  return grpc_peer == "unknown" || absl::StartsWith(grpc_peer, "inproc");
}

CallPeer GatewayPeer(absl::string_view http_peer,
                     absl::string_view forwarded_for) {
  CallPeer peer{absl::StrCat("http:", http_peer), "", ""};
  const size_t colon = http_peer.rfind(':');
  if (!forwarded_for.empty() && Trusted(http_peer.substr(0, colon))) {
    peer.forwarded_for = std::string(forwarded_for);
  }
  return peer;
}

CallPeer PeerOf(const grpc::ServerContextBase& ctx) {
  CallPeer peer{ctx.peer(), "", ""};
  const auto& md = ctx.client_metadata();
  bool found = false;
  if (IsInProcessPeer(peer.address)) {
    // Only the gateway in this process sets these (gateway_metadata.h).
    const absl::string_view http = Value(md, kGatewayPeerKey, &found);
    if (!found) return peer;
    peer = GatewayPeer(http, Value(md, kGatewayForwardedForKey, &found));
    peer.http_route = std::string(Value(md, kGatewayRouteKey, &found));
    return peer;
  }
  const absl::string_view forwarded = Value(md, "x-forwarded-for", &found);
  if (found && Trusted(PeerAddress(peer.address))) {
    peer.forwarded_for = std::string(forwarded);
  }
  return peer;
}

std::string SharePeer(const grpc::ServerContextBase& ctx) {
  const CallPeer peer = PeerOf(ctx);
  if (!peer.forwarded_for.empty()) {
    absl::string_view first = peer.forwarded_for;
    first = absl::StripAsciiWhitespace(first.substr(0, first.find(',')));
    return absl::StrCat("forwarded:", first);
  }
  return PeerHost(peer.address);
}

void LogRefusal(absl::string_view method, const CallPeer& peer,
                grpc::StatusCode code, absl::string_view reason,
                absl::string_view message) {
  const std::string code_name = CodeName(code);
  std::vector<LogField> fields;
  AddPeer(fields, peer);
  fields.push_back({"status", code_name, LogField::kToken});
  fields.push_back({"refused", reason, LogField::kToken});
  fields.push_back({"error", message});
  LogFields(spdlog::level::warn, method, fields);
}

void RecordHttpRefusal(absl::string_view verb, absl::string_view path,
                       absl::string_view http_peer,
                       absl::string_view forwarded_for, grpc::StatusCode code,
                       int http_status, absl::string_view reason,
                       absl::string_view message) {
  if (reason.empty()) reason = RefusalReason(code);
  if (reason.empty()) reason = "bad_request";
  CountRefusal(reason);
  const CallPeer peer = GatewayPeer(http_peer, forwarded_for);
  const std::string code_name = CodeName(code);
  const std::string http_text = absl::StrCat(http_status);
  std::vector<LogField> fields;
  AddPeer(fields, peer);
  fields.push_back({"verb", verb, LogField::kToken});
  fields.push_back({"path", path});
  fields.push_back({"status", code_name, LogField::kToken});
  fields.push_back({"http_status", http_text, LogField::kToken});
  fields.push_back({"refused", reason, LogField::kToken});
  fields.push_back({"error", message});
  LogFields(spdlog::level::warn, "HTTP", fields);
}

CallLog::CallLog(const char* method, grpc::CallbackServerContext* ctx,
                 std::string checkpoint, std::string tensor)
    : method_(method),
      peer_(PeerOf(*ctx)),
      checkpoint_(std::move(checkpoint)),
      tensor_(std::move(tensor)),
      start_(absl::Now()),
      // The interceptor ran before the handler that makes this log.
      logged_as_refused_(RefusedCalls::RefusedAnywhere(ctx)) {}

void CallLog::Finish(const grpc::Status& status, int64_t bytes) const {
  if (logged_as_refused_) return;
  const double ms = absl::ToDoubleMilliseconds(absl::Now() - start_);
  const auto level = status.ok() || status.error_code() == grpc::CANCELLED
                         ? spdlog::level::info
                         : spdlog::level::warn;
  const std::string code = CodeName(status.error_code());
  const std::string bytes_text = absl::StrCat(bytes);
  const std::string ms_text = absl::StrFormat("%.3f", ms);
  // grpc::Status hands its message out by value: held here for the view.
  const std::string error = status.error_message();
  std::vector<LogField> fields;
  fields.reserve(10);
  AddPeer(fields, peer_);
  fields.push_back({"checkpoint", checkpoint_});
  fields.push_back({"tensor", tensor_});
  fields.push_back({"status", code, LogField::kToken});
  fields.push_back({"bytes", bytes_text, LogField::kToken});
  fields.push_back({"ms", ms_text, LogField::kToken});
  if (!status.ok()) {
    const absl::string_view reason = RefusalReason(status.error_code());
    if (!reason.empty()) {
      fields.push_back({"refused", reason, LogField::kToken});
    }
    fields.push_back({"error", error});
  }
  LogFields(level, method_, fields);
}

}  // namespace tensormorph
