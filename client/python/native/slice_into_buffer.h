// SliceIntoBuffer: one ReadSlice received into memory its caller provides
// once the header says how much, on a thread of its own, so that the
// caller's thread stays free to notice an interrupt (Python's Ctrl-C) and
// cancel the call, even while no chunk arrives. The chunks' bytes go from
// the pieces gRPC received them in straight into that memory: one copy.
#ifndef TENSORMORPH_CLIENT_PYTHON_NATIVE_SLICE_INTO_BUFFER_H_
#define TENSORMORPH_CLIENT_PYTHON_NATIVE_SLICE_INTO_BUFFER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/client.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// Thread safety: Start, Wait, Cancel and Join from one thread (the
// caller's); `allocate` runs on the read's own thread.
class SliceIntoBuffer {
 public:
  // Given the slice's header, sets `out` to writable memory of exactly
  // header.total_bytes(), which must stay valid until Join returns; or
  // returns false to end the read (Join then returns CANCELLED: the
  // caller knows why).
  using Allocate =
      std::function<bool(const v1::SliceHeader& header, absl::Span<char>* out)>;

  // Starts reading `request` through `client`, which must outlive Join.
  static std::unique_ptr<SliceIntoBuffer> Start(Client* client,
                                                v1::ReadSliceRequest request,
                                                Allocate allocate);
  // Joins (the read is cancelled first if it still runs).
  ~SliceIntoBuffer();

  // True once the read has ended, waiting at most `timeout` for it.
  bool Wait(absl::Duration timeout);
  // Ends the read at once (CANCELLED), whether or not data is arriving.
  void Cancel();
  // Waits for the read to end and returns how: the call's status (every
  // Client error, with its reason), or INTERNAL when the stream sent more
  // or fewer bytes than its header's total_bytes. OK means the memory
  // holds the whole slice.
  absl::Status Join();

 private:
  SliceIntoBuffer(Client* client, Allocate allocate)
      : client_(client), allocate_(std::move(allocate)) {}
  // The read thread's body.
  void Run(const v1::ReadSliceRequest& request);
  // ReadSlicePieces' callbacks.
  bool OnHeader(const v1::SliceHeader& header);
  bool OnPieces(absl::Span<const absl::string_view> pieces);

  Client* const client_;
  const Allocate allocate_;
  CallCanceller cancel_;
  // Written by the read thread only, read after `done_`.
  absl::Span<char> memory_;
  size_t filled_ = 0;
  bool allocated_ = false;
  bool overflow_ = false;
  absl::Status status_;

  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  bool joined_ = false;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_PYTHON_NATIVE_SLICE_INTO_BUFFER_H_
