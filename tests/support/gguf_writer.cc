#include "tests/support/gguf_writer.h"

#include <cstring>

namespace tensormorph::testing {
namespace {

template <typename T>
std::string Raw(T v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(T));
}
std::string Str(const std::string& s) { return Raw<uint64_t>(s.size()) + s; }

}  // namespace

GgufValueBytes GgufU32(uint32_t v) { return {4, Raw(v)}; }
GgufValueBytes GgufU64(uint64_t v) { return {10, Raw(v)}; }
GgufValueBytes GgufI32(int32_t v) { return {5, Raw(v)}; }
GgufValueBytes GgufU16(uint16_t v) { return {2, Raw(v)}; }
GgufValueBytes GgufF32(float v) { return {6, Raw(v)}; }
GgufValueBytes GgufBool(bool v) { return {7, Raw<uint8_t>(v ? 1 : 0)}; }
GgufValueBytes GgufString(const std::string& s) { return {8, Str(s)}; }
GgufValueBytes GgufArray(uint32_t elem_type,
                         const std::vector<GgufValueBytes>& items) {
  std::string p = Raw(elem_type) + Raw<uint64_t>(items.size());
  for (const auto& it : items) {
    // Nested arrays carry their own type header inside the payload.
    p += it.payload;
  }
  return {9, p};
}

std::string BuildGguf(const GgufSpec& spec, GgufLayout* layout) {
  GgufLayout l;
  std::string out = spec.magic;
  l.after_magic = out.size();
  out += Raw(spec.version);
  l.after_version = out.size();
  out += Raw<uint64_t>(spec.tensor_count.value_or(spec.tensors.size()));
  out += Raw<uint64_t>(spec.kv_count.value_or(spec.kv.size()));
  l.after_counts = out.size();
  for (const auto& [key, value] : spec.kv) {
    out += Str(key) + Raw(value.type) + value.payload;
    l.after_kv.push_back(out.size());
  }
  const uint64_t align = spec.alignment;
  auto pad = [align](uint64_t n) { return (n + align - 1) / align * align; };
  uint64_t running = 0;
  for (const GgufTensorSpec& t : spec.tensors) {
    out += Str(t.name);
    out += Raw<uint32_t>(t.n_dims.value_or(static_cast<uint32_t>(t.ne.size())));
    for (int64_t d : t.ne) out += Raw(d);
    out += Raw(t.type_id);
    out += Raw<uint64_t>(t.offset.value_or(running));
    running += pad(t.data.size());
    l.after_tensor.push_back(out.size());
  }
  out.resize(pad(out.size()), '\0');
  l.data_offset = out.size();
  for (const GgufTensorSpec& t : spec.tensors) {
    out += t.data;
    out.resize(l.data_offset + pad(out.size() - l.data_offset), '\0');
  }
  l.file_size = out.size();
  if (layout != nullptr) *layout = l;
  return out;
}

}  // namespace tensormorph::testing
