// ListTensors' stream: one page (list_tensors_page.h) built on the worker
// pool, then written one message at a time by the queued stream's skeleton
// (stream_reactor.h), watched like every stream (max_call_seconds,
// max_idle_write_seconds). A listing is over before it would hold a stream
// slot for long, so it is only refused when the slots are full
// (ServiceState::AdmitStream), never holds one.
#ifndef TENSORMORPH_SERVER_LIST_TENSORS_REACTOR_H_
#define TENSORMORPH_SERVER_LIST_TENSORS_REACTOR_H_

#include <memory>

#include "server/service.h"

namespace tensormorph {

grpc::ServerWriteReactor<v1::TensorInfo>* NewListTensorsReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const v1::ListTensorsRequest* req);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_LIST_TENSORS_REACTOR_H_
