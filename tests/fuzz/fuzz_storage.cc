// libFuzzer target: core/io's parsers of what a storage server or a user's
// files say: the XML of an S3 answer (and ListObjectsV2 over it), the INI of
// ~/.aws/*, storage URLs and Content-Range. The first byte picks the parser;
// the rest is its input.
//
// Properties checked on every input: nothing reads out of bounds (ASan), and
// a refusal is INVALID_ARGUMENT or DATA_LOSS, the codes the parsers promise.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/io/http_object.h"
#include "core/io/ini_file.h"
#include "core/io/object_url.h"
#include "core/io/s3_store.h"
#include "core/io/xml_document.h"

namespace {

void Check(const absl::Status& s) {
  if (!s.ok() && s.code() != absl::StatusCode::kInvalidArgument &&
      s.code() != absl::StatusCode::kDataLoss) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0:
      Check(tensormorph::ParseXml(in).status());
      break;
    case 1:
      Check(tensormorph::ParseListObjectsV2("s3://b/", in).status());
      break;
    case 2:
      Check(tensormorph::ParseIni("f", in).status());
      break;
    case 3: {
      auto u = tensormorph::ParseObjectUrl(in);
      Check(u.status());
      if (u.ok()) (void)tensormorph::OriginOf(u->http_url);
      (void)tensormorph::RedactUrl(in);
      break;
    }
    default: {
      uint64_t f, l, t;
      (void)tensormorph::ParseContentRange(in, &f, &l, &t);
      break;
    }
  }
  return 0;
}
