#include "core/io/http_object.h"

#include <cstring>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/io/object_url.h"
#include "core/util/checked_math.h"

namespace tensormorph {
namespace {

constexpr uint64_t kUnknown = std::numeric_limits<uint64_t>::max();

bool ParseDecimal(absl::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  return absl::SimpleAtoi(s, out);
}

bool StrongEtag(absl::string_view etag) {
  return !etag.empty() && !absl::StartsWith(etag, "W/");
}

// The validator the Hub names a file's content by: X-Linked-Etag of a
// redirect (the LFS object's hash), which the CDN's own ETag is not.
std::string IdentityEtag(const HttpResponse& r) {
  for (const auto& hop : r.hops) {
    auto it = hop.find("x-linked-etag");
    if (it != hop.end() && !it->second.empty()) return it->second;
  }
  const std::string& linked = r.Header("x-linked-etag");
  return linked.empty() ? r.Header("etag") : linked;
}

absl::Status DataLoss(absl::string_view display, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("GET '", display, "': ", what));
}

}  // namespace

bool ParseContentRange(absl::string_view value, uint64_t* first, uint64_t* last,
                       uint64_t* total) {
  value = absl::StripAsciiWhitespace(value);
  if (!absl::ConsumePrefix(&value, "bytes ")) return false;
  const size_t slash = value.find('/');
  if (slash == absl::string_view::npos) return false;
  absl::string_view range = value.substr(0, slash);
  absl::string_view size = value.substr(slash + 1);
  if (size == "*") {
    *total = kUnknown;
  } else if (!ParseDecimal(size, total)) {
    return false;
  }
  if (range == "*") {
    *first = *last = kUnknown;
    return *total != kUnknown;
  }
  const size_t dash = range.find('-');
  if (dash == absl::string_view::npos) return false;
  if (!ParseDecimal(range.substr(0, dash), first) ||
      !ParseDecimal(range.substr(dash + 1), last) || *last < *first) {
    return false;
  }
  return *total == kUnknown || *last < *total;
}

HttpObjectReader::HttpObjectReader(ObjectIdentity identity,
                                   std::shared_ptr<const HttpClient> client,
                                   HttpSource source)
    : ObjectReader(std::move(identity)),
      client_(std::move(client)),
      source_(std::move(source)) {}

absl::StatusOr<std::shared_ptr<const HttpObjectReader>> HttpObjectReader::Open(
    std::shared_ptr<const HttpClient> client, HttpSource source,
    uint64_t head_bytes) {
  if (source.display.empty()) source.display = RedactUrl(source.url);
  head_bytes = std::max<uint64_t>(head_bytes, 1);
  std::string head(head_bytes, '\0');
  HttpRequest req;
  req.url = source.url;
  req.display = source.display;
  req.headers = source.headers;
  req.has_range = true;
  req.first = 0;
  req.last = head_bytes - 1;
  req.sigv4 = source.sigv4.get();
  req.bearer_token = source.bearer_token;
  req.bearer_origin = source.bearer_origin;
  req.follow_redirects = source.follow_redirects;
  req.sink = head.data();
  req.sink_capacity = head_bytes;
  TransferCounters open_counters;
  absl::StatusOr<HttpResponse> r = client->Get(req, &open_counters);
  if (!r.ok()) return r.status();
  const std::string& display = source.display;
  ObjectIdentity id;
  uint64_t first = 0, last = 0, total = 0;
  if (r->status == 206) {
    if (!ParseContentRange(r->Header("content-range"), &first, &last, &total) ||
        total == kUnknown || first != 0 || last >= head_bytes) {
      return DataLoss(display, absl::StrCat("asked bytes 0-", head_bytes - 1,
                                            ", got Content-Range '",
                                            r->Header("content-range"), "'"));
    }
    if (r->body_bytes != last + 1 || r->body_truncated) {
      return DataLoss(
          display,
          absl::StrCat("expected ", last + 1, " bytes, got ", r->body_bytes,
                       r->body_truncated ? " or more" : ""));
    }
    id.size = total;
  } else if (r->status == 200) {
    if (!r->body_truncated) {
      id.size = r->body_bytes;
    } else if (!ParseDecimal(r->Header("content-length"), &id.size) ||
               id.size < r->body_bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          "GET '", display,
          "': the server ignores byte ranges and names no Content-Length, so "
          "the object's size is unknown"));
    }
  } else if (r->status == 416) {
    // Only an empty object has no byte 0.
    if (!ParseContentRange(r->Header("content-range"), &first, &last, &total) ||
        total != 0) {
      return DataLoss(
          display, absl::StrCat("HTTP 416 to a read of byte 0, Content-Range '",
                                r->Header("content-range"), "'"));
    }
    id.size = 0;
    r->body_bytes = 0;
  } else {
    return HttpStatusToStatus(r->status, display, r->body);
  }
  head.resize(std::min<uint64_t>(r->body_bytes, id.size));
  id.etag = IdentityEtag(*r);
  id.last_modified = r->Header("last-modified");
  auto reader = std::shared_ptr<HttpObjectReader>(new HttpObjectReader(
      std::move(id), std::move(client), std::move(source)));
  reader->read_url_ = r->url;
  reader->sign_reads_ = OriginOf(r->url) == OriginOf(reader->source_.url);
  if (StrongEtag(r->Header("etag"))) {
    reader->if_match_ = r->Header("etag");
  } else {
    reader->if_unmodified_since_ = r->Header("last-modified");
  }
  reader->head_ = std::move(head);
  reader->counters_.requests = open_counters.requests.load();
  reader->counters_.bytes = open_counters.bytes.load();
  reader->counters_.retries = open_counters.retries.load();
  return std::shared_ptr<const HttpObjectReader>(std::move(reader));
}

