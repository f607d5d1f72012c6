#include "tests/support/reflection_call.h"

#include <grpcpp/generic/generic_stub.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace tensormorph::testing {

ReflectionCall ListServicesByReflection(const std::string& target,
                                        const std::string& authorization,
                                        bool cancel) {
  auto channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (!authorization.empty()) ctx.AddMetadata("authorization", authorization);
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(
      &ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](intptr_t n) {
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(tag, reinterpret_cast<void*>(n));
    return ok;
  };
  ReflectionCall out;
  call->StartCall(reinterpret_cast<void*>(1));
  step(1);
  // ServerReflectionRequest{list_services: "*"}: field 7, a string.
  grpc::Slice list(std::string("\x3a\x01*", 3));
  grpc::ByteBuffer request(&list, 1), response;
  call->Write(request, reinterpret_cast<void*>(2));
  step(2);
  bool answered = false;
  if (cancel) {
    call->Read(&response, reinterpret_cast<void*>(3));
    answered = step(3);
    ctx.TryCancel();
  } else {
    call->WritesDone(reinterpret_cast<void*>(3));
    step(3);
    call->Read(&response, reinterpret_cast<void*>(4));
    answered = step(4);
  }
  if (answered) {
    std::vector<grpc::Slice> slices;
    (void)response.Dump(&slices);
    for (const grpc::Slice& sl : slices) {
      out.response.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    }
  }
  call->Finish(&out.status, reinterpret_cast<void*>(5));
  step(5);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return out;
}

}  // namespace tensormorph::testing
