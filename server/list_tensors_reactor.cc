#include "server/list_tensors_reactor.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/util/status_macros.h"
#include "proto/status_mapping.h"
#include "server/exception_fence.h"
#include "server/list_tensors_page.h"
#include "server/whole_page_reactor.h"

namespace tensormorph {
namespace {

class ListTensorsReactor final : public WholePageReactor<v1::TensorInfo> {
 public:
  ListTensorsReactor(std::shared_ptr<ServiceState> state,
                     grpc::CallbackServerContext* ctx,
                     const v1::ListTensorsRequest* req)
      : WholePageReactor(std::move(state), ctx, "ListTensors",
                         req->checkpoint(), req->filter()),
        req_(req) {
    Start();
  }

 private:
  absl::StatusOr<std::vector<v1::TensorInfo>> BuildPage() override {
    TM_RETURN_IF_ERROR(state_->AdmitStream(peer_));
    TM_ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> ckpt,
                        state_->registry.Acquire(req_->checkpoint()));
    return ListTensorsPage(*ckpt, *req_, state_->limits.max_list_page_size);
  }

  const v1::ListTensorsRequest* const req_;
};

}  // namespace

grpc::ServerWriteReactor<v1::TensorInfo>* NewListTensorsReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const v1::ListTensorsRequest* req) {
  return new ListTensorsReactor(std::move(state), ctx, req);
}

}  // namespace tensormorph
