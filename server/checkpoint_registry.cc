#include "server/checkpoint_registry.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "server/exception_fence.h"

namespace tensormorph {

CheckpointRegistry::CheckpointRegistry(PathSandbox sandbox, size_t max_open,
                                       OpenOptions open)
    : sandbox_(std::move(sandbox)),
      max_open_(std::max<size_t>(1, max_open)),
      open_options_(open) {}

bool CheckpointRegistry::Unchanged(const Checkpoint& c,
                                   const PathSandbox::Resolved& resolved) {
  for (const Checkpoint::File& f : c.files()) {
    auto now = f.path == resolved.path ? IdentityFromStat(f.path, resolved.st)
                                       : StatFile(f.path);
    if (!now.ok() || !(*now == f.mapping->identity())) return false;
  }
  for (const Checkpoint::ReadFile& f : c.read_files()) {
    auto now = StatFile(f.path);
    if (now.ok() != f.identity.has_value()) return false;  // came or went
    if (now.ok() && !(*now == *f.identity)) return false;
  }
  if (!c.directory().empty()) {
    auto names = ListCheckpointNames(c.directory());
    if (!names.ok() || *names != c.directory_names()) return false;
  }
  return true;
}

absl::StatusOr<std::shared_ptr<const Checkpoint>> CheckpointRegistry::Acquire(
    absl::string_view requested) {
  // Opening is where untrusted bytes are parsed: an exception there ends this
  // call with INTERNAL naming the checkpoint, and leaves the cache as it was.
  return Fenced({"Checkpoint::Open", requested},
                [&] { return AcquireUnfenced(requested, /*may_open=*/true); });
}

std::shared_ptr<const Checkpoint> CheckpointRegistry::AcquireIfOpen(
    absl::string_view requested) {
  auto cached = Fenced({"Checkpoint::Open", requested}, [&] {
    return AcquireUnfenced(requested, /*may_open=*/false);
  });
  return cached.ok() ? *std::move(cached) : nullptr;
}

absl::StatusOr<std::shared_ptr<const Checkpoint>>
CheckpointRegistry::AcquireUnfenced(absl::string_view requested,
                                    bool may_open) {
  auto resolved = sandbox_.ResolveAndStat(requested);
  if (!resolved.ok()) return resolved.status();
  const std::string* path = &resolved->path;
  std::shared_ptr<const Checkpoint> cached;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(*path);
    if (it != entries_.end()) cached = it->second.checkpoint;
  }
  // The stats run off the lock: a slow file system delays this call only.
  if (cached != nullptr && Unchanged(*cached, *resolved)) {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(*path);
    if (it != entries_.end() && it->second.checkpoint == cached) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
    }
    return cached;
  }
  if (!may_open) return nullptr;
  auto opened = OpenInside(*path, open_options_);
  if (!opened.ok()) return opened.status();
  absl::MutexLock lock(&mu_);
  ++opens_;
  auto it = entries_.find(*path);
  if (it != entries_.end()) {
    it->second.checkpoint = *opened;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  } else {
    lru_.push_front(*path);
    entries_.emplace(*path, Entry{*opened, lru_.begin()});
  }
  while (entries_.size() > max_open_) {
    entries_.erase(lru_.back());
    lru_.pop_back();
  }
  return *opened;
}

absl::StatusOr<std::shared_ptr<const Checkpoint>>
CheckpointRegistry::OpenInside(const std::string& path,
                               const OpenOptions& options) const {
  auto opened = Checkpoint::Open(path, options);
  if (!opened.ok()) return opened.status();
  // Shards and splits are opened by name from the checkpoint's directory; a
  // symlinked shard must not lead out of the roots either.
  for (const Checkpoint::File& f : (*opened)->files()) {
    char buf[PATH_MAX];
    if (::realpath(f.path.c_str(), buf) == nullptr) {
      return absl::NotFoundError(absl::StrCat("'", f.path, "' vanished"));
    }
    if (absl::Status s = sandbox_.CheckInside(buf); !s.ok()) return s;
  }
  return opened;
}

absl::StatusOr<std::shared_ptr<const Checkpoint>>
CheckpointRegistry::AcquireForCheck(absl::string_view requested) {
  absl::StatusOr<std::shared_ptr<const Checkpoint>> strict = Acquire(requested);
  // What a strict open refuses for the checkpoint's contents (a corrupt or
  // contradicting file, an unsupported one, a shard that is no regular
  // file) is opened again leniently; a refusal of the path itself comes
  // back the same from both.
  if (strict.ok() || (!absl::IsDataLoss(strict.status()) &&
                      !absl::IsUnimplemented(strict.status()) &&
                      !absl::IsInvalidArgument(strict.status()))) {
    return strict;
  }
  return Fenced({"Checkpoint::Open (lenient, for check)", requested},
                [&]() -> absl::StatusOr<std::shared_ptr<const Checkpoint>> {
                  auto path = sandbox_.Resolve(requested);
                  if (!path.ok()) return path.status();
                  OpenOptions lenient = open_options_;
                  lenient.lenient = true;
                  return OpenInside(*path, lenient);
                });
}

size_t CheckpointRegistry::open_count() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

uint64_t CheckpointRegistry::mapped_bytes() const {
  absl::MutexLock lock(&mu_);
  // No overflow: every file counted is mapped at once in one address space.
  uint64_t total = 0;
  for (const auto& [path, entry] : entries_) {
    for (const Checkpoint::File& f : entry.checkpoint->files()) {
      total += f.mapping->size();
    }
  }
  return total;
}

int64_t CheckpointRegistry::opens() const {
  absl::MutexLock lock(&mu_);
  return opens_;
}

}  // namespace tensormorph
