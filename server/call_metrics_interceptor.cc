#include "server/call_metrics_interceptor.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "absl/time/clock.h"
#include "server/refusals.h"

namespace tensormorph {
namespace {

using ::grpc::experimental::InterceptionHookPoints;

// How a call's end is known depends on its API. A callback call's context
// tells at its close whether it was cancelled. A synchronous one's (gRPC's
// reflection service) must not be asked then: asking plucks the close from
// the call's queue, which is shut down by then, and would close the call
// again (running these hooks inside themselves until the stack overflows).
// It is asked when its status is about to be sent instead, from the
// handler's thread, as its handler may; a close that asking delivers is
// recorded once the answer is in. A client cancelling between that moment
// and the status's arrival is not seen: such a call counts the status sent.
class CallMetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  CallMetricsInterceptor(grpc::experimental::ServerRpcInfo* info,
                         CallStats::Method* method, const RefusedCalls* refused)
      : info_(info),
        method_(method),
        refused_(refused),
        start_(absl::Now()),
        callback_(dynamic_cast<const grpc::CallbackServerContext*>(
                      info->server_context()) != nullptr) {}

  // gRPC closes every call it started (POST_RECV_CLOSE); should one end
  // without, it is still counted, with what is known without its context
  // (which is being destroyed with this interceptor).
  ~CallMetricsInterceptor() override {
    if (!recorded_) {
      method_->Record(SentOr(grpc::StatusCode::CANCELLED),
                      absl::Now() - start_);
    }
  }

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      sent_.store(methods->GetSendStatus().error_code(),
                  std::memory_order_relaxed);
      if (!callback_) {
        asking_ = true;
        cancelled_before_status_ = info_->server_context()->IsCancelled();
        asking_ = false;
        if (closed_while_asking_) Record();
      }
    }
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_CLOSE)) {
      if (asking_) {
        closed_while_asking_ = true;
      } else {
        Record();
      }
    }
    methods->Proceed();
  }

 private:
  void Record() {
    if (recorded_) return;
    const RefusedCalls::Refusal refusal =
        refused_->Find(info_->server_context());
    const grpc::StatusCode code = FinalCode(refusal);
    method_->Record(code, absl::Now() - start_);
    recorded_ = true;
    // Refused by the admission interceptor: its reason; else the code's.
    const absl::string_view reason =
        !refusal.reason.empty() ? refusal.reason : RefusalReason(code);
    if (!reason.empty()) CountRefusal(reason);
  }

  // What the client was told. Valid once the call is closed.
  grpc::StatusCode FinalCode(const RefusedCalls::Refusal& refusal) const {
    const grpc::ServerContextBase* ctx = info_->server_context();
    // Refused calls are cancelled with their refusal's status.
    if (!refusal.reason.empty()) return refusal.code;
    if (callback_ ? ctx->IsCancelled() : cancelled_before_status_) {
      return PastDeadline(*ctx) ? grpc::StatusCode::DEADLINE_EXCEEDED
                                : grpc::StatusCode::CANCELLED;
    }
    // Closed, not cancelled, and no status seen: not expected of gRPC.
    return SentOr(grpc::StatusCode::UNKNOWN);
  }

  // The client's deadline passes before the server's, by the request's
  // transit time (the server counts its deadline from the request's
  // arrival), and the client then cancels: a cancellation this close to the
  // server's deadline is taken as the deadline's. The margin is a tenth of
  // the call's time, at most 100 ms, so a client that gives up well before
  // its deadline is still counted CANCELLED.
  bool PastDeadline(const grpc::ServerContextBase& ctx) const {
    const absl::Time now = absl::Now();
    const absl::Duration margin =
        std::min(absl::Milliseconds(100), (now - start_) / 10);
    return ctx.deadline() <= absl::ToChronoTime(now + margin);
  }

  grpc::StatusCode SentOr(grpc::StatusCode otherwise) const {
    const int sent = sent_.load(std::memory_order_relaxed);
    return sent < 0 ? otherwise : static_cast<grpc::StatusCode>(sent);
  }

  grpc::experimental::ServerRpcInfo* info_;
  CallStats::Method* method_;
  const RefusedCalls* refused_;
  const absl::Time start_;
  // The status the handler sent, or -1. Atomic: a handler may still finish
  // a cancelled call on one thread while gRPC closes it on another.
  std::atomic<int> sent_{-1};
  bool recorded_ = false;
  const bool callback_;  // the callback API (else sync, see above)
  // Synchronous calls only, all on the handler's thread.
  bool asking_ = false;
  bool closed_while_asking_ = false;
  bool cancelled_before_status_ = false;
};

class CallMetricsInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  CallMetricsInterceptorFactory(CallStats* stats, const RefusedCalls* refused)
      : stats_(stats), refused_(refused) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const char* method = info->method();
    return new CallMetricsInterceptor(
        info,
        stats_->ForMethod(ShortMethodName(method != nullptr ? method : "")),
        refused_);
  }

 private:
  CallStats* stats_;
  const RefusedCalls* refused_;
};

}  // namespace

absl::string_view ShortMethodName(absl::string_view full_method) {
  const size_t slash = full_method.rfind('/');
  return slash == absl::string_view::npos ? full_method
                                          : full_method.substr(slash + 1);
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
NewCallMetricsInterceptorFactory(CallStats* stats,
                                 const RefusedCalls* refused) {
  return std::make_unique<CallMetricsInterceptorFactory>(stats, refused);
}

}  // namespace tensormorph
