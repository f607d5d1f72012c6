#include "server/http/json_rpc.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/request_limits.h"
#include "core/util/error_reason.h"
#include "proto/json_print.h"
#include "proto/status_mapping.h"
#include "server/gateway_metadata.h"

namespace tensormorph {
namespace {

using Stub = v1::Tensormorph::Stub;

// Metadata values travel as HTTP/2 header values: printable ASCII only.
constexpr size_t kMaxAuthorizationBytes = 8 << 10;

// Finds a field a JSON body gives twice, which protobuf's JSON parser
// (3.21) takes the last of: {"checkpoint":"a","checkpoint":"b"} asked for
// b, while a proxy or a log that read the first saw a. A field of a known
// message counts once under both its names ("row_begin" and "rowBegin");
// any other object's keys (a map's) are compared as written. Anything else
// wrong with the body is left to protobuf's parser, which names it.
class RepeatedFieldFinder final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit RepeatedFieldFinder(const google::protobuf::Descriptor* root)
      : next_(root) {}

  // The repeated field's path ("diff.checkpoint"), once parsing stopped
  // at it; empty when none is.
  const std::string& repeated() const { return repeated_; }

  bool start_object(std::size_t) override { return Open(false); }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(true); }
  bool end_array() override { return Close(); }
  bool key(string_t& key) override {
    Frame& f = frames_.back();
    const google::protobuf::FieldDescriptor* field = FieldOf(f.type, key);
    f.key = field != nullptr ? field->name() : key;
    if (!f.seen
             .insert(field != nullptr ? absl::StrCat("#", field->number())
                                      : absl::StrCat("=", key))
             .second) {
      repeated_ = absl::StrCat(f.prefix, f.key);
      return false;
    }
    next_ =
        field != nullptr && !field->is_map() ? field->message_type() : nullptr;
    return true;
  }
  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override {
    return Value();
  }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  struct Frame {
    bool array = false;
    // The object's message, or an array's elements'; null: not a message.
    const google::protobuf::Descriptor* type = nullptr;
    std::string prefix;  // the path to it, "diff." (arrays add nothing)
    std::string key;     // an object's last key
    absl::flat_hash_set<std::string> seen;  // an object's fields
  };

  static const google::protobuf::FieldDescriptor* FieldOf(
      const google::protobuf::Descriptor* type, const std::string& key) {
    if (type == nullptr) return nullptr;
    for (int i = 0; i < type->field_count(); ++i) {
      const google::protobuf::FieldDescriptor* f = type->field(i);
      if (f->name() == key || f->json_name() == key) return f;
    }
    return nullptr;
  }
  bool Open(bool array) {
    // Deeper than protobuf's parser takes (it refuses past 100 levels):
    // stop, rather than hold a frame for each of millions of '['.
    if (frames_.size() >= kMaxDepth) return false;
    Frame f;
    f.array = array;
    if (frames_.empty()) {
      f.type = next_;
    } else {
      const Frame& up = frames_.back();
      f.type = up.array ? up.type : next_;
      f.prefix = up.array ? up.prefix : absl::StrCat(up.prefix, up.key, ".");
    }
    next_ = nullptr;
    frames_.push_back(std::move(f));
    return true;
  }
  bool Close() {
    frames_.pop_back();
    return true;
  }
  bool Value() {
    next_ = nullptr;
    return true;
  }

  static constexpr size_t kMaxDepth = 100;
  const google::protobuf::Descriptor* next_;  // the next object's message
  std::vector<Frame> frames_;
  std::string repeated_;
};

template <class Req>
absl::StatusOr<Req> ParseRequest(absl::string_view body,
                                 absl::string_view method) {
  Req req;
  if (absl::StripAsciiWhitespace(body).empty()) return req;
  RepeatedFieldFinder finder(Req::descriptor());
  nlohmann::json::sax_parse(body.begin(), body.end(), &finder);
  if (!finder.repeated().empty()) {
    return RequestFieldError(
        finder.repeated(),
        absl::StrCat("the body of ", method, " gives the field '",
                     finder.repeated(),
                     "' twice (a key repeated, or both of its names); give "
                     "it once"));
  }
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;  // a misspelt field is an error
  const auto s = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(body.data(), body.size()), &req, options);
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the body of ", method, " is not a ", Req::descriptor()->full_name(),
        " in protobuf's JSON mapping: ",
        std::string(s.message().data(), s.message().size())));
  }
  // Said here, rather than by gRPC's "Received message larger than max".
  if (req.ByteSizeLong() > static_cast<size_t>(kMaxRequestBytes)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the ", method, " request is ", req.ByteSizeLong(),
                     " bytes as protobuf, past the ", kMaxRequestBytes >> 20,
                     " MiB a server takes; split it into several calls"));
  }
  return req;
}

