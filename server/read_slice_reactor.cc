// ReadSlice: one chunk produced on the worker pool, written, and only then
// the next (one write in flight); cancellation and deadlines stop the work
// at the next chunk boundary.
//
// The method is registered raw (grpc::ByteBuffer) so that a raw chunk whose
// bytes are one run of the mapping goes out without a copy: the message is
// its small serialized prefix followed by a grpc::Slice over the mapped
// bytes, which holds a reference to the checkpoint until gRPC lets go.
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include <atomic>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/io/fault_guard.h"
#include "core/raw_slice.h"
#include "core/slice.h"
#include "proto/status_mapping.h"
#include "server/call_log.h"
#include "server/service.h"

namespace tensormorph {
namespace {

constexpr int64_t kMaxChunkBytes = 1 << 20;

// Frees the checkpoint reference a zero-copy slice holds.
void ReleaseCheckpoint(void* ref) {
  delete static_cast<std::shared_ptr<const Checkpoint>*>(ref);
}

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
        log_("ReadSlice", ctx, req_.checkpoint(), req_.tensor()) {
    state_->metrics.calls.fetch_add(1);
    state_->metrics.StreamStarted();
    state_->pool.Submit([this] { Begin(); });
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Done(grpc::Status(grpc::CANCELLED, "client went away"));
      return;
    }
    state_->metrics.chunks_sent.fetch_add(1);
    state_->metrics.bytes_sent.fetch_add(chunk_bytes_);
    bytes_ += chunk_bytes_;
    if (next_ >= total_) {
      Done(grpc::Status::OK);
      return;
    }
    state_->pool.Submit([this] { Produce(); });
  }

  void OnCancel() override { cancelled_.store(true); }

  void OnDone() override {
    if (cancelled_.load()) state_->metrics.streams_cancelled.fetch_add(1);
    state_->StreamEnded();
    delete this;
  }

