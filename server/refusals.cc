#include "server/refusals.h"

#include <array>
#include <atomic>

namespace tensormorph {
namespace {

constexpr std::array<absl::string_view, 9> kReasons = {
    "auth",     "forbidden", "limit",   "bad_request", "unimplemented",
    "draining", "host",      "framing", "other"};

std::array<std::atomic<int64_t>, kReasons.size()> g_counts{};

}  // namespace

absl::string_view RefusalReason(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::UNAUTHENTICATED:
      return "auth";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "forbidden";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "limit";
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
      return "bad_request";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "unimplemented";
    default:
      return "";
  }
}

void CountRefusal(absl::string_view reason) {
  size_t i = 0;
  while (i + 1 < kReasons.size() && kReasons[i] != reason) ++i;
  g_counts[i].fetch_add(1, std::memory_order_relaxed);
}

std::vector<std::pair<std::string, int64_t>> RefusalCounts() {
  std::vector<std::pair<std::string, int64_t>> out;
  for (size_t i = 0; i < kReasons.size(); ++i) {
    const int64_t n = g_counts[i].load(std::memory_order_relaxed);
    if (n > 0) out.emplace_back(std::string(kReasons[i]), n);
  }
  return out;
}

}  // namespace tensormorph
