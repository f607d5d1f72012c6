// ReadSlice: chunks produced on the worker pool one ahead of the write in
// flight (one write in flight, one message ready), so the socket does not
// wait for a pool hop; cancellation and deadlines stop the work at the next
// chunk boundary, and the watchdog (stream_watchdog.h) ends a call past
// max_call_seconds or stalled past max_idle_write_seconds.
//
// Every chunk's data, raw or decoded, is read out of the mapping under the
// fault guard into the message's own buffer (SliceSource, slice_source.h,
// which also checks the request and the files). Never a slice over the mapping:
// a file shrunk while such a slice waits on flow control makes the socket
// send fail with EFAULT, which takes down the whole HTTP/2 connection and
// every other call on it. The method is registered raw (grpc::ByteBuffer)
// so that the buffer goes out as it is, after a small serialized prefix,
// without a serialization copy. Before the last chunk, the files read must
// still be the ones the stream began with, or the call ends
// FAILED_PRECONDITION: what it sent may mix old and new bytes.
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/util/status_macros.h"
#include "proto/status_mapping.h"
#include "server/call_log.h"
#include "server/service.h"
#include "server/slice_source.h"

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

class ReadSliceReactor final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  ReadSliceReactor(std::shared_ptr<ServiceState> state,
                   grpc::CallbackServerContext* ctx,
                   const grpc::ByteBuffer* request)
      : state_(std::move(state)),
        ctx_(ctx),
        req_(ParseRequest(*request, &parsed_)),
        log_("ReadSlice", ctx, req_.checkpoint(), req_.tensor()),
        peer_(SharePeer(*ctx)) {
    state_->StreamStarted();
    watch_ = state_->watchdog.Add(
        [this](const absl::Status& why) { Interrupt(ToGrpcStatus(why)); },
        [this](const absl::Status& why) { CancelNow(ToGrpcStatus(why)); });
    producing_ = true;
    state_->pool.Submit([this] { Begin(); });
  }

  // The next message goes out at once if it is ready; its successor is then
  // produced while it is written.
  void OnWriteDone(bool ok) override {
    state_->watchdog.WriteDone(watch_);
    bool producing = false;  // claimed the producer and not yet handed over
    if (absl::Status s =
            Fenced(log_.site(), [&] { WriteDone(ok, &producing); });
        !s.ok()) {
      Stop(ToGrpcStatus(s), producing);
    }
  }

  void OnCancel() override { cancelled_.store(true); }

  void OnDone() override {
    // First: no watchdog callback runs after this, and none is running.
    state_->watchdog.Remove(watch_);
    Fenced(log_.site(), [&] {
      // Chunks built and never written (dropped at a stop).
      state_->reply_bytes.Give(peer_, held_bytes_);
      state_->StreamEnded(cancelled_.load(), admitted_, peer_);
    }).IgnoreError();
    delete this;
  }

 private:
  void WriteDone(bool ok, bool* producing) {
    bool start = false, produce = false;
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      // Sent, or never to be: its buffer is gRPC's to free either way.
      state_->reply_bytes.Give(peer_, out_bytes_);
      held_bytes_ -= out_bytes_;
      if (!ok) {
        if (!stop_) stop_ = grpc::Status(grpc::CANCELLED, "client went away");
        ready_.reset();
      } else {
        state_->metrics.chunks_sent.fetch_add(1);
        state_->metrics.bytes_sent.fetch_add(out_bytes_);
        bytes_ += out_bytes_;
        if (ready_ && !stop_) {
          out_ = std::move(*ready_);
          out_bytes_ = ready_bytes_;
          ready_.reset();
          writing_ = start = true;
        } else if (all_produced_ && !producing_ && !stop_) {
          stop_ = grpc::Status::OK;
        }
        if (!all_produced_ && !producing_ && !stop_) {
          producing_ = produce = true;
        }
      }
      finish = FinishIfIdleLocked();
    }
    *producing = produce;
    if (start) Write();
    if (produce) state_->pool.Submit([this] { Produce(); });
    *producing = false;
    if (finish) FinishStream(*finish);
  }

  // Ends the call. Its slot goes back before the client hears the end (not
  // at OnDone, which gRPC runs after): a client reading one stream after
  // another must not find its slots still held by those it finished.
  void FinishStream(const grpc::Status& status) {
    if (admitted_) state_->ReleaseStream(peer_);
    admitted_ = false;
    Finish(status);
  }

  absl::Status Prepare() {
    if (!parsed_) return absl::InvalidArgumentError("unparsable request");
    // Checked before a slot is taken, as SliceSource::Open checks it again.
    TM_RETURN_IF_ERROR(CheckReadSliceRequest(req_));
    if (!admitted_) {  // a resumed Begin holds its slot already
      if (absl::Status admit = state_->TryAdmitStream(peer_); !admit.ok())
        return admit;
      admitted_ = true;
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
      Stop(ToGrpcStatus(s));
      return;
    }
    Produce();
  }

  // On the pool, one at a time (producing_): builds the next message, then
  // starts its write if none is in flight, or leaves it ready for
  // OnWriteDone.
  void Produce() {
    bool producing = true;  // holds the producer and has not handed it over
    if (absl::Status s = Fenced(log_.site(), [&] { ProduceOne(&producing); });
        !s.ok()) {
      Stop(ToGrpcStatus(s), producing);
    }
  }

  void ProduceOne(bool* producing) {
    if (cancelled_.load()) {
      Stop(grpc::Status(grpc::CANCELLED, "cancelled"));
      return;
    }
    if (StopAsked()) {
      Stop(grpc::Status::OK);  // keeps the status already chosen
      return;
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
    if (absl::Status s = source_->ReadNext(reinterpret_cast<uint8_t*>(buffer));
        !s.ok()) {
      Stop(ToGrpcStatus(s));
      return;
    }
    std::string prefix = chunk_.SerializeAsString();
    AppendDataFieldHeader(data_bytes, &prefix);
    grpc::Slice slices[2] = {grpc::Slice(prefix), std::move(data)};
    grpc::ByteBuffer message(slices, 2);
    const int64_t message_bytes = static_cast<int64_t>(data_bytes);
    bool start = false, produce = false;
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      producing_ = false;
      all_produced_ = source_->done();
      if (!stop_) {
        // Counted against the peer's reply budget until written: new calls
        // see it; this admitted stream goes on (one write in flight, one
        // ready, so it holds at most two chunks).
        state_->reply_bytes.Take(peer_, message_bytes);
        held_bytes_ += message_bytes;
        if (!writing_) {
          out_ = std::move(message);
          out_bytes_ = message_bytes;
          writing_ = start = true;
          // Its successor is produced while it is written.
          if (!all_produced_) producing_ = produce = true;
        } else {
          ready_ = std::move(message);
          ready_bytes_ = message_bytes;
        }
      }
      finish = FinishIfIdleLocked();
    }
    *producing = produce;  // a successor, not yet submitted
    if (start) Write();
    if (produce) state_->pool.Submit([this] { Produce(); });
    *producing = false;
    if (finish) FinishStream(*finish);
  }

  // Starts the write of out_. REQUIRES: writing_ was just set.
  void Write() {
    state_->watchdog.WriteStarted(watch_);
    StartWrite(&out_);
  }

  bool StopAsked() {
    absl::MutexLock lock(&mu_);
    return stop_.has_value();
  }

  // The watchdog's soft stop: no new write starts; the one in flight, if
  // any, ends the call when it completes.
  void Interrupt(const grpc::Status& status) {
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      if (!stop_) stop_ = status;
      ready_.reset();
      finish = FinishIfIdleLocked();
    }
    if (finish) FinishStream(*finish);
  }

  // The watchdog's hard stop: a write the client does not take never
  // completes, so the call is cancelled (the write then completes, failed,
  // and OnWriteDone finishes the call). The status is the log's.
  void CancelNow(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      if (!stop_) stop_ = status;
      ready_.reset();
    }
    // OnDone cannot run before this returns: it waits for this callback.
    ctx_->TryCancel();
  }

  // The producer's way out: ends the call with `status` (unless it ended
  // already) once no write is in flight. `release_producer`: the caller
  // holds the producer (producing_) and gives it up; false only for a fenced
  // exception that came after the producer was handed over.
  void Stop(const grpc::Status& status, bool release_producer = true) {
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      if (release_producer) producing_ = false;
      if (!stop_) stop_ = status;
      ready_.reset();
      finish = FinishIfIdleLocked();
    }
    if (finish) FinishStream(*finish);
  }

  // The status to Finish with, exactly once: when the call is to stop and
  // neither a write nor a producer is outstanding (either may still touch
  // this reactor, which OnDone deletes).
  std::optional<grpc::Status> FinishIfIdleLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!stop_ || writing_ || producing_ || finished_) return std::nullopt;
    finished_ = true;
    log_.Finish(*stop_, bytes_);
    return *stop_;
  }

  std::shared_ptr<ServiceState> state_;
  grpc::CallbackServerContext* ctx_;
  bool parsed_ = false;
  const v1::ReadSliceRequest req_;
  CallLog log_;
  StreamWatchdog::Watch* watch_ = nullptr;
  const std::string peer_;  // PeerHost: whose slot and reply budget
  bool admitted_ = false;   // holds a stream slot (set in Prepare)
  // The producer's own (one producer at a time):
  std::unique_ptr<SliceSource> source_;  // set by Prepare
  v1::SliceChunk chunk_;  // header and offsets (the data goes as a slice)
  std::atomic<bool> cancelled_{false};
  absl::Mutex mu_;
  grpc::ByteBuffer out_;                        // the message in flight
  int64_t out_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // its data bytes
  std::optional<grpc::ByteBuffer> ready_ ABSL_GUARDED_BY(mu_);  // the next
  int64_t ready_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;  // data bytes written
  // Of out_ and ready_, what is counted in state_->reply_bytes.
  int64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool producing_ ABSL_GUARDED_BY(mu_) = false;
  bool all_produced_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> stop_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* NewReadSliceReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const grpc::ByteBuffer* req) {
  return new ReadSliceReactor(std::move(state), ctx, req);
}

}  // namespace tensormorph
