// gRPC server reflection's bidirectional stream driven by hand over a
// generic stub (no reflection stubs needed): the call tests use to check
// that reflection is authenticated, and counted, like every other method.
#ifndef TENSORMORPH_TESTS_SUPPORT_REFLECTION_CALL_H_
#define TENSORMORPH_TESTS_SUPPORT_REFLECTION_CALL_H_

#include <grpcpp/grpcpp.h>

#include <string>

namespace tensormorph::testing {

struct ReflectionCall {
  grpc::Status status;
  std::string response;  // the serialized ServerReflectionResponse, if any
};

// Asks `target` (insecure, 5 s deadline) to list its services, with
// `authorization` metadata unless empty. Then ends the stream, or with
// `cancel` cancels it once the answer is read (the handler is then in its
// loop, waiting for more).
ReflectionCall ListServicesByReflection(const std::string& target,
                                        const std::string& authorization,
                                        bool cancel = false);

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_REFLECTION_CALL_H_
