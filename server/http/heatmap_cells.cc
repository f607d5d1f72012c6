#include "server/http/heatmap_cells.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/json_print.h"

namespace tensormorph {
namespace {

// The arrays are the host's floats and ints as they lie in memory.
static_assert(std::endian::native == std::endian::little,
              "the binary heatmap form is little-endian");

// One array of the body: its bytes, and how the JSON describes them.
struct CellArray {
  const char* field;
  const char* dtype;
  int64_t count = 0;
  std::string bytes;
};

template <class To, class From>
CellArray Pack(const char* field, const char* dtype,
               const google::protobuf::RepeatedField<From>& from) {
  CellArray a{field, dtype, from.size(), std::string()};
  a.bytes.resize(from.size() * sizeof(To));
  char* out = a.bytes.data();
  for (int i = 0; i < from.size(); ++i, out += sizeof(To)) {
    const To v = static_cast<To>(from[i]);
    std::memcpy(out, &v, sizeof(To));  // a store; the bytes need no alignment
  }
  return a;
}

// Whether some cell holds a single element: some row step and some column
// step are 1 (edges ascend).
bool HasSingleElementCell(const v1::GetHeatmapResponse& reply) {
  const auto has_unit_step = [](const auto& edges) {
    for (int i = 0; i + 1 < edges.size(); ++i) {
      if (edges[i + 1] - edges[i] == 1) return true;
    }
    return false;
  };
  return has_unit_step(reply.row_edges()) && has_unit_step(reply.col_edges());
}

bool FitsInt32(const google::protobuf::RepeatedField<int64_t>& ids) {
  for (const int64_t id : ids) {
    if (id < std::numeric_limits<int32_t>::min() ||
        id > std::numeric_limits<int32_t>::max()) {
      return false;
    }
  }
  return true;
}

// The reply's per-cell arrays in their dtypes (heatmap_cells.h), moved out
// of it.
std::vector<CellArray> TakeCellArrays(v1::GetHeatmapResponse& reply,
                                      v1::HeatmapMode mode) {
  std::vector<CellArray> arrays;
  if (reply.values_size() > 0) {
    arrays.push_back(mode == v1::HEATMAP_MODE_GROUP ||
                             mode == v1::HEATMAP_MODE_SQ_ERROR ||
                             HasSingleElementCell(reply)
                         ? Pack<double>("values", "<f8", reply.values())
                         : Pack<float>("values", "<f4", reply.values()));
  }
  if (reply.groups_size() > 0) {
    arrays.push_back(FitsInt32(reply.groups())
                         ? Pack<int32_t>("groups", "<i4", reply.groups())
                         : Pack<double>("groups", "<f8", reply.groups()));
  }
  if (reply.pruned_size() > 0) {
    arrays.push_back(Pack<float>("pruned", "<f4", reply.pruned()));
  }
  if (reply.cell_element_size() > 0) {
    arrays.push_back(Pack<double>("cellElement", "<f8", reply.cell_element()));
  }
  reply.clear_values();
  reply.clear_groups();
  reply.clear_pruned();
  reply.clear_cell_element();
  return arrays;
}

void AppendLittleEndian32(uint32_t n, std::string* out) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(n >> (8 * i)));
}

size_t RoundUp8(size_t n) { return (n + 7) & ~size_t{7}; }

}  // namespace

bool AcceptsHeatmapCells(absl::string_view accept) {
  for (absl::string_view range : absl::StrSplit(accept, ',')) {
    range = range.substr(0, std::min(range.find(';'), range.size()));
    if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(range),
                               kHeatmapCellsType)) {
      return true;
    }
  }
  return false;
}

std::string HeatmapCellsBody(v1::GetHeatmapResponse reply,
                             v1::HeatmapMode mode) {
  const std::vector<CellArray> arrays = TakeCellArrays(reply, mode);
  std::string json = "{\"message\":";
  AppendMessageJson(reply, &json);
  absl::StrAppend(&json, ",\"arrays\":[");
  size_t offset = 0;
  for (size_t i = 0; i < arrays.size(); ++i) {
    absl::StrAppend(&json, i ? "," : "", "{\"field\":\"", arrays[i].field,
                    "\",\"dtype\":\"", arrays[i].dtype,
                    "\",\"offset\":", offset, ",\"count\":", arrays[i].count,
                    "}");
    offset = RoundUp8(offset + arrays[i].bytes.size());
  }
  json += "]}";
  json.resize(RoundUp8(4 + json.size()) - 4, ' ');
  std::string body;
  body.reserve(4 + json.size() + offset);
  AppendLittleEndian32(static_cast<uint32_t>(json.size()), &body);
  body += json;
  for (const CellArray& a : arrays) {
    body.resize(RoundUp8(body.size()), '\0');
    body += a.bytes;
  }
  return body;
}

}  // namespace tensormorph
