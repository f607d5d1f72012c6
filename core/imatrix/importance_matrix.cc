#include "core/imatrix/importance_matrix.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/format/gguf_reader.h"
#include "core/imatrix/imatrix_forms.h"
#include "core/io/mapped_file.h"
#include "core/util/error_reason.h"
#include "core/util/status_macros.h"

namespace tensormorph {

absl::Status ImatrixError(absl::string_view label, absl::string_view rule,
                          absl::string_view what) {
  return HeaderInvalidError(absl::StrCat("importance matrix '", label,
                                         "': ", what, " (rule ", rule, ")"),
                            label, rule);
}

std::vector<int64_t> ImatrixEntry::ExpertsNeverReached() const {
  std::vector<int64_t> never;
  if (experts < 1 || static_cast<int64_t>(counts.size()) != experts) {
    return never;
  }
  for (int64_t e = 0; e < experts; ++e) {
    if (counts[static_cast<size_t>(e)] == 0) never.push_back(e);
  }
  return never;
}

absl::Span<const float> ImatrixEntry::Weights(int64_t e,
                                              int64_t experts_of_tensor) const {
  const size_t per = weights.size() / static_cast<size_t>(experts_of_tensor);
  return absl::MakeConstSpan(weights).subspan(static_cast<size_t>(e) * per,
                                              per);
}

ImportanceMatrix::ImportanceMatrix(Contents c)
    : form_(c.form),
      chunk_count_(c.chunk_count),
      chunk_size_(c.chunk_size),
      datasets_(std::move(c.datasets)),
      entries_(std::move(c.entries)) {
  std::sort(entries_.begin(), entries_.end(),
            [](const ImatrixEntry& a, const ImatrixEntry& b) {
              return a.name < b.name;
            });
}

const ImatrixEntry* ImportanceMatrix::Find(absl::string_view name) const {
  auto it = std::lower_bound(
      entries_.begin(), entries_.end(), name,
      [](const ImatrixEntry& e, absl::string_view n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

absl::StatusOr<std::shared_ptr<const ImportanceMatrix>> ImportanceMatrix::Parse(
    absl::Span<const uint8_t> bytes, absl::string_view label) {
  absl::StatusOr<Contents> c = LooksLikeGguf(bytes)
                                   ? ParseGgufImatrix(bytes, label)
                                   : ParseLegacyImatrix(bytes, label);
  if (!c.ok()) return c.status();
  if (c->entries.empty()) {
    return ImatrixError(label, "entries", "no entries");
  }
  return std::make_shared<const ImportanceMatrix>(*std::move(c));
}

absl::StatusOr<std::shared_ptr<const ImportanceMatrix>> ImportanceMatrix::Open(
    const std::string& path, const FileAccess& access) {
  // Read with read(2), not mapped: the parse allocates as it goes, which a
  // SIGBUS from a file truncated under a mapping could not unwind; a file
  // that changes while read is refused instead.
  TM_ASSIGN_OR_RETURN(std::string bytes,
                      ReadWholeFile(path, kMaxImatrixFileBytes, access));
  return Parse(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()),
                          bytes.size()),
      path);
}

}  // namespace tensormorph
