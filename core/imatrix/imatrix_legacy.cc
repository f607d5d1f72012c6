// The legacy .dat form of llama-imatrix (save_imatrix_legacy), read as
// llama-quantize's load_legacy_imatrix reads it, with every length bounded
// by the bytes that remain.
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/imatrix/imatrix_forms.h"
#include "core/io/byte_reader.h"
#include "core/util/checked_math.h"
#include "core/util/utf8.h"

namespace tensormorph {
namespace {

// The smallest entry: name length, a 1-byte name, ncall, nval, one value.
constexpr uint64_t kMinEntryBytes = 4 + 1 + 4 + 4 + 4;

class LegacyParser {
 public:
  LegacyParser(absl::Span<const uint8_t> bytes, absl::string_view label)
      : r_(bytes), label_(label) {}

  absl::StatusOr<ImportanceMatrix::Contents> Run() {
    ImportanceMatrix::Contents c;
    c.form = ImatrixForm::kLegacy;
    int32_t n = 0;
    if (!r_.Read(&n)) return Fail("truncated", "no entry count");
    if (n < 1 || static_cast<uint64_t>(n) > r_.remaining() / kMinEntryBytes) {
      return Fail("entry_count",
                  absl::StrCat("entry count ", n, " is not between 1 and ",
                               r_.remaining() / kMinEntryBytes,
                               " (what the remaining bytes can hold)"));
    }
    absl::flat_hash_set<std::string> seen;
    for (int32_t i = 0; i < n; ++i) {
      absl::StatusOr<ImatrixEntry> e = Entry(i);
      if (!e.ok()) return e.status();
      if (!seen.insert(e->name).second) {
        return Fail("duplicate_name",
                    absl::StrCat("entry ", i, " '", e->name,
                                 "' repeats an earlier entry's name"));
      }
      c.entries.push_back(*std::move(e));
    }
    absl::Status trailer = Trailer(&c);
    if (!trailer.ok()) return trailer;
    return c;
  }

 private:
  absl::Status Fail(absl::string_view rule, absl::string_view what) {
    return ImatrixError(label_, rule,
                        absl::StrCat(what, " at byte ", r_.offset()));
  }

  absl::StatusOr<ImatrixEntry> Entry(int32_t i) {
    int32_t len = 0;
    if (!r_.Read(&len)) return Fail("truncated", "no name length");
    if (len < 1 || len > kMaxImatrixNameBytes) {
      return Fail("name_length",
                  absl::StrCat("entry ", i, ": name length ", len,
                               " is not between 1 and ", kMaxImatrixNameBytes));
    }
    absl::string_view raw;
    if (!r_.ReadBytes(static_cast<uint64_t>(len), &raw)) {
      return Fail("truncated", absl::StrCat("entry ", i, ": name of ", len,
                                            " bytes past the end"));
    }
    ImatrixEntry e;
    e.name = EscapeUtf8(raw);
    int32_t ncall = 0, nval = 0;
    if (!r_.Read(&ncall) || !r_.Read(&nval)) {
      return Fail("truncated",
                  absl::StrCat("entry '", e.name, "': no ncall and nval"));
    }
    if (ncall < 0) {
      return Fail("ncall", absl::StrCat("entry '", e.name, "': ncall ", ncall,
                                        " is negative"));
    }
    const std::optional<uint64_t> bytes =
        CheckedMul<uint64_t>(static_cast<uint64_t>(nval < 0 ? 0 : nval), 4);
    if (nval < 1 || !bytes || *bytes > r_.remaining()) {
      return Fail("nval",
                  absl::StrCat("entry '", e.name, "': nval ", nval,
                               " is not between 1 and ", r_.remaining() / 4,
                               " (the values the file still holds)"));
    }
    absl::Status values = Values(static_cast<size_t>(nval), ncall, &e);
    if (!values.ok()) return values;
    e.columns = nval;
    e.experts = 1;
    e.counts = {static_cast<double>(ncall)};
    e.chunks = ncall;
    return e;
  }

  // llama-quantize's weights: each value / ncall in float (ncall 0: as is).
  absl::Status Values(size_t nval, int32_t ncall, ImatrixEntry* e) {
    absl::string_view raw;
    r_.ReadBytes(nval * 4, &raw);  // bounded by the caller
    e->weights.resize(nval);
    std::memcpy(e->weights.data(), raw.data(), nval * 4);
    for (size_t j = 0; j < nval; ++j) {
      const float v = e->weights[j];
      if (!std::isfinite(v) || v < 0) {
        return Fail("value",
                    absl::StrCat("entry '", e->name, "': value ", j, " is ", v,
                                 ", not a finite sum of squares"));
      }
      if (ncall > 0) e->weights[j] = v / static_cast<float>(ncall);
    }
    return absl::OkStatus();
  }

  // Optional: the chunk count and the dataset's name, then nothing.
  absl::Status Trailer(ImportanceMatrix::Contents* c) {
    if (r_.remaining() == 0) return absl::OkStatus();
    int32_t chunks = 0, len = 0;
    if (!r_.Read(&chunks) || !r_.Read(&len)) {
      return Fail("trailer", "a trailer too short for chunk count and length");
    }
    if (chunks < 0) {
      return Fail("trailer",
                  absl::StrCat("chunk count ", chunks, " is negative"));
    }
    if (len < 0 || static_cast<uint64_t>(len) != r_.remaining()) {
      return Fail("trailer", absl::StrCat("dataset name length ", len, " but ",
                                          r_.remaining(), " bytes remain"));
    }
    absl::string_view name;
    r_.ReadBytes(static_cast<uint64_t>(len), &name);
    c->chunk_count = chunks;
    c->datasets.push_back(EscapeUtf8(name));
    return absl::OkStatus();
  }

  ByteReader r_;
  absl::string_view label_;
};

}  // namespace

absl::StatusOr<ImportanceMatrix::Contents> ParseLegacyImatrix(
    absl::Span<const uint8_t> bytes, absl::string_view label) {
  return LegacyParser(bytes, label).Run();
}

}  // namespace tensormorph
