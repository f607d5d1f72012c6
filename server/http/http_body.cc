#include "server/http/http_body.h"

#include <zlib.h>

#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace tensormorph {
namespace {

bool IsText(const std::string& type) {
  return absl::StartsWith(type, "text/") ||
         absl::StartsWith(type, "application/json") ||
         absl::StartsWith(type, "application/javascript");
}

// "gzip", "gzip;q=0.8", "deflate, gzip, br" (an explicit "gzip;q=0" is not
// told apart: no client sends one).
bool AcceptsGzip(const httplib::Request& req) {
  return absl::StrContains(
      absl::AsciiStrToLower(req.get_header_value("Accept-Encoding")), "gzip");
}

}  // namespace

std::string Gzip(const std::string& data, int level) {
  z_stream z{};
  // windowBits 15 + 16: a gzip header and trailer, as Content-Encoding
  // gzip means.
  if (deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    return "";
  }
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int done = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return done == Z_STREAM_END ? out : "";
}

void SendBody(const httplib::Request& req, httplib::Response& res,
              std::string body, const std::string& content_type,
              std::shared_ptr<void> hold) {
  if (body.empty()) {
    res.set_content("", content_type);  // nothing to compress
    return;
  }
  // zlib counts in uInt: bodies past 4 GiB go as they are.
  if (body.size() >= kMinGzipBytes && body.size() < (size_t{1} << 32) &&
      IsText(content_type) && AcceptsGzip(req)) {
    std::string gz = Gzip(body, 1);
    if (!gz.empty()) {
      body = std::move(gz);
      res.set_header("Content-Encoding", "gzip");
    }
  }
  res.set_header("Vary", "Accept-Encoding");
  // A sized content provider: cpp-httplib compresses set_content bodies of
  // text types itself, but never a provider's.
  auto shared = std::make_shared<std::string>(std::move(body));
  res.set_content_provider(
      shared->size(), content_type,
      [shared, hold = std::move(hold)](size_t offset, size_t length,
                                       httplib::DataSink& sink) {
        return sink.write(shared->data() + offset, length);
      });
}

}  // namespace tensormorph
