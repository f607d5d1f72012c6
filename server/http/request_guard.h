// What tensormorphd's HTTP port checks of every request before routing it,
// and adds to every response, as a server a browser can reach must:
//  - the Host header names this server (HostAllowList): otherwise a page on
//    any site could rebind its own name to 127.0.0.1 (DNS rebinding) and
//    read every checkpoint of the token-less localhost server the quick
//    start runs, the browser taking it for the page's own origin;
//  - the body's framing is unambiguous (CheckFraming): a request with both
//    Content-Length and Transfer-Encoding, or two lengths, is read one way
//    by a proxy in front and another way here (request smuggling);
//  - no other site may frame a page of it (AddFrameHeaders: clickjacking).
#ifndef TENSORMORPH_SERVER_HTTP_REQUEST_GUARD_H_
#define TENSORMORPH_SERVER_HTTP_REQUEST_GUARD_H_

#include <httplib.h>

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tensormorph {

// The names a Host header may give: localhost, 127.0.0.1 and ::1 always;
// the host the port listens on, unless it is a wildcard (0.0.0.0, ::, or
// empty: no one name); and `extra` (--http-allow-host), where "*" allows
// any Host (for a server reached only through a proxy that checks it).
// Names compare without case, a port, brackets or one trailing dot.
// Thread safety: const methods are thread-safe.
class HostAllowList {
 public:
  HostAllowList(absl::string_view listen_host,
                const std::vector<std::string>& extra);

  // The name in a Host header value ("Example.com:8080", "[::1]:80",
  // "localhost."): lower case, without port, brackets or trailing dot.
  static std::string NameOf(absl::string_view host_header);

  // True when every Host header of `req` (there must be exactly one) names
  // an allowed name.
  bool Allows(const httplib::Request& req) const;

 private:
  absl::flat_hash_set<std::string> names_;
  bool any_ = false;
};

// INVALID_ARGUMENT HTTP_FRAMING_INVALID with metadata rule: a request whose
// body cannot be told apart from what follows it, or cannot be read.
// docs/errors.md lists the rules.
absl::Status FramingError(absl::string_view rule, absl::string_view message);

// HTTP_FRAMING_INVALID (FramingError), naming the headers, when the body's
// length is not told one way: a header name with whitespace in it
// ("Transfer-Encoding : chunked", which cpp-httplib keeps as another name
// and a proxy may read as Transfer-Encoding; RFC 9112 5.1 has it refused);
// Transfer-Encoding together with Content-Length; a Transfer-Encoding other
// than exactly "chunked" (cpp-httplib would read "gzip, chunked" by its
// Content-Length, or to the connection's end); two Transfer-Encoding or two
// Content-Length headers (even equal ones); a Content-Length that is not a
// decimal number; a header value holding a control other than tab (a bare
// CR, a NUL: RFC 9110 5.5).
absl::Status CheckFraming(const httplib::Headers& headers);

// Ends the connection once `res` is sent, with Connection: close. For a
// request whose body was not read: whatever of it follows must never be
// taken for a next request. (cpp-httplib 0.11 keeps a connection open
// whatever the response's Connection header says; the gateway's own
// connection loop ends it, peer_fair_server.h.)
void EndConnectionAfter(httplib::Response& res);

// X-Frame-Options: DENY, and frame-ancestors 'none' added to the response's
// Content-Security-Policy (set alone when it has none). Call once, last.
void AddFrameHeaders(httplib::Response& res);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_HTTP_REQUEST_GUARD_H_
