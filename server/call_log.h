// One log line per call: method, peer, checkpoint, tensor, status, bytes and
// milliseconds.
#ifndef TENSORMORPH_SERVER_CALL_LOG_H_
#define TENSORMORPH_SERVER_CALL_LOG_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <string>

#include "absl/time/clock.h"
#include "server/exception_fence.h"

namespace tensormorph {

// The caller as the log names it: gRPC's peer ("ipv4:10.0.0.7:51234"), or
// for a call the HTTP gateway makes over the in-process channel, its HTTP
// client ("http:10.0.0.7:51234", from x-forwarded-for, which only an
// in-process caller is trusted to set).
std::string PeerOf(grpc::CallbackServerContext* ctx);

class CallLog {
 public:
  CallLog(const char* method, grpc::CallbackServerContext* ctx,
          std::string checkpoint, std::string tensor)
      : method_(method),
        peer_(PeerOf(ctx)),
        checkpoint_(std::move(checkpoint)),
        tensor_(std::move(tensor)),
        start_(absl::Now()) {}

  // Logs the call's outcome; errors other than cancellation at warning.
  void Finish(const grpc::Status& status, int64_t bytes) const;

  // The call, for the exception fence; valid while this log lives.
  FenceSite site() const { return {method_, checkpoint_, tensor_}; }
  const char* method() const { return method_; }

 private:
  const char* method_;
  std::string peer_;
  std::string checkpoint_;
  std::string tensor_;
  absl::Time start_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_CALL_LOG_H_
