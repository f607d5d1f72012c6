// A local file as an ObjectReader: today's MappedFile, read without copies.
#ifndef TENSORMORPH_CORE_IO_LOCAL_OBJECT_H_
#define TENSORMORPH_CORE_IO_LOCAL_OBJECT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/io/file_access.h"
#include "core/io/mapped_file.h"
#include "core/io/object_reader.h"

namespace tensormorph {

// The identity is the mapping's FileIdentity. A mapping keeps the bytes it
// mapped, so a file replaced by rename after open is read as it was; one
// truncated or rewritten in place raises SIGBUS on access, which callers
// already guard (fault_guard.h), as for any mapped checkpoint.
// Thread safety: immutable; thread-safe.
class LocalObjectReader final : public ObjectReader {
 public:
  // Maps `path` through `access`. Errors: those of MappedFile::Open.
  static absl::StatusOr<std::shared_ptr<const LocalObjectReader>> Open(
      const std::string& path, const FileAccess& access);

  const std::string& display() const override { return file_->path(); }
  absl::Status ReadAt(uint64_t offset, uint64_t length,
                      char* out) const override;
  // The mapping itself: `scratch` is not used.
  absl::StatusOr<absl::Span<const uint8_t>> Read(uint64_t offset,
                                                 uint64_t length,
                                                 char* scratch) const override;
  const std::shared_ptr<const MappedFile>& file() const { return file_; }

 private:
  explicit LocalObjectReader(std::shared_ptr<const MappedFile> file);

  std::shared_ptr<const MappedFile> file_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_LOCAL_OBJECT_H_
