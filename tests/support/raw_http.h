// HTTP/1.1 as an attacker writes it: bytes on a socket, nothing a client
// library would fix up (a Host it chose, two lengths, a smuggled request).
#ifndef TENSORMORPH_TESTS_SUPPORT_RAW_HTTP_H_
#define TENSORMORPH_TESTS_SUPPORT_RAW_HTTP_H_

#include <map>
#include <string>
#include <vector>

namespace tensormorph::testing {

// One response as read off the wire.
struct RawResponse {
  int status = 0;  // 0: none came
  // Header names lower-cased; a name sent twice keeps both values.
  std::multimap<std::string, std::string> headers;
  std::string body;  // what followed the headers (chunked bodies raw)
};

// A socket connected to 127.0.0.1:`port` from loopback address `from`
// (127.0.0.2 is another peer to the server), with a 10 s receive timeout;
// -1 when it cannot connect.
int RawConnect(int port, const std::string& from = "127.0.0.1");

// Writes `request` to 127.0.0.1:`port` and reads until the server closes
// the connection (or 10 s pass); every response that came, in order.
std::vector<RawResponse> RawHttpExchange(int port, const std::string& request);

// A GET of `path` with the given Host header and Connection: close; the
// one response (status 0 when none came).
RawResponse RawGet(int port, const std::string& path,
                   const std::string& host = "127.0.0.1");

// A socket left open after writing `request` and reading the response's
// headers, for a test that holds a response in flight.
class HeldResponse {
 public:
  // From loopback address `from` (127.0.0.2 is another peer to the server).
  HeldResponse(int port, const std::string& request,
               const std::string& from = "127.0.0.1");
  ~HeldResponse();
  const RawResponse& head() const { return head_; }
  // Reads the rest until the server closes; returns the body's bytes read
  // in all (those after the headers, already read ones included).
  size_t ReadToEnd();

 private:
  int fd_ = -1;
  RawResponse head_;
  size_t body_bytes_ = 0;
};

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_RAW_HTTP_H_
