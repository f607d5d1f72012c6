#include "core/io/local_object.h"

#include <cstring>

namespace tensormorph {
namespace {

ObjectIdentity IdentityOf(const MappedFile& file) {
  ObjectIdentity id;
  id.size = file.size();
  id.file = file.identity();
  return id;
}

}  // namespace

LocalObjectReader::LocalObjectReader(std::shared_ptr<const MappedFile> file)
    : ObjectReader(IdentityOf(*file)), file_(std::move(file)) {}

absl::StatusOr<std::shared_ptr<const LocalObjectReader>>
LocalObjectReader::Open(const std::string& path, const FileAccess& access) {
  absl::StatusOr<std::shared_ptr<const MappedFile>> file =
      MappedFile::Open(path, access);
  if (!file.ok()) return file.status();
  return std::shared_ptr<const LocalObjectReader>(
      new LocalObjectReader(*std::move(file)));
}

absl::StatusOr<absl::Span<const uint8_t>> LocalObjectReader::Read(
    uint64_t offset, uint64_t length, char* /*scratch*/) const {
  if (absl::Status s = CheckRange(offset, length); !s.ok()) return s;
  return file_->bytes().subspan(offset, length);
}

absl::Status LocalObjectReader::ReadAt(uint64_t offset, uint64_t length,
                                       char* out) const {
  if (absl::Status s = CheckRange(offset, length); !s.ok()) return s;
  if (length > 0) std::memcpy(out, file_->bytes().data() + offset, length);
  return absl::OkStatus();
}

}  // namespace tensormorph
