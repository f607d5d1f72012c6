// A GetHeatmap reply in a binary form, for POST /v1/GetHeatmap with
// `Accept: application/octet-stream`: the page draws a million cells, which
// as JSON numbers are 26 MB printed by the server and parsed by the browser
// (193 ms against 35 ms for the same call over gRPC, docs/performance.md);
// as little-endian arrays they are 4-8 bytes a cell, copied once.
//
// The body (docs/http.md):
//   bytes 0..3   N, a little-endian uint32
//   bytes 4..    N bytes of UTF-8 JSON: {"message": <the reply in protobuf's
//                JSON mapping, its per-cell arrays left empty>, "arrays":
//                [{"field", "dtype", "offset", "count"}, ...]}, padded with
//                spaces so that 4 + N is a multiple of 8
//   then         the arrays: `field` is the reply's JSON name ("values",
//                "groups", "pruned", "cellElement"), `dtype` numpy's
//                ("<f4", "<f8", "<i4"), `offset` in bytes from the end of
//                the JSON (a multiple of 8, so a typed array can view it in
//                place), `count` its elements. An empty field is not listed.
// The dtypes, chosen per reply:
//  - values: "<f8" in GROUP mode (group ids), in SQ_ERROR mode (shares of a
//    sum that a reader adds up again) and when some cell is a single
//    element (the page shows those exactly), else "<f4": a reduction over
//    several elements rounded to float32 (7 significant digits); NaN and
//    infinities are kept;
//  - groups: "<i4" when every id fits, else "<f8" (exact to 2^53);
//  - pruned: "<f4"; cellElement: "<f8".
#ifndef TENSORMORPH_SERVER_HTTP_HEATMAP_CELLS_H_
#define TENSORMORPH_SERVER_HTTP_HEATMAP_CELLS_H_

#include <string>

#include "absl/strings/string_view.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// The media type of the binary form.
inline constexpr char kHeatmapCellsType[] = "application/octet-stream";

// Whether an Accept header asks for the binary form: it names
// kHeatmapCellsType (parameters and case aside). "*/*" and a missing header
// get JSON, as every other client does.
bool AcceptsHeatmapCells(absl::string_view accept);

// The body above for a reply to a request in `mode` (which the reply does
// not hold; it decides the values' dtype).
std::string HeatmapCellsBody(v1::GetHeatmapResponse reply,
                             v1::HeatmapMode mode);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_HTTP_HEATMAP_CELLS_H_
