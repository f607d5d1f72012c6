#include "tests/support/raw_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tensormorph::testing {

int RawConnect(int port, const std::string& from) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  if (::inet_pton(AF_INET, from.c_str(), &local.sin_addr) != 1 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
    ::close(fd);
    return -1;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

namespace {

bool SendAll(int fd, const std::string& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
         static_cast<ssize_t>(bytes.size());
}

// Parses the status line and headers of `head` (without the blank line).
RawResponse ParseHead(absl::string_view head) {
  RawResponse r;
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  if (lines.empty()) return r;
  std::vector<absl::string_view> status = absl::StrSplit(lines[0], ' ');
  if (status.size() >= 2) (void)absl::SimpleAtoi(status[1], &r.status);
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) continue;
    r.headers.emplace(
        absl::AsciiStrToLower(lines[i].substr(0, colon)),
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1))));
  }
  return r;
}

}  // namespace

std::vector<RawResponse> RawHttpExchange(int port, const std::string& request) {
  std::vector<RawResponse> out;
  const int fd = RawConnect(port);
  if (fd < 0) return out;
  std::string data;
  if (SendAll(fd, request)) {
    char buf[65536];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) {
      data.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  // Responses one after the other: each head, then a Content-Length body
  // (or the rest, when it has none).
  absl::string_view rest(data);
  while (!rest.empty()) {
    const size_t end = rest.find("\r\n\r\n");
    if (end == absl::string_view::npos) break;
    RawResponse r = ParseHead(rest.substr(0, end));
    rest.remove_prefix(end + 4);
    size_t length = rest.size();
    auto it = r.headers.find("content-length");
    if (it != r.headers.end()) {
      size_t n = 0;
      if (absl::SimpleAtoi(it->second, &n)) length = std::min(n, rest.size());
    }
    r.body = std::string(rest.substr(0, length));
    rest.remove_prefix(length);
    out.push_back(std::move(r));
  }
  return out;
}

RawResponse RawGet(int port, const std::string& path, const std::string& host) {
  std::vector<RawResponse> r =
      RawHttpExchange(port, "GET " + path + " HTTP/1.1\r\nHost: " + host +
                                "\r\nConnection: close\r\n\r\n");
  return r.empty() ? RawResponse{} : r.front();
}

HeldResponse::HeldResponse(int port, const std::string& request,
                           const std::string& from) {
  fd_ = RawConnect(port, from);
  if (fd_ < 0 || !SendAll(fd_, request)) return;
  std::string data;
  char c;
  // Byte by byte up to the blank line: nothing of the body is taken.
  while (data.size() < 65536 && ::recv(fd_, &c, 1, 0) == 1) {
    data.push_back(c);
    if (absl::EndsWith(data, "\r\n\r\n")) break;
  }
  if (absl::EndsWith(data, "\r\n\r\n")) {
    head_ = ParseHead(absl::string_view(data).substr(0, data.size() - 4));
  }
}

HeldResponse::~HeldResponse() {
  if (fd_ >= 0) ::close(fd_);
}

size_t HeldResponse::ReadToEnd() {
  if (fd_ < 0) return body_bytes_;
  char buf[1 << 16];
  for (ssize_t n; (n = ::recv(fd_, buf, sizeof(buf), 0)) > 0;) {
    body_bytes_ += static_cast<size_t>(n);
  }
  return body_bytes_;
}

}  // namespace tensormorph::testing
