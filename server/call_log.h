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

class CallLog {
 public:
  CallLog(const char* method, grpc::CallbackServerContext* ctx,
          std::string checkpoint, std::string tensor)
      : method_(method),
        peer_(ctx->peer()),
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
