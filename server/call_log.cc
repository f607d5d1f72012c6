#include "server/call_log.h"

#include <spdlog/spdlog.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tensormorph {

std::string PeerOf(grpc::CallbackServerContext* ctx) {
  std::string peer = ctx->peer();
  // gRPC names in-process callers "unknown" (1.51) or "inproc..."; network
  // peers always have an address family ("ipv4:", "ipv6:", "unix:").
  if (peer != "unknown" && !absl::StartsWith(peer, "inproc")) return peer;
  const auto& md = ctx->client_metadata();
  auto it = md.find("x-forwarded-for");
  if (it == md.end()) return peer;
  return absl::StrCat("http:",
                      absl::string_view(it->second.data(), it->second.size()));
}

void CallLog::Finish(const grpc::Status& status, int64_t bytes) const {
  const double ms = absl::ToDoubleMilliseconds(absl::Now() - start_);
  const auto level = status.ok() || status.error_code() == grpc::CANCELLED
                         ? spdlog::level::info
                         : spdlog::level::warn;
  const std::string code = absl::StatusCodeToString(
      static_cast<absl::StatusCode>(status.error_code()));
  spdlog::log(level,
              "{} peer={} checkpoint=\"{}\" tensor=\"{}\" status={} bytes={} "
              "ms={:.3f}{}{}",
              method_, peer_, checkpoint_, tensor_, code, bytes, ms,
              status.ok() ? "" : " error=", status.error_message());
}

}  // namespace tensormorph
