#include "server/imatrix_lookup.h"

#include "absl/strings/str_cat.h"
#include "core/util/error_reason.h"
#include "core/util/status_macros.h"

namespace tensormorph {

absl::StatusOr<std::shared_ptr<const ImportanceMatrix>> OpenImportanceMatrix(
    const PathSandbox& sandbox, absl::string_view requested,
    absl::string_view field, struct stat* file) {
  if (requested.empty()) {
    return RequestFieldError(field, absl::StrCat(field,
                                                 ": no importance matrix "
                                                 "was named"));
  }
  // Named as what it is, in every refusal: no checkpoint (so NOT_FOUND
  // {path}, not CHECKPOINT_NOT_FOUND).
  TM_ASSIGN_OR_RETURN(const PathSandbox::Resolved resolved,
                      sandbox.ResolveAndStat(requested, kImportanceMatrixNoun));
  if (file != nullptr) *file = resolved.st;
  return ImportanceMatrix::Open(resolved.path, *sandbox.access());
}

void FillImportanceMatrix(const ImportanceMatrix& m, const std::string& path,
                          const struct stat& file,
                          v1::GetImportanceMatrixResponse* out) {
  out->set_path(path);
  if (file.st_ino != 0) {
    out->mutable_identity()->set_device(static_cast<uint64_t>(file.st_dev));
    out->mutable_identity()->set_inode(static_cast<uint64_t>(file.st_ino));
  }
  out->set_form(m.form() == ImatrixForm::kGguf ? v1::IMATRIX_FORM_GGUF
                                               : v1::IMATRIX_FORM_LEGACY);
  out->set_chunk_count(m.chunk_count());
  out->set_chunk_size(m.chunk_size());
  for (const std::string& d : m.datasets()) out->add_datasets(d);
  for (const ImatrixEntry& e : m.entries()) {
    v1::ImatrixEntryInfo* o = out->add_entries();
    o->set_name(e.name);
    o->set_columns(e.columns);
    o->set_experts(e.experts);
    for (double c : e.counts) o->add_counts(c);
    o->set_chunks(e.chunks);
    if (m.form() == ImatrixForm::kGguf) {
      for (int64_t x : e.ExpertsNeverReached()) o->add_experts_never_reached(x);
    }
    o->set_has_in_sum(e.has_in_sum);
  }
}

v1::ImatrixUse ImatrixUseToProto(ImatrixUse use) {
  switch (use) {
    case ImatrixUse::kNone:
      return v1::IMATRIX_USE_UNSPECIFIED;
    case ImatrixUse::kWeighted:
      return v1::IMATRIX_USE_WEIGHTED;
    case ImatrixUse::kMissing:
      return v1::IMATRIX_USE_MISSING;
    case ImatrixUse::kMismatch:
      return v1::IMATRIX_USE_MISMATCH;
  }
  return v1::IMATRIX_USE_UNSPECIFIED;
}

}  // namespace tensormorph
