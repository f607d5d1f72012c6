// Translations from core's types to the public API's messages.
#ifndef TENSORMORPH_SERVER_PROTO_CONVERT_H_
#define TENSORMORPH_SERVER_PROTO_CONVERT_H_

#include "core/format/checkpoint.h"
#include "core/quant/scalar_info.h"
#include "core/tensor.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {

void FillCheckpointInfo(const Checkpoint& ckpt, v1::GetCheckpointResponse* out);
void FillEncoding(const EncodingInfo& info, v1::Encoding* out);
void FillTensorInfo(const Checkpoint& ckpt, const LogicalTensor& tensor,
                    v1::TensorInfo* out);
void FillScalar(const ScalarInfo& s, v1::ScalarInspection* out);

}  // namespace tensormorph

#endif  // TENSORMORPH_SERVER_PROTO_CONVERT_H_
