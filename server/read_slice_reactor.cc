// ReadSlice: chunks produced on the worker pool one ahead of the write in
// flight (one write in flight, one message ready), so the socket does not
// wait for a pool hop; cancellation and deadlines stop the work at the next
// chunk boundary, and the watchdog (stream_watchdog.h) ends a call past
// max_call_seconds or stalled past max_idle_write_seconds. The writes,
// stops and the one finish are the queued stream's skeleton's
// (stream_reactor.h); the producer is its one task, asked for the next
// chunk as each write starts (BeforeWriteLocked).
//
// Every chunk's data, raw or decoded, is read out of the mapping under the
// fault guard into the message's own buffer (SliceSource, slice_source.h,
// which also checks the request and the files). Never a slice over the mapping:
// a file shrunk while such a slice waits on flow control makes the socket
// send fail with EFAULT, which takes down the whole HTTP/2 connection and
// every other call on it. The method is registered raw (grpc::ByteBuffer)
// so that the buffer goes out as it is, after a small serialized prefix,
// without a serialization copy. Before the last chunk, the files read must
// still be the ones the stream began with, or the call ends ABORTED
// (FILE_CHANGED_DURING_READ, as core/io's remote reads end for a replaced
// object): what it sent may mix old and new bytes.
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include <deque>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/util/status_macros.h"
#include "proto/status_mapping.h"
#include "server/call_log.h"
#include "server/service.h"
#include "server/slice_source.h"
#include "server/stream_reactor.h"

namespace tensormorph {
namespace {

// Frees a chunk's buffer once gRPC has sent it.
void DeleteFloats(void* buffer) { delete[] static_cast<float*>(buffer); }

// Field 4 (bytes) of SliceChunk: its tag and length, to follow the rest.
void AppendDataFieldHeader(uint64_t len, std::string* out) {
  out->push_back(static_cast<char>((4 << 3) | 2));
  do {
    const uint8_t b = len & 0x7f;
    len >>= 7;
    out->push_back(static_cast<char>(len ? b | 0x80 : b));
  } while (len);
}

v1::ReadSliceRequest ParseRequest(const grpc::ByteBuffer& bytes, bool* ok) {
  grpc::ByteBuffer copy(bytes);  // shares the slices
  v1::ReadSliceRequest req;
  *ok =
      grpc::SerializationTraits<v1::ReadSliceRequest>::Deserialize(&copy, &req)
          .ok();
  return req;
}

class ReadSliceReactor final : public QueuedStreamReactor<grpc::ByteBuffer> {
 public:
  ReadSliceReactor(std::shared_ptr<ServiceState> state,
                   grpc::CallbackServerContext* ctx, v1::ReadSliceRequest req,
                   bool parsed)
      : QueuedStreamReactor(std::move(state), ctx, "ReadSlice",
                            req.checkpoint(), req.tensor(), kMessagesHeld),
        parsed_(parsed),
        req_(std::move(req)) {
    {
      absl::MutexLock lock(&mu_);
      producing_ = true;
    }
    Launch([this] { Begin(); });
  }

 private:
  // One message in flight and one ready: the socket never waits for a pool
  // hop, and a stream holds at most two chunks of its peer's reply budget.
  static constexpr size_t kMessagesHeld = 2;

  // Over when no producer runs and, unless the call failed, every chunk
  // has been produced (and, the queue being empty, written).
  bool WorkOverLocked(bool failed) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !producing_ && (failed || all_produced_);
  }

  // The next write is about to start: its successor is produced meanwhile
  // (the producer is one ahead of the write, never more).
  void BeforeWriteLocked() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (producing_ || all_produced_ || queue_.size() >= kMessagesHeld) return;
    // Marked after the submit (which may throw): the task reads producing_
    // only under mu_, held here.
    state_->pool.Submit([this] { Produce(); });
    producing_ = true;
  }

  // Counted when sent (chunks_sent, bytes_sent), in WrittenLocked.
  bool CountsAsChunk(const grpc::ByteBuffer&) const override { return false; }

