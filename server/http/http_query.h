// The GET endpoints' query strings, checked and turned into requests:
// /v1/tensor.npy into a ReadSliceRequest, /v1/heatmap.png into a
// GetHeatmapRequest. Ranges (heatmap sides, slice bounds) are the server's
// to check, so HTTP and gRPC callers hear the same limits.
#ifndef TENSORMORPH_SERVER_HTTP_HTTP_QUERY_H_
#define TENSORMORPH_SERVER_HTTP_HTTP_QUERY_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// Decoded query parameters, a name per value (as cpp-httplib gives them).
using QueryParams = std::multimap<std::string, std::string>;

// checkpoint, tensor (both required), slice (numpy syntax), raw and part
// (0, 1, true or false).
// Errors: INVALID_ARGUMENT naming the parameter: unknown, given twice,
// missing, not UTF-8, longer than 16 KiB, or not of its type.
absl::StatusOr<v1::ReadSliceRequest> ReadSliceFromQuery(
    const QueryParams& query);

// checkpoint, tensor (required); mode (value, absmax, error, group or zeros;
// default value); ref and ref_tensor (the source); width and height (cells);
// rows=A:B and cols=C:D (a region; either bound may be left out); leading
// (comma-separated indices of dimensions before the last two).
// Errors: as ReadSliceFromQuery's.
absl::StatusOr<v1::GetHeatmapRequest> HeatmapFromQuery(
    const QueryParams& query);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_HTTP_HTTP_QUERY_H_
