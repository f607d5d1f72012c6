#include "server/auth_interceptor.h"

#include <google/protobuf/descriptor.h>
#include <grpc/grpc.h>

#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "server/call_log.h"

namespace tensormorph {
namespace {

// Every call any server refused, while it lasts (RefusedAnywhere), and how
// many: every call's log asks, and with none refused it takes no lock.
std::atomic<int64_t> g_refused_count{0};
absl::Mutex g_refused_mu(absl::kConstInit);
absl::flat_hash_set<const grpc::ServerContextBase*>& AllRefused()
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_refused_mu) {
  static auto* calls = new absl::flat_hash_set<const grpc::ServerContextBase*>;
  return *calls;
}

// A method some service of ours or gRPC's registers: "/pkg.Service/Method"
// is known when the generated descriptors name it (our API and reflection
// are protobuf services; health is open anyway).
bool KnownMethod(absl::string_view method) {
  if (method.size() < 2 || method[0] != '/') return false;
  const std::string dotted =
      absl::StrReplaceAll(method.substr(1), {{"/", "."}});
  return google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(
             dotted) != nullptr;
}

class AuthInterceptor final : public grpc::experimental::Interceptor {
 public:
  AuthInterceptor(grpc::experimental::ServerRpcInfo* info,
                  const TokenStore* tokens, RefusedCalls* refused,
                  const std::atomic<bool>* draining, bool known)
      : info_(info),
        tokens_(tokens),
        refused_(refused),
        draining_(draining),
        known_(known) {}

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
      Admit(*methods->GetRecvInitialMetadata());
    }
    methods->Proceed();
  }

 private:
  void Admit(const std::multimap<grpc::string_ref, grpc::string_ref>& md) {
    grpc::ServerContextBase* ctx = info_->server_context();
    if (draining_->load() && !IsInProcessPeer(ctx->peer())) {
      return Refuse(GRPC_STATUS_UNAVAILABLE, "draining",
                    "the server is draining (shutting down); retry on "
                    "another replica");
    }
    if (!known_) {
      return Refuse(GRPC_STATUS_UNIMPLEMENTED, "unimplemented",
                    "no such method");
    }
    if (!tokens_->enabled()) return;
    const absl::Status s = tokens_->CheckMetadata(md);
    if (!s.ok()) {
      Refuse(GRPC_STATUS_UNAUTHENTICATED, "auth", std::string(s.message()));
    }
  }

  void Refuse(grpc_status_code code, absl::string_view reason,
              std::string message) {
    grpc::ServerContextBase* ctx = info_->server_context();
    refused_->Add(ctx, {static_cast<grpc::StatusCode>(code), reason});
    listed_ = true;
    message_ = std::move(message);
    LogRefusal(ShortName(), PeerOf(*ctx), static_cast<grpc::StatusCode>(code),
               reason, message_);
    // Cancelling with a status sends it as the call's trailers (a plain
    // TryCancel would say only CANCELLED); the handler, which gRPC still
    // runs, finds the call in RefusedCalls and does nothing.
    grpc_call_cancel_with_status(ctx->c_call(), code, message_.c_str(),
                                 nullptr);
  }

  absl::string_view ShortName() const {
    const absl::string_view m =
        info_->method() != nullptr ? info_->method() : "";
    const size_t slash = m.rfind('/');
    return slash == absl::string_view::npos ? m : m.substr(slash + 1);
  }

  grpc::experimental::ServerRpcInfo* info_;
  const TokenStore* tokens_;
  RefusedCalls* refused_;
  const std::atomic<bool>* draining_;
  const bool known_;
  bool listed_ = false;
  std::string message_;  // outlives the cancellation
};

class AuthInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  AuthInterceptorFactory(const TokenStore* tokens, RefusedCalls* refused,
                         const std::atomic<bool>* draining)
      : tokens_(tokens), refused_(refused), draining_(draining) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const absl::string_view method =
        info->method() != nullptr ? info->method() : "";
    if (absl::StartsWith(method, "/grpc.health.v1.")) return nullptr;
    // A method gRPC has no handler for comes as a bidi stream; ours are not
    // (reflection's is, and is looked up), so most calls skip the lookup.
    const bool known =
        info->type() !=
            grpc::experimental::ServerRpcInfo::Type::BIDI_STREAMING ||
        KnownMethod(method);
    // Nothing to check: no interceptor on the call's path (tokens are
    // loaded once before the server starts; a reload never turns them on or
    // off). A call arriving before a drain began is one in flight.
    if (known && !tokens_->enabled() && !draining_->load()) return nullptr;
    return new AuthInterceptor(info, tokens_, refused_, draining_, known);
  }

 private:
  const TokenStore* tokens_;
  RefusedCalls* refused_;
  const std::atomic<bool>* draining_;
};

}  // namespace

bool RefusedCalls::Contains(const grpc::ServerContextBase* ctx) const {
  absl::MutexLock lock(&mu_);
  return calls_.contains(ctx);
}

RefusedCalls::Refusal RefusedCalls::Find(
    const grpc::ServerContextBase* ctx) const {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(ctx);
  if (it == calls_.end()) return {grpc::StatusCode::UNKNOWN, ""};
  return it->second;
}

void RefusedCalls::Add(const grpc::ServerContextBase* ctx, Refusal refusal) {
  {
    absl::MutexLock lock(&mu_);
    calls_[ctx] = refusal;
  }
  absl::MutexLock lock(&g_refused_mu);
  if (AllRefused().insert(ctx).second) g_refused_count.fetch_add(1);
}

void RefusedCalls::Remove(const grpc::ServerContextBase* ctx) {
  {
    absl::MutexLock lock(&mu_);
    calls_.erase(ctx);
  }
  absl::MutexLock lock(&g_refused_mu);
  if (AllRefused().erase(ctx) > 0) g_refused_count.fetch_sub(1);
}

bool RefusedCalls::RefusedAnywhere(const grpc::ServerContextBase* ctx) {
  if (g_refused_count.load() == 0) return false;
  absl::MutexLock lock(&g_refused_mu);
  return AllRefused().contains(ctx);
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewAuthInterceptorFactory(const TokenStore* tokens, RefusedCalls* refused,
                          const std::atomic<bool>* draining) {
  return std::make_unique<AuthInterceptorFactory>(tokens, refused, draining);
}

}  // namespace tensormorph
