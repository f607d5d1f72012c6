// A unary call's request and response on one protobuf arena: a reply of
// 10,000 inspected scalars is tens of thousands of small messages, built and
// freed as a handful of blocks instead of one allocation each.
#ifndef TENSORMORPH_SERVER_ARENA_ALLOCATOR_H_
#define TENSORMORPH_SERVER_ARENA_ALLOCATOR_H_

#include <google/protobuf/arena.h>
#include <grpcpp/support/message_allocator.h>

namespace tensormorph {

template <typename Request, typename Response>
class ArenaMessageAllocator final
    : public grpc::MessageAllocator<Request, Response> {
 public:
  grpc::MessageHolder<Request, Response>* AllocateMessages() override {
    return new Holder();
  }

 private:
  class Holder final : public grpc::MessageHolder<Request, Response> {
   public:
    Holder() : arena_(Options()) {
      this->set_request(
          google::protobuf::Arena::CreateMessage<Request>(&arena_));
      this->set_response(
          google::protobuf::Arena::CreateMessage<Response>(&arena_));
    }
    void Release() override { delete this; }

   private:
    // Blocks grow to 1 MiB (the default stops at 8 KiB).
    static google::protobuf::ArenaOptions Options() {
      google::protobuf::ArenaOptions o;
      o.start_block_size = 4096;
      o.max_block_size = 1 << 20;
      return o;
    }
    google::protobuf::Arena arena_;
  };
};

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_ARENA_ALLOCATOR_H_
