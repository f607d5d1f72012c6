#include "server/call_log.h"

#include <spdlog/spdlog.h>

#include "absl/status/status.h"

namespace tensormorph {

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