template <class Resp>
class TypedStream : public JsonStream {
 public:
  template <class Req>
  absl::Status Start(Stub& stub,
                     std::unique_ptr<grpc::ClientReader<Resp>> (Stub::*fn)(
                         grpc::ClientContext*, const Req&),
                     const Req& req, const CallOrigin& origin) {
    if (absl::Status s = ApplyOrigin(origin, &context_); !s.ok()) return s;
    reader_ = (stub.*fn)(&context_, req);
    return absl::OkStatus();
  }
  bool Next(std::string* json) override {
    if (!reader_->Read(&message_)) return false;
    *json = MessageToJson(message_);
    return true;
  }
  absl::Status Finish() override {
    // gRPC's Finish waits for the messages still queued to be read.
    while (reader_->Read(&message_)) {
    }
    return FromGrpcStatus(reader_->Finish());
  }

 private:
  std::unique_ptr<grpc::ClientReader<Resp>> reader_;
  Resp message_;
};

// A unary call with its request in JSON: the response as the message.
template <class Req, class Resp>
absl::StatusOr<Resp> CallWithJson(
    Stub& stub, const char* name,
    grpc::Status (Stub::*fn)(grpc::ClientContext*, const Req&, Resp*),
    absl::string_view body, const CallOrigin& origin,
    const std::function<void(const Req&)>& parsed = nullptr) {
  absl::StatusOr<Req> req = ParseRequest<Req>(body, name);
  if (!req.ok()) return req.status();
  if (parsed) parsed(*req);
  grpc::ClientContext context;
  if (absl::Status s = ApplyOrigin(origin, &context); !s.ok()) return s;
  Resp resp;
  const std::shared_ptr<void> watching =
      origin.watch ? origin.watch(&context) : nullptr;
  const grpc::Status s = (stub.*fn)(&context, *req, &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return resp;
}

template <class Req, class Resp>
auto UnaryCall(const char* name, grpc::Status (Stub::*fn)(grpc::ClientContext*,
                                                          const Req&, Resp*)) {
  return [name, fn](Stub& stub, absl::string_view body,
                    const CallOrigin& origin) -> absl::StatusOr<std::string> {
    absl::StatusOr<Resp> resp =
        CallWithJson<Req, Resp>(stub, name, fn, body, origin);
    if (!resp.ok()) return resp.status();
    return MessageToJson(*resp);
  };
}

template <class Req, class Resp>
auto StreamingCall(const char* name,
                   std::unique_ptr<grpc::ClientReader<Resp>> (Stub::*fn)(
                       grpc::ClientContext*, const Req&)) {
  return
      [name, fn](Stub& stub, absl::string_view body, const CallOrigin& origin)
          -> absl::StatusOr<std::unique_ptr<JsonStream>> {
        absl::StatusOr<Req> req = ParseRequest<Req>(body, name);
        if (!req.ok()) return req.status();
        auto stream = std::make_unique<TypedStream<Resp>>();
        if (absl::Status s = stream->Start(stub, fn, *req, origin); !s.ok()) {
          return s;
        }
        return std::unique_ptr<JsonStream>(std::move(stream));
      };
}

}  // namespace

absl::Status ApplyOrigin(const CallOrigin& origin,
                         grpc::ClientContext* context) {
  if (!origin.authorization.empty()) {
    if (origin.authorization.size() > kMaxAuthorizationBytes) {
      return absl::UnauthenticatedError(absl::StrCat(
          "the Authorization header is ", origin.authorization.size(),
          " bytes, past the ", kMaxAuthorizationBytes, " allowed"));
    }
    for (const char c : origin.authorization) {
      if (c < 0x20 || c > 0x7e) {
        return absl::UnauthenticatedError(
            "the Authorization header holds a byte outside printable ASCII");
      }
    }
    context->AddMetadata("authorization", origin.authorization);
  }
  if (!origin.peer.empty()) context->AddMetadata(kGatewayPeerKey, origin.peer);
  if (!origin.forwarded_for.empty() &&
      origin.forwarded_for.size() <= kMaxAuthorizationBytes &&
      std::all_of(origin.forwarded_for.begin(), origin.forwarded_for.end(),
                  [](char c) { return c >= 0x20 && c <= 0x7e; })) {
    context->AddMetadata(kGatewayForwardedForKey, origin.forwarded_for);
  }
  if (!origin.route.empty() && origin.route.size() <= kMaxAuthorizationBytes &&
      std::all_of(origin.route.begin(), origin.route.end(),
                  [](char c) { return c >= 0x20 && c <= 0x7e; })) {
    context->AddMetadata(kGatewayRouteKey, origin.route);
  }
  if (origin.sent != nullptr) *origin.sent = true;
  return absl::OkStatus();
}

