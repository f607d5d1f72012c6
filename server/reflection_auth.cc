#include "server/reflection_auth.h"

#include <grpc/grpc.h>

#include <string>

#include "absl/strings/match.h"

namespace tensormorph {
namespace {

class ReflectionAuthInterceptor final : public grpc::experimental::Interceptor {
 public:
  ReflectionAuthInterceptor(grpc::experimental::ServerRpcInfo* info,
                            const TokenStore* tokens)
      : info_(info), tokens_(tokens) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                POST_RECV_INITIAL_METADATA)) {
      const absl::Status s =
          tokens_->CheckMetadata(*methods->GetRecvInitialMetadata());
      if (!s.ok()) {
        // Cancelling with a status sends it as the call's trailers (a plain
        // TryCancel would say only CANCELLED); the service's handler then
        // finds the call over.
        message_ = std::string(s.message());
        grpc_call_cancel_with_status(info_->server_context()->c_call(),
                                     GRPC_STATUS_UNAUTHENTICATED,
                                     message_.c_str(), nullptr);
      }
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ServerRpcInfo* info_;
  const TokenStore* tokens_;
  std::string message_;  // outlives the cancellation
};

class ReflectionAuthFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ReflectionAuthFactory(const TokenStore* tokens) : tokens_(tokens) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    if (!absl::StartsWith(info->method(), "/grpc.reflection.")) return nullptr;
    return new ReflectionAuthInterceptor(info, tokens_);
  }

 private:
  const TokenStore* tokens_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewReflectionAuthInterceptorFactory(const TokenStore* tokens) {
  return std::make_unique<ReflectionAuthFactory>(tokens);
}

}  // namespace tensormorph
