#include "core/format/safetensors_fast_header.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "core/format/json_header.h"
#include "nlohmann/json.hpp"

namespace tensormorph {
namespace {

using nlohmann::json;

// nlohmann's SAX interface. Every handler returns false, which stops the
// parse, at the first thing outside the usual shape.
class HeaderSax : public JsonSaxTypes {
 public:
  HeaderSax(size_t max_rank, uint64_t max_extent, size_t max_name_bytes,
            SafetensorsHeaderEntries* out)
      : max_rank_(max_rank),
        max_extent_(max_extent),
        max_name_bytes_(max_name_bytes),
        out_(out) {}

  bool start_object(std::size_t) {
    if (depth_ == 0) {
      depth_ = 1;
      return true;
    }
    if (depth_ != 1 || !value_pending_) return false;
    value_pending_ = false;
    depth_ = 2;
    if (in_metadata_) return true;
    out_->entries.emplace_back();
    out_->entries.back().tensor.name = std::move(name_);
    seen_ = 0;
    return true;
  }

  bool key(string_t& k) {
    if (depth_ == 1) {
      if (k == "__metadata__") {
        if (had_metadata_) return false;
        had_metadata_ = in_metadata_ = true;
      } else {
        if (k.empty() || k.size() > max_name_bytes_) return false;
        in_metadata_ = false;
        name_ = std::move(k);
      }
      value_pending_ = true;
      return true;
    }
    if (depth_ != 2) return false;
    if (in_metadata_) {
      meta_key_ = std::move(k);
      value_pending_ = true;
      return true;
    }
    if (k == "dtype") {
      field_ = kDtype;
    } else if (k == "shape") {
      field_ = kShape;
    } else if (k == "data_offsets") {
      field_ = kOffsets;
    } else {
      return false;
    }
    if ((seen_ & field_) != 0) return false;
    seen_ |= field_;
    return true;
  }

  bool string(string_t& v) {
    if (depth_ != 2) return false;
    if (in_metadata_) {
      if (!value_pending_) return false;
      value_pending_ = false;
      out_->metadata.emplace_back(std::move(meta_key_), std::move(v));
      return true;
    }
    if (field_ != kDtype) return false;
    const auto dtype = DTypeFromSafetensorsName(v);
    if (!dtype) return false;
    out_->entries.back().tensor.dtype = *dtype;
    return true;
  }

  bool start_array(std::size_t) {
    if (depth_ != 2 || in_metadata_ || (field_ != kShape && field_ != kOffsets))
      return false;
    depth_ = 3;
    count_ = 0;
    return true;
  }

  bool number_unsigned(number_unsigned_t v) {
    if (depth_ != 3 || v > max_extent_) return false;
    SafetensorsEntry& e = out_->entries.back();
    if (field_ == kShape) {
      if (e.tensor.shape.size() == max_rank_) return false;
      e.tensor.shape.push_back(static_cast<int64_t>(v));
    } else {
      if (count_ == 2) return false;
      (count_ == 0 ? e.begin : e.end) = v;
    }
    ++count_;
    return true;
  }
  bool number_integer(number_integer_t v) {
    return v >= 0 && number_unsigned(static_cast<number_unsigned_t>(v));
  }

  bool end_array() {
    if (depth_ != 3 || (field_ == kOffsets && count_ != 2)) return false;
    depth_ = 2;
    return true;
  }

  bool end_object() {
    if (depth_ == 2) {
      if (!in_metadata_ && seen_ != (kDtype | kShape | kOffsets)) return false;
      in_metadata_ = false;
    }
    --depth_;
    return true;
  }

  bool null() { return false; }
  bool boolean(bool) { return false; }
  bool number_float(number_float_t, const string_t&) { return false; }
  bool binary(binary_t&) { return false; }
  template <typename Exception>
  bool parse_error(std::size_t, const std::string&, const Exception&) {
    return false;
  }

 private:
  enum Field { kDtype = 1, kShape = 2, kOffsets = 4 };
  const size_t max_rank_;
  const uint64_t max_extent_;
  const size_t max_name_bytes_;
  SafetensorsHeaderEntries* out_;
  int depth_ = 0;               // 1 root, 2 a tensor or metadata, 3 an array
  bool value_pending_ = false;  // a key at depth 1 or in metadata awaits
  bool in_metadata_ = false, had_metadata_ = false;
  std::string name_, meta_key_;
  int field_ = 0, seen_ = 0;
  size_t count_ = 0;
};

template <typename Range, typename KeyOf>
bool Unique(const Range& items, KeyOf key) {
  absl::flat_hash_set<absl::string_view> seen;
  seen.reserve(items.size());
  for (const auto& item : items) {
    if (!seen.insert(key(item)).second) return false;
  }
  return true;
}

}  // namespace

std::optional<SafetensorsHeaderEntries> ReadSafetensorsHeaderFast(
    absl::string_view text, size_t max_rank, uint64_t max_extent,
    size_t max_name_bytes) {
  SafetensorsHeaderEntries out;
  HeaderSax sax(max_rank, max_extent, max_name_bytes, &out);
  if (!json::sax_parse(text.begin(), text.end(), &sax)) return std::nullopt;
  if (!Unique(out.entries,
              [](const SafetensorsEntry& e) -> absl::string_view {
                return e.tensor.name;
              }) ||
      !Unique(out.metadata,
              [](const auto& kv) -> absl::string_view { return kv.first; })) {
    return std::nullopt;
  }
  std::sort(out.metadata.begin(), out.metadata.end());
  return out;
}

}  // namespace tensormorph
