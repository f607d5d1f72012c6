#include "server/checkpoint_registry.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/exception_fence.h"

namespace tensormorph {
namespace {

// The ParkingScope open on this thread, innermost first.
thread_local CheckpointRegistry::ParkingScope* current_parking = nullptr;

OpenOptions WithSandbox(OpenOptions o, const PathSandbox& sandbox) {
  o.access = sandbox.access();
  o.backings = sandbox.backings();
  return o;
}

}  // namespace

CheckpointRegistry::CheckpointRegistry(PathSandbox sandbox, size_t max_open,
                                       OpenOptions open)
    : sandbox_(std::move(sandbox)),
      max_open_(std::max<size_t>(1, max_open)),
      open_options_(WithSandbox(std::move(open), sandbox_)),
      watch_(ChangeWatch::Create()) {}

CheckpointRegistry::ParkingScope::ParkingScope(CheckpointRegistry& registry)
    : registry_(registry), outer_(current_parking) {
  current_parking = this;
}

CheckpointRegistry::ParkingScope::~ParkingScope() { current_parking = outer_; }

void CheckpointRegistry::ParkingScope::ResumeWhenOpened(
    absl::AnyInvocable<void()> resume) {
  {
    absl::MutexLock lock(&registry_.mu_);
    if (!opening_->finished) {
      opening_->parked.push_back(std::move(resume));
      return;
    }
  }
  resume();
}

bool CheckpointRegistry::Unchanged(const Checkpoint& c,
                                   const PathSandbox::Resolved& resolved) {
  for (const Checkpoint::File& f : c.files()) {
    auto now = f.path == resolved.path ? IdentityFromStat(f.path, resolved.st)
                                       : StatFile(f.path, c.access());
    if (!now.ok() || !(*now == f.mapping->identity())) return false;
  }
  for (const Checkpoint::ReadFile& f : c.read_files()) {
    auto now = StatFile(f.path, c.access());
    if (now.ok() != f.identity.has_value()) return false;  // came or went
    if (now.ok() && !(*now == *f.identity)) return false;
  }
  if (!c.directory().empty()) {
    auto names = ListCheckpointNames(c.directory(), c.access());
    if (!names.ok() || *names != c.directory_names()) return false;
  }
  return true;
}

std::vector<std::string> CheckpointRegistry::DirectoriesOf(
    const Checkpoint& c) {
  std::vector<std::string> dirs;
  auto add = [&](absl::string_view dir) {
    if (dir.empty()) return;
    for (const std::string& d : dirs) {
      if (d == dir) return;
    }
    dirs.emplace_back(dir);
  };
  auto parent = [](const std::string& path) {
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? absl::string_view()
           : slash == 0               ? absl::string_view("/")
                        : absl::string_view(path).substr(0, slash);
  };
  for (const Checkpoint::File& f : c.files()) add(parent(f.path));
  for (const Checkpoint::ReadFile& f : c.read_files()) add(parent(f.path));
  add(c.directory());
  return dirs;
}

bool CheckpointRegistry::LocalUnchanged(
    const Checkpoint& c, const PathSandbox::Resolved& resolved,
    absl::Time checked,
    const std::shared_ptr<const ChangeWatch::Watched>& watched, absl::Time now,
    std::shared_ptr<const ChangeWatch::Watched>* rearmed) {
  if (watched != nullptr && now - checked < kLocalRecheck &&
      !watch_->Changed(*watched)) {
    // The path's own stat came with its resolution: a single-file
    // checkpoint replaced by another file is seen even when its directory
    // is a mount point's that queues no events.
    for (const Checkpoint::File& f : c.files()) {
      if (f.path != resolved.path) continue;
      auto now_id = IdentityFromStat(f.path, resolved.st);
      if (!now_id.ok() || !(*now_id == f.mapping->identity())) return false;
    }
    return true;
  }
  // Watched from before the stats: whatever changes after them queues an
  // event this watch sees.
  full_checks_.fetch_add(1, std::memory_order_relaxed);
  std::shared_ptr<const ChangeWatch::Watched> fresh;
  if (watch_ != nullptr) fresh = watch_->Watch(DirectoriesOf(c));
  if (!Unchanged(c, resolved)) return false;
  *rearmed = std::move(fresh);
  return true;
}

bool CheckpointRegistry::RemoteUnchanged(const Checkpoint& c) const {
  const CheckpointFiles files(sandbox_.access(), sandbox_.remote(),
                              sandbox_.backings());
  for (const Checkpoint::File& f : c.files()) {
    auto now = files.Identity(f.path);
    if (!now.ok() || !(*now == f.mapping->identity())) return false;
  }
  for (const Checkpoint::ReadFile& f : c.read_files()) {
    auto now = files.Identity(f.path);
    if (now.ok() != f.identity.has_value()) return false;  // came or went
    if (now.ok() && !(*now == *f.identity)) return false;
  }
  if (!c.directory().empty()) {
    auto names = ListCheckpointNames(c.directory(), files);
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
  // A checkpoint beneath a backed root is checked as a remote one: its
  // files may come from the backing at any check.
  const bool remote = RemoteFiles::IsUrl(*path) || sandbox_.Backed(*path);
  const absl::Time now = absl::Now();
  std::shared_ptr<const Checkpoint> cached;
  absl::Time checked;
  std::shared_ptr<const ChangeWatch::Watched> watched;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(*path);
    if (it != entries_.end()) {
      cached = it->second.checkpoint;
      checked = it->second.checked;
      watched = it->second.watched;
    }
  }
  // The stats run off the lock: a slow file system delays this call only.
  std::shared_ptr<const ChangeWatch::Watched> rearmed;
  const bool recently_checked = remote && now - checked < kRemoteRecheck;
  if (cached != nullptr &&
      (remote ? recently_checked || RemoteUnchanged(*cached)
              : LocalUnchanged(*cached, *resolved, checked, watched, now,
                               &rearmed))) {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(*path);
    if (it != entries_.end() && it->second.checkpoint == cached) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      if (remote && !recently_checked) it->second.checked = now;
      if (rearmed != nullptr) {
        it->second.checked = now;
        it->second.watched = std::move(rearmed);
      }
    }
    return cached;
  }
  if (!may_open) return nullptr;
  auto opened = OpenOnce(*resolved);
  if (!opened.ok()) return opened.status();
  // The open stat'ed its files before reading them; a watch taken now and a
  // check that they are still those files leave no gap a change could fall
  // into. (Failing the check just leaves the next call a full one.)
  std::shared_ptr<const ChangeWatch::Watched> armed;
  if (!remote && watch_ != nullptr) {
    armed = watch_->Watch(DirectoriesOf(**opened));
    if (armed != nullptr && !Unchanged(**opened, *resolved)) armed = nullptr;
  }
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(*path);
  if (it != entries_.end()) {
    it->second.checkpoint = *opened;
    it->second.checked = now;
    it->second.watched = std::move(armed);
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  } else {
    lru_.push_front(*path);
    entries_.emplace(*path,
                     Entry{*opened, lru_.begin(), now, std::move(armed)});
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
  // Every file, shard, index and config is opened beneath the roots' fds
  // (open_options_.access, the sandbox's): nothing outside them is ever
  // opened, so there is nothing left to check after the open.
  return Checkpoint::Open(path, options);
}

absl::StatusOr<std::shared_ptr<const Checkpoint>> CheckpointRegistry::OpenOnce(
    const PathSandbox::Resolved& resolved) {
  const std::string& path = resolved.path;
  // The inputs are taken before any open: a file changed during one makes
  // them differ next time, so its failure is not reused. The stats run off
  // the lock.
  const bool remote = RemoteFiles::IsUrl(path) || sandbox_.Backed(path);
  std::vector<std::pair<std::string, FileIdentity>> inputs =
      remote ? std::vector<std::pair<std::string, FileIdentity>>()
             : InputsOf(resolved, *sandbox_.access());
  std::shared_ptr<Opening> opening;
  bool mine = false;
  {
    absl::MutexLock lock(&mu_);
    auto failed = failed_.find(path);
    if (failed != failed_.end() && failed->second.inputs == inputs) {
      ++failed_opens_reused_;
      return failed->second.status;
    }
    auto [it, added] = opening_.try_emplace(path);
    if (added) {
      it->second = std::make_shared<Opening>();
      mine = true;
    }
    opening = it->second;
    if (!mine && current_parking != nullptr &&
        &current_parking->registry_ == this) {
      ++parked_calls_;
    }
  }
  if (!mine) {
    // Another call is opening it: one parse serves both, and a corrupt
    // header costs one parse however many calls ask at once. A task that
    // can run again later gives its worker back meanwhile.
    if (ParkingScope* scope = current_parking;
        scope != nullptr && &scope->registry_ == this) {
      scope->opening_ = std::move(opening);
      return absl::UnavailableError(absl::StrCat(
          "'", path, "' is being opened by another call; parked until then"));
    }
    opening->done.WaitForNotification();
    return opening->result;
  }
  // Fenced here as well as in Acquire: an exception must not leave the
  // calls waiting on this open waiting for ever.
  opening->result = Fenced({"Checkpoint::Open", path},
                           [&] { return OpenInside(path, open_options_); });
  std::vector<absl::AnyInvocable<void()>> parked;
  {
    absl::MutexLock lock(&mu_);
    ++opens_;
    opening_.erase(path);
    opening->finished = true;
    parked.swap(opening->parked);
    const absl::Status& s = opening->result.status();
    // (Not for URLs: their identities cannot be taken without a request.)
    if (!remote && (absl::IsDataLoss(s) || absl::IsUnimplemented(s) ||
                    absl::IsInvalidArgument(s))) {
      // What is wrong with the files themselves; other failures (a race, a
      // permission) may pass by themselves.
      if (failed_.size() >= kMaxRememberedFailures) failed_.clear();
      failed_[path] = Failure{s, std::move(inputs)};
    } else {
      failed_.erase(path);
    }
  }
  opening->done.Notify();
  for (absl::AnyInvocable<void()>& resume : parked) {
    // A resumption that throws (it only queues a task) is logged; the rest
    // still run.
    Fenced({"ParkingScope::ResumeWhenOpened", path}, [&] {
      resume();
      return absl::OkStatus();
    }).IgnoreError();
  }
  return opening->result;
}

std::vector<std::pair<std::string, FileIdentity>> CheckpointRegistry::InputsOf(
    const PathSandbox::Resolved& resolved, const FileAccess& access) {
  std::vector<std::pair<std::string, FileIdentity>> out;
  auto add = [&](const std::string& p, const struct stat& st) {
    out.emplace_back(
        p, FileIdentity{.device = static_cast<uint64_t>(st.st_dev),
                        .inode = static_cast<uint64_t>(st.st_ino),
                        .size = static_cast<uint64_t>(st.st_size),
                        .mtime_ns = st.st_mtim.tv_sec * 1'000'000'000 +
                                    st.st_mtim.tv_nsec,
                        .ctime_ns = st.st_ctim.tv_sec * 1'000'000'000 +
                                    st.st_ctim.tv_nsec});
  };
  add(resolved.path, resolved.st);
  // A directory's or a file's neighbours decide what opens (shards, index,
  // configs, splits): every name ListCheckpointNames keeps, with its
  // identity, or its absence.
  const std::string dir =
      S_ISDIR(resolved.st.st_mode)
          ? resolved.path
          : resolved.path.substr(0, resolved.path.find_last_of('/'));
  auto names = ListCheckpointNames(dir.empty() ? "/" : dir, access);
  if (!names.ok()) return out;
  for (const std::string& n : *names) {
    const std::string p = absl::StrCat(dir, "/", n);
    if (absl::StatusOr<struct stat> st = access.Stat(p); st.ok()) {
      add(p, *st);
    } else {
      out.emplace_back(p, FileIdentity{});
    }
  }
  return out;
}

int64_t CheckpointRegistry::parked_calls() const {
  absl::MutexLock lock(&mu_);
  return parked_calls_;
}

int64_t CheckpointRegistry::failed_opens_reused() const {
  absl::MutexLock lock(&mu_);
  return failed_opens_reused_;
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

int64_t CheckpointRegistry::full_checks() const {
  return full_checks_.load(std::memory_order_relaxed);
}

int64_t CheckpointRegistry::opens() const {
  absl::MutexLock lock(&mu_);
  return opens_;
}

}  // namespace tensormorph
