// Human-readable renderings for the CLI: tables, numpy-like previews, sizes.
#ifndef TENSORMORPH_CLIENT_CLI_FORMAT_H_
#define TENSORMORPH_CLIENT_CLI_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "google/protobuf/message.h"

namespace tensormorph {

// "[4, 256]"
std::string ShapeText(absl::Span<const int64_t> shape);
// "1.5 KiB"
std::string BytesText(int64_t bytes);
// A number in numpy's short form ("0.0123", "-1.5e-07", "nan").
std::string NumberText(double v);

// Left-aligned columns separated by two spaces; the first row is the header.
std::string Table(const std::vector<std::vector<std::string>>& rows);

// numpy-like nested brackets; dimensions longer than 2*edge+1 show `edge`
// items at each end around "...".
std::string ArrayPreview(absl::Span<const float> data,
                         absl::Span<const int64_t> shape, int edge = 3);

// protobuf's JSON mapping on one line, with default-valued fields printed.
std::string ToJson(const google::protobuf::Message& message);

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_CLI_FORMAT_H_
