// Fixed limits of request fields, shared by the server that enforces them and
// the clients that check a request before sending it (so that a user hears
// the same limit, named, from both). Limits an operator can configure live in
// server/service.h (ServiceLimits) instead.
#ifndef TENSORMORPH_PROTO_REQUEST_LIMITS_H_
#define TENSORMORPH_PROTO_REQUEST_LIMITS_H_

#include <cstdint>

namespace tensormorph {

// ComputeStatsRequest.bins: 1 .. this (0 = the server's default).
inline constexpr int32_t kMaxHistogramBins = 100'000;

// GetHeatmapRequest.width and .height: 1 .. this cells (0 = default).
inline constexpr int32_t kMaxHeatmapSide = 4096;

// QuantDiffRequest.top_k: worst elements per tensor, at most this many
// (0 = the server's default of 10 until the API can say "none").
inline constexpr int32_t kMaxDiffTopK = 100'000;

}  // namespace tensormorph

#endif  // TENSORMORPH_PROTO_REQUEST_LIMITS_H_
