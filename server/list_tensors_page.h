// ListTensors' pages (AIP-158): which tensors one call lists, and the token
// that resumes the listing after them. Paging is stateless, as
// ListCheckpoints' is: a token is the last name a page listed (the list is
// sorted by name) beside a fingerprint of the request it belongs to, so the
// server keeps nothing between pages and a token brought to another
// checkpoint, filter or parts is refused rather than read as a position.
#ifndef TENSORMORPH_SERVER_LIST_TENSORS_PAGE_H_
#define TENSORMORPH_SERVER_LIST_TENSORS_PAGE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/format/checkpoint.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

// The messages of one ListTensors call on `ckpt` (opened from
// request.checkpoint()): the page's tensors in name order, each with
// list_count the page's size, then, when more remain, a message with an
// empty name carrying only next_page_token. page_size 0 lists every tensor
// (no token); a page_size above `max_page_size` is lowered to it.
// Errors: INVALID_ARGUMENT for a negative page_size; INVALID_ARGUMENT with
// reason PAGE_TOKEN_INVALID for a token that does not parse or was given for
// another checkpoint, filter or parts; INTERNAL naming a tensor whose entry
// cannot cross the wire (CheckWireSafe).
absl::StatusOr<std::vector<v1::TensorInfo>> ListTensorsPage(
    const Checkpoint& ckpt, const v1::ListTensorsRequest& request,
    int64_t max_page_size);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_LIST_TENSORS_PAGE_H_
