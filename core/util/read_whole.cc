#include "core/util/read_whole.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tensormorph {
namespace {

// "1 GiB", "64 KiB", "100 bytes": the largest unit that divides n.
std::string BytesText(size_t n) {
  for (const auto& [shift, unit] :
       {std::pair{30, " GiB"}, std::pair{20, " MiB"}, std::pair{10, " KiB"}}) {
    const size_t one = size_t{1} << shift;
    if (n >= one && n % one == 0) return absl::StrCat(n >> shift, unit);
  }
  return absl::StrCat(n, " bytes");
}

absl::Status TooBig(absl::string_view name, size_t limit) {
  return absl::InvalidArgumentError(
      absl::StrCat(name, " holds more than ", BytesText(limit)));
}

}  // namespace

absl::StatusOr<std::string> ReadWhole(std::istream& in, absl::string_view name,
                                      size_t limit, size_t size_hint) {
  if (size_hint > limit) return TooBig(name, limit);
  std::string text;
  text.reserve(size_hint);
  char block[1 << 16];
  while (in.read(block, sizeof block) || in.gcount() > 0) {
    const size_t n = static_cast<size_t>(in.gcount());
    if (n > limit - text.size()) return TooBig(name, limit);
    text.append(block, n);
  }
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", name, " to its end"));
  }
  return text;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                          absl::string_view name,
                                          size_t limit) {
  std::error_code error;
  const std::filesystem::file_status status =
      std::filesystem::status(path, error);
  if (!error && std::filesystem::is_directory(status)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " is a directory, not a file"));
  }
  size_t size = 0;  // a regular file's; 0 for a pipe or a device
  if (!error && std::filesystem::is_regular_file(status)) {
    const std::uintmax_t bytes = std::filesystem::file_size(path, error);
    if (!error) size = static_cast<size_t>(bytes);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    // The stat's reason where it failed (no such file), else the open's:
    // ifstream keeps none, so open(2) is asked (permission, a loop).
    std::string why = error ? error.message() : "";
    if (why.empty()) {
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      why = fd < 0 ? std::generic_category().message(errno) : "it went away";
      if (fd >= 0) ::close(fd);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", name, ": ", why));
  }
  return ReadWhole(in, name, limit, size);
}

}  // namespace tensormorph