ReadStats HttpObjectReader::stats() const {
  ReadStats s;
  s.requests = counters_.requests.load(std::memory_order_relaxed);
  s.bytes_fetched = counters_.bytes.load(std::memory_order_relaxed);
  s.retries = counters_.retries.load(std::memory_order_relaxed);
  return s;
}

HttpRequest HttpObjectReader::RequestFor(uint64_t offset, uint64_t length,
                                         char* out) const {
  HttpRequest req;
  req.url = read_url_;
  req.display = source_.display;
  req.headers = source_.headers;
  if (!if_match_.empty()) {
    req.headers.push_back(absl::StrCat("If-Match: ", if_match_));
  } else if (!if_unmodified_since_.empty()) {
    req.headers.push_back(
        absl::StrCat("If-Unmodified-Since: ", if_unmodified_since_));
  }
  req.has_range = true;
  req.first = offset;
  req.last = offset + length - 1;
  req.sigv4 = sign_reads_ ? source_.sigv4.get() : nullptr;
  req.bearer_token = source_.bearer_token;
  req.bearer_origin = source_.bearer_origin;
  req.follow_redirects = false;
  req.sink = out;
  req.sink_capacity = length;
  return req;
}

absl::Status HttpObjectReader::CheckAnswer(const HttpResponse& r,
                                           uint64_t offset,
                                           uint64_t length) const {
  const std::string& display = source_.display;
  const uint64_t end = offset + length - 1;
  const std::string& etag = r.Header("etag");
  if (!if_match_.empty() && !etag.empty() && etag != if_match_) {
    return absl::AbortedError(absl::StrCat(
        "GET '", display, "': the object changed since it was opened (ETag ",
        if_match_, " then ", etag, ")"));
  }
  if (r.status == 416) {
    return absl::AbortedError(absl::StrCat(
        "GET '", display, "': the object changed since it was opened (bytes ",
        offset, "-", end, " of its ", size(), " are no longer there)"));
  }
  if (r.status == 200) {
    if (offset == 0 && r.body_bytes == length) return absl::OkStatus();
    return DataLoss(display,
                    absl::StrCat("asked bytes ", offset, "-", end,
                                 ", the server answered 200 with the whole "
                                 "object (no byte ranges)"));
  }
  if (r.status != 206) {
    return HttpStatusToStatus(r.status, display, r.body);
  }
  uint64_t first = 0, last = 0, total = 0;
  if (!ParseContentRange(r.Header("content-range"), &first, &last, &total)) {
    return DataLoss(display, absl::StrCat("asked bytes ", offset, "-", end,
                                          ", got Content-Range '",
                                          r.Header("content-range"), "'"));
  }
  if (total != kUnknown && total != size()) {
    return absl::AbortedError(absl::StrCat(
        "GET '", display, "': the object changed since it was opened (", size(),
        " bytes then ", total, ")"));
  }
  if (first != offset || last != end) {
    return DataLoss(display, absl::StrCat("asked bytes ", offset, "-", end,
                                          ", got bytes ", first, "-", last));
  }
  if (r.body_truncated || r.body_bytes != length) {
    return DataLoss(
        display, absl::StrCat("bytes ", offset, "-", end, ": expected ", length,
                              " bytes, got ", r.body_bytes,
                              r.body_truncated ? " or more" : ""));
  }
  return absl::OkStatus();
}

absl::Status HttpObjectReader::ReadAt(uint64_t offset, uint64_t length,
                                      char* out) const {
  if (absl::Status s = CheckRange(offset, length); !s.ok()) return s;
  if (length == 0) return absl::OkStatus();
  if (offset + length <= head_.size()) {
    std::memcpy(out, head_.data() + offset, length);
    return absl::OkStatus();
  }
  const HttpRequest req = RequestFor(offset, length, out);
  absl::StatusOr<HttpResponse> r = client_->Get(req, &counters_);
  if (!r.ok()) return r.status();
  return CheckAnswer(*r, offset, length);
}

}  // namespace tensormorph
