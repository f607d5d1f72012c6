#include "core/compare/dominance.h"

#include <cctype>
#include <cmath>

namespace tensormorph {

std::vector<std::vector<int>> DominatedBy(
    const std::vector<SizeError>& points) {
  std::vector<std::vector<int>> out(points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    const SizeError& a = points[i];
    if (std::isnan(a.error)) continue;
    for (size_t j = 0; j < points.size(); ++j) {
      const SizeError& b = points[j];
      if (j == i || std::isnan(b.error)) continue;
      const bool no_worse = b.bytes <= a.bytes && b.error <= a.error;
      const bool better = b.bytes < a.bytes || b.error < a.error;
      if (no_worse && better) out[i].push_back(static_cast<int>(j));
    }
  }
  return out;
}

namespace {

// "P.N" when `name` holds `prefix` followed by digits and a dot, at its
// start or after a dot; "" otherwise.
std::string NumberedAfter(absl::string_view name, absl::string_view prefix) {
  size_t at = 0;
  while ((at = name.find(prefix, at)) != absl::string_view::npos) {
    if (at == 0 || name[at - 1] == '.') {
      size_t end = at + prefix.size();
      while (end < name.size() &&
             std::isdigit(static_cast<unsigned char>(name[end]))) {
        ++end;
      }
      if (end > at + prefix.size() && end < name.size() && name[end] == '.') {
        return std::string(name.substr(at, end - at));
      }
    }
    at += prefix.size();
  }
  return "";
}

}  // namespace

std::string LayerOf(absl::string_view tensor_name) {
  if (std::string blk = NumberedAfter(tensor_name, "blk."); !blk.empty()) {
    return blk;
  }
  return NumberedAfter(tensor_name, "layers.");
}

}  // namespace tensormorph