std::string MessageToJson(const google::protobuf::Message& message) {
  // protobuf's own printer with always_print_primitive_fields, some 10x
  // faster; heatmap replies run to tens of MB.
  return PrintMessageJson(message);
}

JsonRpc::JsonRpc(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)),
      stub_(v1::Tensormorph::NewStub(channel_)),
      read_slice_("/tensormorph.v1.Tensormorph/ReadSlice",
                  grpc::internal::RpcMethod::SERVER_STREAMING, channel_) {
  const auto unary = [this](const char* name, auto fn) {
    methods_.push_back({name, Entry{UnaryCall(name, fn), nullptr}});
  };
  const auto streaming = [this](const char* name, auto fn) {
    methods_.push_back({name, Entry{nullptr, StreamingCall(name, fn)}});
  };
  // In the order of tensormorph.proto; json_rpc_test checks that every
  // method of the service is here.
  unary("GetServerInfo", &Stub::GetServerInfo);
  unary("GetCheckpoint", &Stub::GetCheckpoint);
  unary("GetTensor", &Stub::GetTensor);
  streaming("ListTensors", &Stub::ListTensors);
  streaming("ReadSlice", &Stub::ReadSlice);
  unary("InspectScalars", &Stub::InspectScalars);
  streaming("QuantDiff", &Stub::QuantDiff);
  unary("GetDiffReport", &Stub::GetDiffReport);
  unary("ComputeStats", &Stub::ComputeStats);
  unary("GetHeatmap", &Stub::GetHeatmap);
  unary("GetArchitecture", &Stub::GetArchitecture);
  streaming("ListCheckpoints", &Stub::ListCheckpoints);
  streaming("CheckCheckpoint", &Stub::CheckCheckpoint);
  streaming("ComputeSparsity", &Stub::ComputeSparsity);
  streaming("CompareQuantizations", &Stub::CompareQuantizations);
  unary("GetImportanceMatrix", &Stub::GetImportanceMatrix);
}

std::vector<std::string> JsonRpc::MethodNames() const {
  std::vector<std::string> names;
  for (const auto& [name, entry] : methods_) names.push_back(name);
  return names;
}

absl::StatusOr<const JsonRpc::Entry*> JsonRpc::Find(
    absl::string_view method) const {
  for (const auto& [name, entry] : methods_) {
    if (name == method) return &entry;
  }
  return absl::NotFoundError(absl::StrCat("no method '", method,
                                          "'; the methods are ",
                                          absl::StrJoin(MethodNames(), ", ")));
}

absl::StatusOr<bool> JsonRpc::IsServerStreaming(
    absl::string_view method) const {
  absl::StatusOr<const Entry*> entry = Find(method);
  if (!entry.ok()) return entry.status();
  return (*entry)->stream != nullptr;
}

absl::StatusOr<std::string> JsonRpc::Unary(absl::string_view method,
                                           absl::string_view body,
                                           const CallOrigin& origin) const {
  absl::StatusOr<const Entry*> entry = Find(method);
  if (!entry.ok()) return entry.status();
  if ((*entry)->unary == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(method, " is a server-streaming method"));
  }
  return (*entry)->unary(*stub_, body, origin);
}

std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> JsonRpc::ReadSliceBytes(
    grpc::ClientContext* context, const v1::ReadSliceRequest& req) const {
  // What the generated Stub::ReadSlice does, with another message type.
  return std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>>(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          channel_.get(), read_slice_, context, req));
}

absl::StatusOr<v1::GetHeatmapResponse> JsonRpc::GetHeatmap(
    absl::string_view body, const CallOrigin& origin,
    v1::HeatmapMode* mode) const {
  return CallWithJson<v1::GetHeatmapRequest, v1::GetHeatmapResponse>(
      *stub_, "GetHeatmap", &Stub::GetHeatmap, body, origin,
      [mode](const v1::GetHeatmapRequest& req) { *mode = req.mode(); });
}

absl::StatusOr<std::unique_ptr<JsonStream>> JsonRpc::Stream(
    absl::string_view method, absl::string_view body,
    const CallOrigin& origin) const {
  absl::StatusOr<const Entry*> entry = Find(method);
  if (!entry.ok()) return entry.status();
  if ((*entry)->stream == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(method, " is a unary method"));
  }
  return (*entry)->stream(*stub_, body, origin);
}

}  // namespace tensormorph
