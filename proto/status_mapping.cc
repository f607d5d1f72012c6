#include "proto/status_mapping.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/util/error_reason.h"
#include "core/util/utf8.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"

namespace tensormorph {
namespace {

// The message travels in a trailer, and a peer refuses metadata past 8 KiB
// (percent-encoding can triple non-ASCII bytes; the details repeat the
// message, base64 adds a third): a longer message, such as a parser quoting
// a megabyte of a hostile file, would turn a precise error into
// RESOURCE_EXHAUSTED. Cut it, on a UTF-8 boundary, and say so.
std::string CutMessage(absl::string_view message) {
  constexpr size_t kMaxMessageBytes = 2048;
  if (message.size() <= kMaxMessageBytes) return std::string(message);
  size_t cut = kMaxMessageBytes;
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80)
    --cut;
  return absl::StrCat(message.substr(0, cut), " ... (", message.size() - cut,
                      " more bytes of this message cut)");
}

// proto3 strings must be UTF-8; metadata quotes names out of files.
std::string Utf8(absl::string_view s) {
  return IsValidUtf8(s) ? std::string(s) : EscapeUtf8(s);
}

std::string Details(const absl::Status& status, const std::string& message) {
  google::rpc::ErrorInfo info;
  info.set_reason(Utf8(ReasonNameOf(status)));
  info.set_domain(std::string(kErrorDomain));
  for (const auto& [key, value] : ReasonMetadataOf(status)) {
    (*info.mutable_metadata())[Utf8(key)] = Utf8(value);
  }
  google::rpc::Status details;
  details.set_code(static_cast<int>(status.code()));
  details.set_message(Utf8(message));
  details.add_details()->PackFrom(info);
  return details.SerializeAsString();
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string message = CutMessage(status.message());
  std::string details = Details(status, message);
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::move(message), std::move(details));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()),
                   status.error_message());
  google::rpc::Status details;
  if (status.error_details().empty() ||
      !details.ParseFromString(status.error_details())) {
    return out;  // ReasonNameOf gives the code's generic reason
  }
  for (const google::protobuf::Any& any : details.details()) {
    google::rpc::ErrorInfo info;
    if (!any.UnpackTo(&info)) continue;
    ErrorMetadata metadata(info.metadata().begin(), info.metadata().end());
    // The code's generic reason is left implicit (ReasonNameOf gives it), so
    // a status restored from the wire equals one made on this side with the
    // same code and message.
    if (metadata.empty() &&
        info.reason() == InfoOf(GenericReason(out.code())).name) {
      return out;
    }
    // A map's order is not kept on the wire: sort for a stable reading.
    std::sort(metadata.begin(), metadata.end());
    return WithReasonName(std::move(out), info.reason(), std::move(metadata));
  }
  return out;
}

static_assert(static_cast<int>(grpc::StatusCode::DATA_LOSS) ==
              static_cast<int>(absl::StatusCode::kDataLoss));
static_assert(static_cast<int>(grpc::StatusCode::UNAUTHENTICATED) ==
              static_cast<int>(absl::StatusCode::kUnauthenticated));

}  // namespace tensormorph
