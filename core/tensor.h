// A logical tensor: a tensor as the model sees it, whatever its storage.
#ifndef TENSORMORPH_CORE_TENSOR_H_
#define TENSORMORPH_CORE_TENSOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/quant/encoding.h"

namespace tensormorph {

struct LogicalTensor {
  std::string name;
  std::vector<int64_t> shape;  // numpy order
  int64_t num_elements = 0;
  std::shared_ptr<const Encoding> encoding;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_TENSOR_H_