 private:
  absl::Status Prepare() {
    if (!parsed_) return absl::InvalidArgumentError("unparsable request");
    if (absl::Status auth = state_->tokens.Check(ctx_); !auth.ok()) return auth;
    if (absl::Status admit = state_->AdmitStream(); !admit.ok()) return admit;
    auto ckpt = state_->registry.Acquire(req_.checkpoint());
    if (!ckpt.ok()) return ckpt.status();
    ckpt_ = *ckpt;
    auto t = FindTensorOrError(*ckpt_, req_.checkpoint(), req_.tensor());
    if (!t.ok()) return t.status();
    auto items = ParseSlice(req_.slice());
    if (!items.ok()) return items.status();
    auto slice = ResolveSlice(*items, (*t)->shape);
    if (!slice.ok()) return slice.status();
    int64_t max_bytes = req_.max_chunk_bytes();
    if (max_bytes <= 0 || max_bytes > state_->limits.max_chunk_bytes) {
      max_bytes = state_->limits.max_chunk_bytes;
    }
    max_bytes = std::min(max_bytes, kMaxChunkBytes);
    v1::SliceHeader* h = chunk_.mutable_header();
    for (int64_t d : slice->result_shape) h->add_shape(d);
    h->set_num_elements(slice->num_elements);
    total_ = slice->num_elements;
    if (req_.mode() == v1::OUTPUT_MODE_RAW) {
      auto raw = RawSliceReader::Create(**t, *std::move(slice));
      if (!raw.ok()) return raw.status();
      raw_.emplace(*std::move(raw));
      h->set_dtype(std::string(DTypeName(raw_->dtype())));
      h->set_total_bytes(raw_->total_bytes());
      per_chunk_ = std::max<int64_t>(1, max_bytes / raw_->block_bytes()) *
                   raw_->block_elems();
    } else {
      decoded_.emplace(**t, *std::move(slice));
      h->set_dtype("F32");
      h->set_total_bytes(total_ * 4);
      per_chunk_ = std::max<int64_t>(1, max_bytes / 4);
    }
    if (h->total_bytes() > state_->limits.max_slice_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the slice is ", h->total_bytes(),
          " bytes, over the limit max_slice_bytes (",
          state_->limits.max_slice_bytes, "): read it in smaller slices"));
    }
    return absl::OkStatus();
  }

  void Begin() {
    if (absl::Status s = Prepare(); !s.ok()) {
      Done(ToGrpcStatus(s));
      return;
    }
    Produce();
  }

  // Fills chunk_ with the next elements and starts its write.
  void Produce() {
    if (cancelled_.load()) {
      Done(grpc::Status(grpc::CANCELLED, "cancelled"));
      return;
    }
    if (absl::Now() - start_ > absl::Seconds(state_->limits.max_call_seconds)) {
      Done(ToGrpcStatus(absl::ResourceExhaustedError(
          absl::StrCat("the call ran past the limit max_call_seconds (",
                       state_->limits.max_call_seconds, ")"))));
      return;
    }
    if (next_ > 0) chunk_.clear_header();
    const int64_t n = std::min(per_chunk_, total_ - next_);
    chunk_.set_element_offset(next_);
    chunk_.set_element_count(n);
    const absl::Span<const uint8_t> run = raw_ && state_->zero_copy
                                              ? raw_->Contiguous(next_, n)
                                              : absl::Span<const uint8_t>();
    absl::Status s = run.empty() ? Fill(n) : Prefault(run);
    if (!s.ok()) {
      Done(ToGrpcStatus(s));
      return;
    }
    next_ += n;
    if (run.empty()) {
      chunk_bytes_ = static_cast<int64_t>(chunk_.data().size());
      bool own = false;
      out_.Clear();  // Serialize wants an empty buffer
      (void)grpc::SerializationTraits<v1::SliceChunk>::Serialize(chunk_, &out_,
                                                                 &own);
    } else {
      chunk_bytes_ = static_cast<int64_t>(run.size());
      chunk_.clear_data();
      std::string prefix = chunk_.SerializeAsString();
      AppendDataFieldHeader(run.size(), &prefix);
      grpc::Slice slices[2] = {
          grpc::Slice(prefix),
          grpc::Slice(const_cast<uint8_t*>(run.data()), run.size(),
                      &ReleaseCheckpoint,
                      new std::shared_ptr<const Checkpoint>(ckpt_))};
      out_ = grpc::ByteBuffer(slices, 2);
    }
    StartWrite(&out_);
  }

  // Copies (raw) or decodes (float32) n elements into chunk_'s data.
  absl::Status Fill(int64_t n) {
    std::string* data = chunk_.mutable_data();
    // Sized before the guarded read: a fault must not unwind an allocation.
    data->resize(static_cast<size_t>(
        raw_ ? n / raw_->block_elems() * raw_->block_bytes() : n * 4));
    return GuardedRead([&]() -> absl::Status {
      if (raw_) {
        raw_->ReadInto(next_, n, data->data());
        return absl::OkStatus();
      }
      return decoded_->Read(next_, n, reinterpret_cast<float*>(data->data()));
    });
  }

  // Touches every page of a zero-copy run under the fault guard, so that a
  // file shrunk under us fails this call with its own status here, and the
  // socket write finds the pages mapped. (A file shrunk in the microseconds
  // between this and the write fails that write instead.)
  static absl::Status Prefault(absl::Span<const uint8_t> run) {
    return GuardedRead([&]() -> absl::Status {
      const volatile uint8_t* p = run.data();
      uint8_t sink = 0;
      for (size_t i = 0; i < run.size(); i += 4096) sink ^= p[i];
      sink ^= p[run.size() - 1];
      (void)sink;
      return absl::OkStatus();
    });
  }

  // Finishes the call once, whoever gets here first.
  void Done(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
    }
    log_.Finish(status, bytes_);
    Finish(status);
  }

  std::shared_ptr<ServiceState> state_;
  grpc::CallbackServerContext* ctx_;
  bool parsed_ = false;
  const v1::ReadSliceRequest req_;
  const absl::Time start_ = absl::Now();
  CallLog log_;
  std::shared_ptr<const Checkpoint> ckpt_;  // keeps the mapping alive
  std::optional<SliceReader> decoded_;
  std::optional<RawSliceReader> raw_;
  v1::SliceChunk chunk_;     // header, offsets and (when copied) the data
  grpc::ByteBuffer out_;     // the message in flight
  int64_t chunk_bytes_ = 0;  // data bytes of the message in flight
  int64_t total_ = 0;
  int64_t next_ = 0;
  int64_t per_chunk_ = 1;
  int64_t bytes_ = 0;
  std::atomic<bool> cancelled_{false};
  absl::Mutex mu_;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* NewReadSliceReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const grpc::ByteBuffer* req) {
  return new ReadSliceReactor(std::move(state), ctx, req);
}

}  // namespace tensormorph
