#include "core/io/disk_block_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/io/unique_fd.h"

namespace tensormorph {
namespace {

constexpr char kMagic[8] = {'T', 'M', 'B', 'L', 'O', 'C', 'K', '1'};
constexpr char kTempPrefix[] = "tmp-";
constexpr uint64_t kMaxKeyBytes = 64 << 10;

struct Header {
  char magic[8];
  uint64_t key_bytes;
  uint64_t index;
  uint64_t data_bytes;
  uint64_t data_hash;
};
static_assert(sizeof(Header) == 40);

bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DiskBlockStore>> DiskBlockStore::Open(
    const std::string& dir, uint64_t cap_bytes) {
  if (dir.empty())
    return absl::InvalidArgumentError("block cache directory: empty");
  if (cap_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("block cache directory '", dir, "': a size cap of 0"));
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("block cache directory '", dir,
                                            "': ", std::strerror(errno)));
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return absl::InternalError(absl::StrCat("block cache directory '", dir,
                                            "': ", std::strerror(errno)));
  }
  auto store =
      std::unique_ptr<DiskBlockStore>(new DiskBlockStore(dir, cap_bytes));
  struct Found {
    std::string name;
    uint64_t size;
    int64_t mtime;
  };
  std::vector<Found> found;
  const int64_t now = ::time(nullptr);
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    struct stat st;
    if (::fstatat(::dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode)) {
      continue;
    }
    if (absl::StartsWith(name, kTempPrefix)) {
      // A writer that died before its rename; an hour is longer than any
      // block takes to write.
      if (now - st.st_mtime > 3600) ::unlinkat(::dirfd(d), name.c_str(), 0);
      continue;
    }
    if (!absl::EndsWith(name, kSuffix)) continue;
    found.push_back({name, static_cast<uint64_t>(st.st_size), st.st_mtime});
  }
  ::closedir(d);
  // Oldest first, so the newest end up most recently used.
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  std::lock_guard<std::mutex> lock(store->mu_);
  for (const Found& f : found) store->Track(f.name, f.size);
  store->EvictOverCap();
  return store;
}

std::string DiskBlockStore::PathOf(absl::string_view object_key,
                                   uint64_t index) const {
  return absl::StrFormat("%s/%016x-%d%s", dir_,
                         XXH3_64bits(object_key.data(), object_key.size()),
                         index, kSuffix);
}

uint64_t DiskBlockStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

void DiskBlockStore::Track(const std::string& name, uint64_t size) {
  Forget(name);
  lru_.push_front(name);
  files_[name] = Entry{size, lru_.begin()};
  bytes_ += size;
}

void DiskBlockStore::Forget(const std::string& name) {
  auto it = files_.find(name);
  if (it == files_.end()) return;
  bytes_ -= it->second.size;
  lru_.erase(it->second.pos);
  files_.erase(it);
}

void DiskBlockStore::EvictOverCap() {
  while (bytes_ > cap_ && !lru_.empty()) {
    const std::string victim = lru_.back();
    ::unlink(absl::StrCat(dir_, "/", victim).c_str());
    Forget(victim);
  }
}

std::shared_ptr<const std::string> DiskBlockStore::Get(
    absl::string_view object_key, uint64_t index, uint64_t expected_bytes) {
  const std::string path = PathOf(object_key, index);
  const std::string name = path.substr(dir_.size() + 1);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd.valid()) return nullptr;
  auto miss = [&]() -> std::shared_ptr<const std::string> {
    ::unlink(path.c_str());
    std::lock_guard<std::mutex> lock(mu_);
    Forget(name);
    return nullptr;
  };
  struct stat st;
  Header h;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      !ReadAll(fd.get(), reinterpret_cast<char*>(&h), sizeof(h)) ||
      std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 ||
      h.key_bytes != object_key.size() || h.key_bytes > kMaxKeyBytes ||
      h.index != index || h.data_bytes != expected_bytes ||
      static_cast<uint64_t>(st.st_size) !=
          sizeof(Header) + h.key_bytes + h.data_bytes) {
    return miss();
  }
  std::string key(h.key_bytes, '\0');
  auto data = std::make_shared<std::string>(h.data_bytes, '\0');
  if (!ReadAll(fd.get(), key.data(), key.size()) || key != object_key ||
      !ReadAll(fd.get(), data->data(), data->size()) ||
      XXH3_64bits(data->data(), data->size()) != h.data_hash) {
    return miss();
  }
  std::lock_guard<std::mutex> lock(mu_);
  Track(name, static_cast<uint64_t>(st.st_size));
  return data;
}

void DiskBlockStore::Put(absl::string_view object_key, uint64_t index,
                         absl::string_view data) {
  if (object_key.size() > kMaxKeyBytes) return;
  const std::string path = PathOf(object_key, index);
  uint64_t n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = ++temp_counter_;
  }
  const std::string temp =
      absl::StrCat(dir_, "/", kTempPrefix, ::getpid(), "-", n);
  UniqueFd fd(::open(temp.c_str(),
                     O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                     0600));
  if (!fd.valid()) return;
  Header h;
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.key_bytes = object_key.size();
  h.index = index;
  h.data_bytes = data.size();
  h.data_hash = XXH3_64bits(data.data(), data.size());
  const bool written =
      WriteAll(fd.get(), reinterpret_cast<const char*>(&h), sizeof(h)) &&
      WriteAll(fd.get(), object_key.data(), object_key.size()) &&
      WriteAll(fd.get(), data.data(), data.size());
  fd.reset();
  if (!written || ::rename(temp.c_str(), path.c_str()) != 0) {
    ::unlink(temp.c_str());
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  Track(path.substr(dir_.size() + 1),
        sizeof(Header) + object_key.size() + data.size());
  EvictOverCap();
}

}  // namespace tensormorph
