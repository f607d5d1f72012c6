#include "server/http/request_guard.h"

#include <algorithm>
#include <iterator>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/util/error_reason.h"
#include "server/http/peer_fair_server.h"

namespace tensormorph {
namespace {

bool AllDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

size_t CountHeader(const httplib::Headers& headers, const char* name) {
  // Headers compare names without case (cpp-httplib's detail::ci).
  const auto [begin, end] = headers.equal_range(name);
  return static_cast<size_t>(std::distance(begin, end));
}

}  // namespace

HostAllowList::HostAllowList(absl::string_view listen_host,
                             const std::vector<std::string>& extra) {
  names_ = {"localhost", "127.0.0.1", "::1"};
  const std::string listen = NameOf(listen_host);
  if (!listen.empty() && listen != "0.0.0.0" && listen != "::") {
    names_.insert(listen);
  }
  for (const std::string& name : extra) {
    if (name == "*") {
      any_ = true;
    } else {
      names_.insert(NameOf(name));
    }
  }
}

std::string HostAllowList::NameOf(absl::string_view host) {
  host = absl::StripAsciiWhitespace(host);
  absl::string_view name = host;
  if (absl::StartsWith(host, "[")) {
    const size_t close = host.find(']');
    name = close == absl::string_view::npos ? host.substr(1)
                                            : host.substr(1, close - 1);
  } else if (const size_t colon = host.find(':');
             colon != absl::string_view::npos &&
             host.find(':', colon + 1) == absl::string_view::npos) {
    name = host.substr(0, colon);  // one colon: name:port (IPv6 has more)
  }
  if (absl::EndsWith(name, ".")) name.remove_suffix(1);
  return absl::AsciiStrToLower(name);
}

bool HostAllowList::Allows(const httplib::Request& req) const {
  if (CountHeader(req.headers, "Host") != 1) return false;
  return any_ || names_.contains(NameOf(req.get_header_value("Host")));
}

absl::Status FramingError(absl::string_view rule, absl::string_view message) {
  return WithReason(absl::InvalidArgumentError(message),
                    ErrorReason::kHttpFramingInvalid,
                    {{"rule", std::string(rule)}});
}

absl::Status CheckFraming(const httplib::Headers& headers) {
  for (const auto& [name, value] : headers) {
    if (name.find_first_of(" \t") != std::string::npos) {
      return FramingError(
          "header-name",
          absl::StrCat("the request's header name '",
                       absl::CHexEscape(absl::string_view(name).substr(0, 64)),
                       "' holds whitespace (before its colon?); a header name "
                       "is one word"));
    }
    // RFC 9110 5.5: a field value holding CR, LF or NUL is refused (a bare
    // CR is a line end to some proxies); tab is the one other control.
    if (std::any_of(value.begin(), value.end(), [](char c) {
          const auto b = static_cast<unsigned char>(c);
          return (b < 0x20 && b != '\t') || b == 0x7f;
        })) {
      return FramingError(
          "header-value",
          absl::StrCat("the request's header '",
                       absl::CHexEscape(absl::string_view(name).substr(0, 64)),
                       "' holds a control character (CR, LF, NUL...) in its "
                       "value"));
    }
  }
  const size_t lengths = CountHeader(headers, "Content-Length");
  const size_t encodings = CountHeader(headers, "Transfer-Encoding");
  if (lengths > 0 && encodings > 0) {
    return FramingError(
        "length-and-encoding",
        "the request has both Content-Length and Transfer-Encoding; send "
        "one");
  }
  if (lengths > 1 || encodings > 1) {
    return FramingError(
        "repeated-header",
        absl::StrCat("the request has ", lengths > 1 ? lengths : encodings, " ",
                     lengths > 1 ? "Content-Length" : "Transfer-Encoding",
                     " headers; send one"));
  }
  if (encodings == 1) {
    const auto it = headers.find("Transfer-Encoding");
    if (!absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(it->second),
                                "chunked")) {
      return FramingError(
          "transfer-encoding",
          "the request's Transfer-Encoding is not 'chunked', the one this "
          "server reads");
    }
  }
  if (lengths == 1) {
    const auto it = headers.find("Content-Length");
    if (!AllDigits(absl::StripAsciiWhitespace(it->second))) {
      return FramingError(
          "content-length",
          "the request's Content-Length is not a decimal number");
    }
  }
  return absl::OkStatus();
}

void EndConnectionAfter(httplib::Response& res) {
  res.set_header("Connection", "close");
  CloseConnectionAfterResponse();
}

void AddFrameHeaders(httplib::Response& res) {
  res.set_header("X-Frame-Options", "DENY");
  const auto it = res.headers.find("Content-Security-Policy");
  if (it == res.headers.end()) {
    res.set_header("Content-Security-Policy", "frame-ancestors 'none'");
  } else {
    absl::StrAppend(&it->second, "; frame-ancestors 'none'");
  }
}

}  // namespace tensormorph
