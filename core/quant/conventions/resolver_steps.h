// The steps the convention resolvers share (GPTQ, AWQ, bitsandbytes...):
// recognising each module by a stored tensor's name, resolving it with its
// outcome recorded as a problem in a lenient open (Context::Tolerate), and,
// for the packed integer formats grouped along the input dimension (GPTQ,
// AWQ), the encoding's common frame. What differs (the packing, the zero
// points' layout, act-order) stays in each resolver's file.
#ifndef TENSORMORPH_CORE_QUANT_CONVENTIONS_RESOLVER_STEPS_H_
#define TENSORMORPH_CORE_QUANT_CONVENTIONS_RESOLVER_STEPS_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/quant/affine_encoding.h"
#include "core/quant/conventions/context.h"
#include "core/tensor.h"

namespace tensormorph::conventions {

// For each stored tensor in order, and each of `suffixes` its name ends
// with: `resolve(t, stem, suffix)`, where `stem` is the name without the
// suffix, which returns the module's status; that goes through
// ctx.Tolerate under the logical tensor's name, stem + `logical_suffix`.
// Errors: the first status Tolerate does not absorb (a strict open).
template <typename Resolve>
absl::Status ResolveEach(Context& ctx,
                         std::initializer_list<absl::string_view> suffixes,
                         absl::string_view logical_suffix, Resolve resolve) {
  for (const StoredTensor& t : ctx.stored()) {
    for (const absl::string_view suffix : suffixes) {
      if (!absl::EndsWith(t.name, suffix)) continue;
      const std::string stem = t.name.substr(0, t.name.size() - suffix.size());
      absl::Status s = ctx.Tolerate(resolve(t, stem, suffix),
                                    absl::StrCat(stem, logical_suffix));
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// The frame of a packed integer encoding grouped along the input dimension
// (GPTQ, AWQ): logical [out, in], groups of `group_size` along in, parts
// qweight, qzeros and scales (in that order). The caller sets the codes',
// zeros' and scales' views, has_zero and anything of its own.
AffineParams GroupedAlongIn(const PackedInt& packed, int64_t out, int64_t in,
                            int64_t group_size);

// The info of an int<bits> grid grouped along in: scheme "int4 symmetric"
// or "int4 asymmetric", granularity "group G along in" (", act-order" when
// the groups follow g_idx).
EncodingInfo GroupedIntInfo(std::string convention, int bits, bool symmetric,
                            int64_t group_size, bool act_order);

}  // namespace tensormorph::conventions

#endif  // TENSORMORPH_CORE_QUANT_CONVENTIONS_RESOLVER_STEPS_H_
