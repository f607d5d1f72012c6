#include "core/quant/encoding.h"

namespace tensormorph {

absl::Status Encoding::GroupIds(absl::Span<const int64_t> indices,
                                int64_t* out) const {
  ScalarInfo s;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (absl::Status st = Inspect(indices[i], &s); !st.ok()) return st;
    out[i] = GroupIdOf(s);
  }
  return absl::OkStatus();
}

absl::Status Encoding::AffineCodeRuns(int64_t, int64_t, AffineCodes*) const {
  return absl::UnimplementedError("not codes times a per-run scale");
}

absl::Status Encoding::CodeLevelRuns(int64_t, int64_t, LevelCodes*) const {
  return absl::UnimplementedError("no codes with a level table per run");
}

absl::Status Encoding::RawCodes(int64_t first, int64_t count,
                                uint8_t* out) const {
  ScalarInfo s;
  for (int64_t i = 0; i < count; ++i) {
    if (absl::Status st = Inspect(first + i, &s); !st.ok()) return st;
    out[i] = static_cast<uint8_t>(s.code_bits_value);
  }
  return absl::OkStatus();
}

absl::Status Encoding::DecodeRuns(int64_t first, int64_t count, float* values,
                                  std::vector<QuantRun>* runs) const {
  runs->clear();
  for (int64_t i = 0; i < count; ++i) {
    ScalarInfo s;
    if (absl::Status st = Inspect(first + i, &s); !st.ok()) return st;
    values[i] = s.value;
    runs->push_back({1, GroupIdOf(s), s.step_below, s.step_above, s.range_min,
                     s.range_max});
  }
  return absl::OkStatus();
}

absl::Status Encoding::DecodeDetailed(int64_t first, int64_t count,
                                      ElementQuant* out) const {
  thread_local std::vector<float> values;
  thread_local std::vector<QuantRun> runs;
  values.resize(static_cast<size_t>(count));
  if (absl::Status s = DecodeRuns(first, count, values.data(), &runs);
      !s.ok()) {
    return s;
  }
  int64_t i = 0;
  for (const QuantRun& r : runs) {
    for (const int64_t end = i + r.count; i < end; ++i) {
      out[i] = {values[i],   r.step_below, r.step_above,
                r.range_min, r.range_max,  r.group};
    }
  }
  return absl::OkStatus();
}

}  // namespace tensormorph
