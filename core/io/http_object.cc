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
#include "core/util/error_reason.h"

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

// The object is not the one opened: a reader discards what it read and
// opens it again, as for a local file that changed during a read.
absl::Status ObjectChanged(absl::string_view display, absl::string_view how) {
  return WithReason(
      absl::AbortedError(absl::StrCat(
          "GET '", display, "': the object changed since it was opened (", how,
          ")")),
      ErrorReason::kFileChangedDuringRead, {{"file", std::string(display)}});
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

absl::StatusOr<HttpObjectReader::Resolved> HttpObjectReader::Resolve(
    const HttpClient& client, const HttpSource& source, uint64_t head_bytes,
    TransferCounters* counters) {
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
  absl::StatusOr<HttpResponse> r = client.Get(req, counters);
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
  Resolved out;
  out.identity = std::move(id);
  out.head = std::move(head);
  out.target.url = r->url;
  out.target.sign = OriginOf(r->url) == OriginOf(source.url);
  if (StrongEtag(r->Header("etag"))) {
    out.target.if_match = r->Header("etag");
  } else {
    out.target.if_unmodified_since = r->Header("last-modified");
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const HttpObjectReader>> HttpObjectReader::Open(
    std::shared_ptr<const HttpClient> client, HttpSource source,
    uint64_t head_bytes) {
  if (source.display.empty()) source.display = RedactUrl(source.url);
  head_bytes = std::max<uint64_t>(head_bytes, 1);
  TransferCounters counters;
  absl::StatusOr<Resolved> resolved =
      Resolve(*client, source, head_bytes, &counters);
  if (!resolved.ok()) return resolved.status();
  auto reader = std::shared_ptr<HttpObjectReader>(new HttpObjectReader(
      std::move(resolved->identity), std::move(client), std::move(source)));
  reader->target_ = std::move(resolved->target);
  reader->head_ = std::move(resolved->head);
  reader->counters_.requests = counters.requests.load();
  reader->counters_.bytes = counters.bytes.load();
  reader->counters_.retries = counters.retries.load();
  return std::shared_ptr<const HttpObjectReader>(std::move(reader));
}

ReadStats HttpObjectReader::stats() const {
  ReadStats s;
  s.requests = counters_.requests.load(std::memory_order_relaxed);
  s.bytes_fetched = counters_.bytes.load(std::memory_order_relaxed);
  s.retries = counters_.retries.load(std::memory_order_relaxed);
  return s;
}

HttpRequest HttpObjectReader::RequestFor(const Target& target, uint64_t offset,
                                         uint64_t length, char* out) const {
  HttpRequest req;
  req.url = target.url;
  req.display = source_.display;
  req.headers = source_.headers;
  if (!target.if_match.empty()) {
    req.headers.push_back(absl::StrCat("If-Match: ", target.if_match));
  } else if (!target.if_unmodified_since.empty()) {
    req.headers.push_back(
        absl::StrCat("If-Unmodified-Since: ", target.if_unmodified_since));
  }
  req.has_range = true;
  req.first = offset;
  req.last = offset + length - 1;
  req.sigv4 = target.sign ? source_.sigv4.get() : nullptr;
  req.bearer_token = source_.bearer_token;
  req.bearer_origin = source_.bearer_origin;
  req.follow_redirects = false;
  req.sink = out;
  req.sink_capacity = length;
  return req;
}

absl::Status HttpObjectReader::CheckAnswer(const Target& target,
                                           const HttpResponse& r,
                                           uint64_t offset,
                                           uint64_t length) const {
  const std::string& display = source_.display;
  const uint64_t end = offset + length - 1;
  const std::string& etag = r.Header("etag");
  if (!target.if_match.empty() && !etag.empty() && etag != target.if_match) {
    return ObjectChanged(
        display, absl::StrCat("ETag ", target.if_match, " then ", etag));
  }
  if (r.status == 416) {
    return ObjectChanged(
        display, absl::StrCat("bytes ", offset, "-", end, " of its ", size(),
                              " are no longer there"));
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
    return ObjectChanged(display, absl::StrCat(size(), " bytes then ", total));
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

HttpObjectReader::Target HttpObjectReader::CurrentTarget() const {
  std::lock_guard<std::mutex> lock(mu_);
  return target_;
}

absl::Status HttpObjectReader::Reresolve(const Target& failed) const {
  absl::StatusOr<Resolved> again = Resolve(*client_, source_, 1, &counters_);
  if (!again.ok()) return again.status();
  const ObjectIdentity& was = identity();
  const ObjectIdentity& now = again->identity;
  const bool same =
      now.size == was.size &&
      (!was.etag.empty() ? now.etag == was.etag
                         : now.last_modified == was.last_modified) &&
      // The server of the bytes must name them as before too.
      (failed.if_match.empty() || again->target.if_match == failed.if_match);
  if (!same) {
    return ObjectChanged(
        source_.display,
        absl::StrCat("resolved again: ", was.size, " bytes, validator ",
                     was.etag.empty() ? was.last_modified : was.etag, ", then ",
                     now.size, " bytes, ",
                     now.etag.empty() ? now.last_modified : now.etag));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (target_.url == failed.url) target_ = std::move(again->target);
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
  for (int attempt = 0;; ++attempt) {
    const Target target = CurrentTarget();
    absl::StatusOr<HttpResponse> r =
        client_->Get(RequestFor(target, offset, length, out), &counters_);
    absl::Status s =
        r.ok() ? CheckAnswer(target, *r, offset, length) : r.status();
    // Where open was redirected (the Hub to its CDN), the URL it led to may
    // have been a signed one that expired: resolve the object again (its
    // identity must be the same) and read from where that leads, once.
    const bool redirected = target.url != source_.url;
    if (attempt > 0 || !redirected ||
        !(absl::IsPermissionDenied(s) || absl::IsNotFound(s))) {
      return s;
    }
    if (absl::Status again = Reresolve(target); !again.ok()) return again;
  }
}

}  // namespace tensormorph
