#include "server/list_tensors_page.h"

#include <fnmatch.h>

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/util/error_reason.h"
#include "core/util/status_macros.h"
#include "core/util/utf8.h"
#include "server/proto_convert.h"
#include "server/wire_check.h"

namespace tensormorph {
namespace {

constexpr absl::string_view kTokenVersion = "lt1";

// What a token belongs to: FNV-1a (64 bits) over the checkpoint, filter and
// parts as the request spells them. Stable across processes and builds
// (absl::Hash is not), so a token outlives a server restart. Not a secret:
// it only keeps a token from being read as a position in another listing.
uint64_t RequestFingerprint(const v1::ListTensorsRequest& r) {
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](absl::string_view bytes) {
    for (const char c : bytes) {
      h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
    }
    h = (h ^ 0xff) * 1099511628211ull;  // ends the field: "ab"+"c" != "a"+"bc"
  };
  mix(r.checkpoint());
  mix(r.filter());
  mix(r.parts() ? "parts" : "tensors");
  return h;
}

std::string EncodeToken(const v1::ListTensorsRequest& r,
                        const std::string& last_name) {
  return absl::WebSafeBase64Escape(absl::StrCat(
      kTokenVersion, "\n", absl::Hex(RequestFingerprint(r)), "\n", last_name));
}

absl::Status TokenInvalid(const v1::ListTensorsRequest& r,
                          absl::string_view why) {
  return WithReason(
      absl::InvalidArgumentError(absl::StrCat(
          "page_token '", EscapeUtf8(r.page_token().substr(0, 64)), "' ", why,
          ": pass a next_page_token as ListTensors gave it, with the same "
          "checkpoint, filter and parts")),
      ErrorReason::kPageTokenInvalid);
}

// The name the page resumes after; empty for the first page.
absl::StatusOr<std::string> DecodeToken(const v1::ListTensorsRequest& r) {
  if (r.page_token().empty()) return std::string();
  std::string text;
  if (!absl::WebSafeBase64Unescape(r.page_token(), &text)) {
    return TokenInvalid(r, "is not a token ListTensors gave");
  }
  std::vector<std::string> parts =
      absl::StrSplit(text, absl::MaxSplits('\n', 2));
  uint64_t fingerprint = 0;
  if (parts.size() != 3 || parts[0] != kTokenVersion ||
      !absl::SimpleHexAtoi(parts[1], &fingerprint) || parts[2].empty()) {
    return TokenInvalid(r, "is not a token ListTensors gave");
  }
  if (fingerprint != RequestFingerprint(r)) {
    return TokenInvalid(r, "was given for another checkpoint, filter or parts");
  }
  return parts[2];
}

// The tensors listed, in name order: the logical tensors, or every stored
// part.
std::vector<const LogicalTensor*> Listed(const Checkpoint& ckpt, bool parts) {
  std::vector<const LogicalTensor*> listed;
  if (parts) {
    listed = ckpt.parts();
    std::sort(listed.begin(), listed.end(),
              [](const LogicalTensor* a, const LogicalTensor* b) {
                return a->name < b->name;
              });
  } else {
    for (const LogicalTensor& t : ckpt.tensors()) listed.push_back(&t);
  }
  return listed;
}

}  // namespace

absl::StatusOr<std::vector<v1::TensorInfo>> ListTensorsPage(
    const Checkpoint& ckpt, const v1::ListTensorsRequest& request,
    int64_t max_page_size) {
  if (request.page_size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size must be >= 0, got ", request.page_size()));
  }
  TM_ASSIGN_OR_RETURN(const std::string after, DecodeToken(request));
  // AIP-158: a page_size past the cap is lowered to it, not refused; 0 is
  // the whole list, as v1 clients that send no page_size expect.
  const size_t page =
      request.page_size() == 0
          ? SIZE_MAX
          : static_cast<size_t>(std::max<int64_t>(
                1, std::min<int64_t>(request.page_size(), max_page_size)));
  std::vector<v1::TensorInfo> out;
  std::string last;  // as stored (a listed name may be escaped)
  bool more = false;
  for (const LogicalTensor* t : Listed(ckpt, request.parts())) {
    if (!after.empty() && t->name <= after) continue;
    if (!request.filter().empty() &&
        ::fnmatch(request.filter().c_str(), t->name.c_str(), 0) != 0) {
      continue;
    }
    if (out.size() == page) {
      more = true;
      break;
    }
    v1::TensorInfo& info = out.emplace_back();
    FillTensorInfo(ckpt, *t, &info);
    last = t->name;
    // gRPC would send an entry the client cannot parse, and the client
    // would take it for the stream's end: refuse the whole list instead.
    if (absl::Status wire = CheckWireSafe(info); !wire.ok()) {
      return absl::InternalError(absl::StrCat(
          "ListTensors of '", request.checkpoint(), "': the entry for tensor '",
          EscapeUtf8(t->name), "' cannot be sent: ", wire.message()));
    }
  }
  for (v1::TensorInfo& info : out) {
    info.set_list_count(static_cast<int64_t>(out.size()));
  }
  // The token is the page's own last message, never on a tensor's entry
  // (TensorInfo.next_page_token says why).
  if (more) out.emplace_back().set_next_page_token(EncodeToken(request, last));
  return out;
}

}  // namespace tensormorph
