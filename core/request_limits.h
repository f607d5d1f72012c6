// Fixed limits of request fields, shared by the server that enforces them
// (RESOURCE_EXHAUSTED naming the limit; every reply within them fits in
// max_reply_bytes) and the clients that check a request before sending it
// (so that a user hears the same limit, named, from both). Limits an operator
// can configure live in server/service.h (ServiceLimits) instead.
#ifndef TENSORMORPH_CORE_REQUEST_LIMITS_H_
#define TENSORMORPH_CORE_REQUEST_LIMITS_H_

#include <cstdint>

namespace tensormorph {

// A request message, serialized: the server's receive limit (gRPC's
// default, said once here so that the HTTP gateway can name it).
inline constexpr int32_t kMaxRequestBytes = 4 << 20;

// ComputeStatsRequest.bins: 1 .. this (0 = the server's default).
inline constexpr int32_t kMaxHistogramBins = 100'000;

// GetHeatmapRequest.width and .height: 1 .. this cells (0 = default).
inline constexpr int32_t kMaxHeatmapSide = 4096;
// width * height: a reply of at most about 40 MB (a value and a group id
// per cell), inside the server's max_reply_bytes.
inline constexpr int64_t kMaxHeatmapCells = int64_t{1} << 21;

// QuantDiffRequest.top_k: worst elements per tensor, at most this many
// (0 = the server's default of 10 until the API can say "none").
inline constexpr int32_t kMaxDiffTopK = 100'000;

// QuantDiffRequest.worst_groups: at most this many per tensor.
inline constexpr int32_t kMaxDiffWorstGroups = 10'000;

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_REQUEST_LIMITS_H_
