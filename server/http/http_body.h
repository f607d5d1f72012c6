// How the gateway sends a body it holds whole (JSON replies, the page's
// files, PNGs, metrics, errors): gzip-compressed by us when the client
// accepts gzip, else as it is, and never compressed by cpp-httplib, whose
// brotli runs at quality 11 (seconds for a heatmap's JSON, measured).
#ifndef TENSORMORPH_SERVER_HTTP_HTTP_BODY_H_
#define TENSORMORPH_SERVER_HTTP_HTTP_BODY_H_

#include <httplib.h>

#include <memory>
#include <string>

namespace tensormorph {

// Bodies shorter than this go as they are: compressing them saves too
// little to pay for itself.
inline constexpr size_t kMinGzipBytes = 8 << 10;

// Sets `res` to answer `body` as `content_type`. When the request's
// Accept-Encoding names gzip, the type is text (text/*, JSON, JavaScript)
// and the body has at least kMinGzipBytes, it goes gzip-compressed at zlib's
// level 1 (JSON of numbers shrinks about 3x at hundreds of MB/s; a higher
// level buys little more) with Content-Encoding: gzip.
// `hold` is kept until the body is written (or the response dropped).
void SendBody(const httplib::Request& req, httplib::Response& res,
              std::string body, const std::string& content_type,
              std::shared_ptr<void> hold = nullptr);

// `data` gzip-compressed at `level` (zlib's 1..9); empty if zlib fails.
std::string Gzip(const std::string& data, int level);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_HTTP_HTTP_BODY_H_
