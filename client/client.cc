#include "client/client.h"

#include "absl/strings/str_cat.h"
#include "proto/status_mapping.h"

namespace tensormorph {

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(
    const std::string& target, const ClientOptions& options) {
  if (target.empty()) {
    return absl::InvalidArgumentError("empty server address (want host:port)");
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(4 << 20);
  std::shared_ptr<grpc::ChannelCredentials> creds =
      grpc::InsecureChannelCredentials();
  if (!options.tls_root_ca.empty() || !options.tls_client_cert.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_root_ca;
    ssl.pem_cert_chain = options.tls_client_cert;
    ssl.pem_private_key = options.tls_client_key;
    creds = grpc::SslCredentials(ssl);
  }
  auto channel = grpc::CreateCustomChannel(target, creds, args);
  return std::make_unique<Client>(std::move(channel), options);
}

Client::Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options,
               std::shared_ptr<void> keepalive)
    : channel_(std::move(channel)),
      stub_(v1::Tensormorph::NewStub(channel_)),
      options_(options),
      keepalive_(std::move(keepalive)) {}

void Client::Prepare(grpc::ClientContext* ctx) const {
  if (!options_.token.empty())
    ctx->AddMetadata("authorization", "Bearer " + options_.token);
  if (options_.timeout != absl::InfiniteDuration()) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      absl::ToChronoMilliseconds(options_.timeout));
  }
}

absl::StatusOr<v1::ServerInfo> Client::GetServerInfo() {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::ServerInfo resp;
  grpc::Status s =
      stub_->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return resp;
}

absl::StatusOr<v1::CheckpointInfo> Client::GetCheckpoint(
    const std::string& checkpoint) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::GetCheckpointRequest req;
  req.set_checkpoint(checkpoint);
  v1::CheckpointInfo resp;
  grpc::Status s = stub_->GetCheckpoint(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return resp;
}

absl::Status Client::ListTensors(
    const v1::ListTensorsRequest& request,
    const std::function<void(const v1::TensorInfo&)>& on_tensor) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  auto reader = stub_->ListTensors(&ctx, request);
  v1::TensorInfo t;
  while (reader->Read(&t)) on_tensor(t);
  return FromGrpcStatus(reader->Finish());
}

absl::StatusOr<std::vector<v1::TensorInfo>> Client::ListTensors(
    const std::string& checkpoint, const std::string& filter) {
  v1::ListTensorsRequest req;
  req.set_checkpoint(checkpoint);
  req.set_filter(filter);
  std::vector<v1::TensorInfo> out;
  absl::Status s =
      ListTensors(req, [&](const v1::TensorInfo& t) { out.push_back(t); });
  if (!s.ok()) return s;
  return out;
}

absl::Status Client::ReadSlice(
    const v1::ReadSliceRequest& request,
    const std::function<bool(const v1::SliceChunk&)>& on_chunk) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  auto reader = stub_->ReadSlice(&ctx, request);
  v1::SliceChunk chunk;
  while (reader->Read(&chunk)) {
    if (!on_chunk(chunk)) {
      ctx.TryCancel();
      while (reader->Read(&chunk)) {
      }
      reader->Finish();
      return absl::CancelledError("slice read cancelled by the caller");
    }
  }
  return FromGrpcStatus(reader->Finish());
}

absl::StatusOr<SliceData> Client::ReadSliceAll(
    const v1::ReadSliceRequest& request) {
  SliceData out;
  int64_t next = 0;
  absl::Status protocol = absl::OkStatus();
  absl::Status s = ReadSlice(request, [&](const v1::SliceChunk& c) {
    if (c.has_header()) {
      out.shape.assign(c.header().shape().begin(), c.header().shape().end());
      out.dtype = c.header().dtype();
      out.num_elements = c.header().num_elements();
      out.bytes.reserve(static_cast<size_t>(c.header().total_bytes()));
    }
    if (c.element_offset() != next) {
      protocol = absl::InternalError(absl::StrCat(
          "chunk at element ", c.element_offset(), " but expected ", next));
      return false;
    }
    next += c.element_count();
    out.bytes += c.data();
    return true;
  });
  if (!protocol.ok()) return protocol;
  if (!s.ok()) return s;
  if (next != out.num_elements) {
    return absl::InternalError(absl::StrCat("stream ended after ", next, " of ",
                                            out.num_elements, " elements"));
  }
  return out;
}

absl::Status Client::QuantDiff(
    const v1::QuantDiffRequest& request,
    const std::function<bool(const v1::QuantDiffEvent&)>& on_event) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  auto reader = stub_->QuantDiff(&ctx, request);
  v1::QuantDiffEvent event;
  while (reader->Read(&event)) {
    if (!on_event(event)) {
      ctx.TryCancel();
      while (reader->Read(&event)) {
      }
      reader->Finish();
      return absl::CancelledError("diff cancelled by the caller");
    }
  }
  return FromGrpcStatus(reader->Finish());
}

absl::StatusOr<v1::TensorStatsReply> Client::ComputeStats(
    const v1::ComputeStatsRequest& request) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::TensorStatsReply resp;
  grpc::Status s = stub_->ComputeStats(&ctx, request, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return resp;
}

absl::StatusOr<v1::HeatmapReply> Client::GetHeatmap(
    const v1::GetHeatmapRequest& request) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::HeatmapReply resp;
  grpc::Status s = stub_->GetHeatmap(&ctx, request, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return resp;
}

absl::StatusOr<v1::ArchitectureReply> Client::GetArchitecture(
    const std::string& checkpoint) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::GetArchitectureRequest req;
  req.set_checkpoint(checkpoint);
  v1::ArchitectureReply resp;
  grpc::Status s = stub_->GetArchitecture(&ctx, req, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return resp;
}

absl::StatusOr<v1::InspectScalarsResponse> Client::InspectScalars(
    const v1::InspectScalarsRequest& request) {
  v1::InspectScalarsResponse resp;
  if (absl::Status s = InspectScalars(request, &resp); !s.ok()) return s;
  return resp;
}

absl::Status Client::InspectScalars(const v1::InspectScalarsRequest& request,
                                    v1::InspectScalarsResponse* response) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  grpc::Status s = stub_->InspectScalars(&ctx, request, response);
  return s.ok() ? absl::OkStatus() : FromGrpcStatus(s);
}

}  // namespace tensormorph
