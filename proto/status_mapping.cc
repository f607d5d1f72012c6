#include "proto/status_mapping.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace tensormorph {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // The message travels in a trailer, and a peer refuses metadata past 8 KiB
  // (percent-encoding can triple non-ASCII bytes): a longer message, such as
  // a parser quoting a megabyte of a hostile file, would turn a precise
  // error into RESOURCE_EXHAUSTED. Cut it, on a UTF-8 boundary, and say so.
  constexpr size_t kMaxMessageBytes = 2048;
  absl::string_view message = status.message();
  std::string text(message);
  if (message.size() > kMaxMessageBytes) {
    size_t cut = kMaxMessageBytes;
    while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80)
      --cut;
    text = absl::StrCat(message.substr(0, cut), " ... (", message.size() - cut,
                        " more bytes of this message cut)");
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::move(text));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

static_assert(static_cast<int>(grpc::StatusCode::DATA_LOSS) ==
              static_cast<int>(absl::StatusCode::kDataLoss));
static_assert(static_cast<int>(grpc::StatusCode::UNAUTHENTICATED) ==
              static_cast<int>(absl::StatusCode::kUnauthenticated));

}  // namespace tensormorph
