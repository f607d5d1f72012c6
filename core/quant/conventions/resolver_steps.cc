#include "core/quant/conventions/resolver_steps.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tensormorph::conventions {

AffineParams GroupedAlongIn(const PackedInt& packed, int64_t out, int64_t in,
                            int64_t group_size) {
  AffineParams p;
  p.shape = {out, in};
  p.rows = out;
  p.cols = in;
  p.groups = AffineParams::Groups::kGroup;
  p.group_size = group_size;
  p.parts = {packed.qweight, packed.qzeros, packed.scales};
  return p;
}

EncodingInfo GroupedIntInfo(std::string convention, int bits, bool symmetric,
                            int64_t group_size, bool act_order) {
  EncodingInfo info;
  info.convention = std::move(convention);
  info.scheme =
      absl::StrCat("int", bits, symmetric ? " symmetric" : " asymmetric");
  info.bits = bits;
  info.quantized = true;
  info.symmetric = symmetric;
  info.group_size = group_size;
  info.block_elems = group_size;
  info.act_order = act_order;
  info.axis = "in";
  info.granularity = absl::StrCat("group ", group_size, " along in",
                                  act_order ? ", act-order" : "");
  return info;
}

}  // namespace tensormorph::conventions
