#include "server/auth.h"

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tensormorph {

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

absl::Status TokenStore::Load(const std::string& path) {
  {
    absl::MutexLock lock(&mu_);
    path_ = path;
  }
  return Reload();
}

absl::Status TokenStore::Reload() {
  std::string path;
  {
    absl::MutexLock lock(&mu_);
    path = path_;
  }
  std::ifstream in(path);
  if (!in)
    return absl::NotFoundError(
        absl::StrCat("cannot read token file '", path, "'"));
  std::vector<std::string> tokens;
  for (std::string line; std::getline(in, line);) {
    const std::string t(absl::StripAsciiWhitespace(line));
    if (!t.empty() && t[0] != '#') tokens.push_back(t);
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file '", path, "' holds no token"));
  }
  absl::MutexLock lock(&mu_);
  tokens_ = std::move(tokens);
  return absl::OkStatus();
}

bool TokenStore::enabled() const {
  absl::MutexLock lock(&mu_);
  return !tokens_.empty();
}

absl::Status TokenStore::CheckMetadata(
    const std::multimap<grpc::string_ref, grpc::string_ref>& md) const {
  absl::MutexLock lock(&mu_);
  if (tokens_.empty()) return absl::OkStatus();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return absl::UnauthenticatedError(
        "no 'authorization: Bearer <token>' metadata (tensormorph --token-file "
        "FILE)");
  }
  const std::string value(it->second.data(), it->second.size());
  // The scheme is case-insensitive (RFC 9110, section 11.1).
  if (!absl::StartsWithIgnoreCase(value, "Bearer ")) {
    return absl::UnauthenticatedError(
        "authorization metadata is not 'Bearer <token>'");
  }
  const std::string token(
      absl::StripLeadingAsciiWhitespace(absl::string_view(value).substr(7)));
  bool ok = false;
  for (const std::string& t : tokens_) ok |= ConstantTimeEquals(token, t);
  if (!ok)
    return absl::UnauthenticatedError("the bearer token is not accepted");
  return absl::OkStatus();
}

}  // namespace tensormorph