  void WrittenLocked(const grpc::ByteBuffer&, bool ok) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int64_t bytes = sizes_.front();
    sizes_.pop_front();
    // Sent, or never to be: its buffer is gRPC's to free either way.
    state_->reply_bytes.Give(peer_, bytes);
    if (!ok) return;
    state_->metrics.chunks_sent.fetch_add(1);
    state_->metrics.bytes_sent.fetch_add(bytes);
    bytes_ += bytes;
  }

  int64_t FinishingLocked() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Chunks built and never written (a stop dropped them).
    for (const int64_t bytes : sizes_) state_->reply_bytes.Give(peer_, bytes);
    sizes_.clear();
    return bytes_;
  }

  absl::Status Prepare() {
    if (!parsed_) return absl::InvalidArgumentError("unparsable request");
    // Checked before a slot is taken, as SliceSource::Open checks it again.
    TM_RETURN_IF_ERROR(CheckReadSliceRequest(req_));
    if (!slot_taken_) {  // a resumed Begin holds its slot already
      TM_RETURN_IF_ERROR(AdmitAsStream());
      slot_taken_ = true;
    }
    auto source = SliceSource::Open(*state_, req_);
    if (!source.ok()) return source.status();
    source_ = *std::move(source);
    *chunk_.mutable_header() = source_->header();
    return absl::OkStatus();
  }

  // On the pool, holding the producer. While another call opens the
  // checkpoint, it waits without a worker and runs again after
  // (CheckpointRegistry::ParkingScope); a stop asked meanwhile is seen by
  // the first chunk.
  void Begin() {
    CheckpointRegistry::ParkingScope parking(state_->registry);
    absl::Status s = Fenced(log_.site(), [&] { return Prepare(); });
    if (parking.parked()) {
      parking.ResumeWhenOpened(
          [this] { state_->pool.Submit([this] { Begin(); }); });
      return;
    }
    if (!s.ok()) {
      Stop(s);
      return;
    }
    Produce();
  }

  // On the pool, one at a time (producing_): builds the next message and
  // queues it; the skeleton writes it when no write is in flight, and asks
  // for its successor then (BeforeWriteLocked).
  void Produce() {
    bool holds = true;  // the producer, not yet given back
    if (absl::Status s =
            Fenced(log_.site(), [&] { return ProduceOne(&holds); });
        !s.ok()) {
      Stop(s, holds);
    }
  }

  // Builds and queues one message; `*holds` is cleared once the producer
  // is given back (a successor may then run: an exception past that point
  // must not give it back again).
  absl::Status ProduceOne(bool* holds) {
    {
      absl::MutexLock lock(&mu_);
      if (cancelled_.load() || !status_.ok()) {
        producing_ = false;
        *holds = false;
        PumpLocked();  // keeps the status already chosen
        return absl::OkStatus();
      }
    }
    if (source_->next_offset() > 0) chunk_.clear_header();
    const int64_t n = source_->next_count();
    chunk_.set_element_offset(source_->next_offset());
    chunk_.set_element_count(n);
    // The message: the chunk's fields, the data field's tag and length, then
    // the data as its own slice.
    const size_t data_bytes = source_->next_bytes();
    // Allocated before the guarded read (a fault must not unwind an
    // allocation), and as floats: grpc_slice_malloc's bytes need not be
    // aligned for the decoders' stores.
    float* buffer = new float[(data_bytes + 3) / 4];
    grpc::Slice data(buffer, data_bytes, &DeleteFloats, buffer);
    TM_RETURN_IF_ERROR(source_->ReadNext(reinterpret_cast<uint8_t*>(buffer)));
    std::string prefix = chunk_.SerializeAsString();
    AppendDataFieldHeader(data_bytes, &prefix);
    grpc::Slice slices[2] = {grpc::Slice(prefix), std::move(data)};
    const int64_t message_bytes = static_cast<int64_t>(data_bytes);
    absl::MutexLock lock(&mu_);
    producing_ = false;
    *holds = false;
    all_produced_ = source_->done();
    if (status_.ok()) {
      // Counted against the peer's reply budget until written: new calls
      // see it; this admitted stream goes on (it holds at most
      // kMessagesHeld chunks).
      state_->reply_bytes.Take(peer_, message_bytes);
      sizes_.push_back(message_bytes);
      queue_.emplace_back(slices, 2);
    }
    PumpLocked();
    return absl::OkStatus();
  }

  // The producer's way out: ends the call with `s` (unless it has a status
  // already) once no write is in flight. `release_producer`: the caller
  // holds the producer and gives it up; false only for a fenced exception
  // that came after the producer was handed over.
  void Stop(const absl::Status& s, bool release_producer = true) {
    absl::MutexLock lock(&mu_);
    if (release_producer) producing_ = false;
    if (status_.ok()) status_ = ToGrpcStatus(s);
    PumpLocked();
  }

  const bool parsed_;
  const v1::ReadSliceRequest req_;
  bool slot_taken_ = false;  // Prepare took the stream slot (once)
  // The producer's own (one producer at a time):
  std::unique_ptr<SliceSource> source_;  // set by Prepare
  v1::SliceChunk chunk_;  // header and offsets (the data goes as a slice)
  // Data bytes of each message queued, in queue_'s order.
  std::deque<int64_t> sizes_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;  // data bytes written
  bool producing_ ABSL_GUARDED_BY(mu_) = false;
  bool all_produced_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* NewReadSliceReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const grpc::ByteBuffer* req) {
  bool parsed = false;
  v1::ReadSliceRequest parsed_req = ParseRequest(*req, &parsed);
  return new ReadSliceReactor(std::move(state), ctx, std::move(parsed_req),
                              parsed);
}

}  // namespace tensormorph
