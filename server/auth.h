// Bearer-token authentication: tokens from a file (one per line, '#'
// comments), reloadable, compared in constant time.
#ifndef TENSORMORPH_SERVER_AUTH_H_
#define TENSORMORPH_SERVER_AUTH_H_

#include <grpcpp/grpcpp.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace tensormorph {

// Thread safety: all methods are thread-safe.
class TokenStore {
 public:
  // Reads the tokens from `path`.
  // Errors: NOT_FOUND / PERMISSION_DENIED for an unreadable file;
  // INVALID_ARGUMENT when it holds no token.
  absl::Status Load(const std::string& path);
  // Re-reads the file given to Load; on failure keeps the previous tokens.
  absl::Status Reload();
  bool enabled() const;

  // OK when tokens are off or the call's "authorization: Bearer <token>"
  // metadata matches one (the scheme in any case); UNAUTHENTICATED
  // otherwise (saying which). Called by the auth interceptor only.
  absl::Status CheckMetadata(
      const std::multimap<grpc::string_ref, grpc::string_ref>& md) const;

 private:
  mutable absl::Mutex mu_;
  std::string path_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> tokens_ ABSL_GUARDED_BY(mu_);
};

// Compares without an early exit, so timing tells nothing about where two
// strings differ.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_AUTH_H_
