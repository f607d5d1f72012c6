// MessagePrefetcher: a server stream's replies read on a second thread, a
// few ahead of the caller, so that receiving (the socket's copy, HTTP/2
// framing) runs beside whatever the caller does with each reply (a write
// to a file) instead of after it.
#ifndef TENSORMORPH_CLIENT_MESSAGE_PREFETCHER_H_
#define TENSORMORPH_CLIENT_MESSAGE_PREFETCHER_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/sync_stream.h>

#include <cstddef>
#include <deque>
#include <thread>

#include "absl/synchronization/mutex.h"

namespace tensormorph {

// Thread safety: Next and Stop from one thread (the caller's); the reader
// is used only by the prefetching thread until Stop or the end of the
// stream, after which the caller may Read and Finish it again.
class MessagePrefetcher {
 public:
  // Starts reading `reader` (whose call `ctx` is) on a new thread, holding
  // at most `depth` replies. Both must outlive the object.
  MessagePrefetcher(grpc::ClientReaderInterface<grpc::ByteBuffer>* reader,
                    grpc::ClientContext* ctx, size_t depth);
  // Stops (see Stop).
  ~MessagePrefetcher();

  // The next reply in order; false once the stream has ended (Read
  // returned false) and every reply read was taken.
  bool Next(grpc::ByteBuffer* out);
  // Cancels the call (ctx->TryCancel) unless its stream has ended, and
  // waits for the thread to end, dropping the replies it held. Idempotent.
  void Stop();

 private:
  void Run();

  grpc::ClientReaderInterface<grpc::ByteBuffer>* reader_;
  grpc::ClientContext* ctx_;
  const size_t depth_;
  absl::Mutex mu_;
  std::deque<grpc::ByteBuffer> ready_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is set
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_MESSAGE_PREFETCHER_H_
