#include "tests/oracle/gguf_listing.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tensormorph::testing {
namespace {

// A cursor over the file that fails (ok = false) instead of running past it.
struct Cursor {
  const std::string& b;
  uint64_t at = 0;
  bool ok = true;

  template <typename T>
  T Get() {
    T v{};
    if (at + sizeof(T) > b.size()) {
      ok = false;
      return v;
    }
    std::memcpy(&v, b.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  std::string Str() {
    const uint64_t n = Get<uint64_t>();
    if (!ok || n > b.size() - at) {
      ok = false;
      return "";
    }
    std::string s = b.substr(at, n);
    at += n;
    return s;
  }
  // Skips a metadata value of GGUF type `t` (reading general.alignment).
  void SkipValue(uint32_t t, uint64_t* u32_out = nullptr) {
    static constexpr uint64_t kSize[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (t == 8) {
      Str();
    } else if (t == 9) {
      const uint32_t et = Get<uint32_t>();
      const uint64_t n = Get<uint64_t>();
      for (uint64_t i = 0; ok && i < n; ++i) SkipValue(et);
    } else if (t < 13) {
      if (u32_out != nullptr && t == 4)
        *u32_out = Get<uint32_t>();
      else
        at += kSize[t];
      ok &= at <= b.size();
    } else {
      ok = false;
    }
  }
};

}  // namespace

absl::StatusOr<GgufListing> ListGguf(const std::string& path,
                                     int64_t (*row_bytes)(uint32_t type,
                                                          int64_t ne0)) {
  GgufListing out;
  std::ifstream in(path, std::ios::binary);
  out.bytes.assign(std::istreambuf_iterator<char>(in),
                   std::istreambuf_iterator<char>());
  Cursor c{out.bytes};
  if (c.Get<uint32_t>() != 0x46554747 || c.Get<uint32_t>() != 3) {
    return absl::DataLossError(absl::StrCat(path, ": not a GGUF v3 file"));
  }
  const uint64_t n_tensors = c.Get<uint64_t>();
  const uint64_t n_kv = c.Get<uint64_t>();
  uint64_t alignment = 32;
  for (uint64_t i = 0; c.ok && i < n_kv; ++i) {
    const std::string key = c.Str();
    const uint32_t t = c.Get<uint32_t>();
    c.SkipValue(t, key == "general.alignment" ? &alignment : nullptr);
  }
  for (uint64_t i = 0; c.ok && i < n_tensors; ++i) {
    GgufListedTensor t;
    t.name = c.Str();
    const uint32_t dims = c.Get<uint32_t>();
    for (uint32_t d = 0; c.ok && d < dims && d < 8; ++d) {
      t.ne.push_back(c.Get<int64_t>());
    }
    t.type = c.Get<uint32_t>();
    t.offset = c.Get<uint64_t>();
    out.tensors.push_back(std::move(t));
  }
  if (!c.ok || alignment == 0) {
    return absl::DataLossError(absl::StrCat(path, ": truncated GGUF header"));
  }
  const uint64_t data_start = (c.at + alignment - 1) / alignment * alignment;
  for (GgufListedTensor& t : out.tensors) {
    int64_t rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
    const int64_t rb = row_bytes(t.type, t.ne.empty() ? 1 : t.ne[0]);
    t.offset += data_start;
    t.nbytes = static_cast<uint64_t>(rows * rb);
    if (rb <= 0 || t.offset + t.nbytes > out.bytes.size()) {
      return absl::DataLossError(
          absl::StrCat(path, ": tensor '", t.name, "' lies outside the file"));
    }
  }
  return out;
}

}  // namespace tensormorph::testing
