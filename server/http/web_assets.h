// The web inspector's files (client/web), compiled into the binary at build
// time so that tensormorphd is the whole server: one file to copy.
#ifndef TENSORMORPH_SERVER_HTTP_WEB_ASSETS_H_
#define TENSORMORPH_SERVER_HTTP_WEB_ASSETS_H_

#include <cstddef>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace tensormorph {

struct WebAsset {
  const char* path;  // "/index.html", "/views/heatmap.js"
  const unsigned char* data;
  size_t size;
};

// Every file, sorted by path.
absl::Span<const WebAsset> WebAssets();

// The file at `path` ("/" is "/index.html"); nullptr when there is none.
const WebAsset* FindWebAsset(absl::string_view path);

// The content type of a file name by its extension (application/octet-stream
// when unknown).
const char* ContentTypeOf(absl::string_view path);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_HTTP_WEB_ASSETS_H_
