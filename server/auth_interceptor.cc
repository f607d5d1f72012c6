#include "server/auth_interceptor.h"

#include <grpc/grpc.h>

#include <string>

#include "absl/strings/match.h"

namespace tensormorph {
namespace {

class AuthInterceptor final : public grpc::experimental::Interceptor {
 public:
  AuthInterceptor(grpc::experimental::ServerRpcInfo* info,
                  const TokenStore* tokens, RefusedCalls* refused)
      : info_(info), tokens_(tokens), refused_(refused) {}

  // The interceptor lives as long as the call's context (gRPC destroys it
  // with the call's ServerRpcInfo): the context is listed no longer.
  ~AuthInterceptor() override {
    if (listed_) refused_->Remove(info_->server_context());
  }

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                POST_RECV_INITIAL_METADATA)) {
      const absl::Status s =
          tokens_->CheckMetadata(*methods->GetRecvInitialMetadata());
      if (!s.ok()) {
        refused_->Add(info_->server_context());
        listed_ = true;
        // Cancelling with a status sends it as the call's trailers (a plain
        // TryCancel would say only CANCELLED); the handler, which gRPC
        // still runs, finds the call in RefusedCalls and does nothing.
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
  RefusedCalls* refused_;
  bool listed_ = false;
  std::string message_;  // outlives the cancellation
};

class AuthInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  AuthInterceptorFactory(const TokenStore* tokens, RefusedCalls* refused)
      : tokens_(tokens), refused_(refused) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    if (absl::StartsWith(info->method(), "/grpc.health.v1.")) return nullptr;
    // No tokens, no check: tokens are loaded once before the server starts
    // (a reload changes them, never turns them on or off).
    if (!tokens_->enabled()) return nullptr;
    return new AuthInterceptor(info, tokens_, refused_);
  }

 private:
  const TokenStore* tokens_;
  RefusedCalls* refused_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewAuthInterceptorFactory(const TokenStore* tokens, RefusedCalls* refused) {
  return std::make_unique<AuthInterceptorFactory>(tokens, refused);
}

}  // namespace tensormorph
