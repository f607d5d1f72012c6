#include "core/io/remote_mirror.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/io/demand_paging.h"

namespace tensormorph {
namespace {

uint64_t PageBytes() {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return page;
}

uint64_t RoundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

absl::Status Exhausted(const ObjectReader& reader, absl::string_view what) {
  return absl::ResourceExhaustedError(
      absl::StrCat("cannot mirror '", reader.display(), "': ", what, " (",
                   std::strerror(errno), ")"));
}

}  // namespace

absl::StatusOr<std::shared_ptr<MirrorBudget>> MirrorBudget::Create(
    uint64_t bytes) {
  if (bytes < (uint64_t{64} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a remote read budget of ", bytes,
                     " bytes is below the least that works, 64 MiB"));
  }
  return std::shared_ptr<MirrorBudget>(new MirrorBudget(bytes));
}

uint64_t MirrorBudget::resident_bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return resident_;
}

uint64_t MirrorBudget::evicted_blocks() const {
  std::lock_guard<std::mutex> l(mu_);
  return evicted_;
}

absl::StatusOr<std::shared_ptr<const RemoteMirror>> RemoteMirror::Create(
    std::shared_ptr<const ObjectReader> reader,
    std::shared_ptr<MirrorBudget> budget) {
  const uint64_t size = reader->size();
  if (size == 0) {
    return std::shared_ptr<const RemoteMirror>(new RemoteMirror(
        std::move(reader), std::move(budget), -1, nullptr, nullptr, 0, 0));
  }
  const uint64_t mapped = RoundUp(size, PageBytes());
  const int fd = memfd_create("tensormorph-mirror", MFD_CLOEXEC);
  if (fd < 0) return Exhausted(*reader, "memfd_create failed");
  if (ftruncate(fd, static_cast<off_t>(mapped)) != 0) {
    absl::Status s = Exhausted(*reader, "ftruncate of its memfd failed");
    close(fd);
    return s;
  }
  void* view =
      mmap(nullptr, mapped, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (view == MAP_FAILED) {
    absl::Status s = Exhausted(*reader, "mmap of its read view failed");
    close(fd);
    return s;
  }
  void* writable = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (writable == MAP_FAILED) {
    absl::Status s = Exhausted(*reader, "mmap of its fill view failed");
    munmap(view, mapped);
    close(fd);
    return s;
  }
  std::shared_ptr<RemoteMirror> m(new RemoteMirror(
      std::move(reader), std::move(budget), fd, static_cast<uint8_t*>(view),
      static_cast<uint8_t*>(writable), size, mapped));
  absl::StatusOr<int> slot = RegisterMirror(m.get(), m->view_, mapped);
  if (!slot.ok()) return slot.status();  // the destructor unmaps
  m->slot_ = *slot;
  return m;
}

RemoteMirror::RemoteMirror(std::shared_ptr<const ObjectReader> reader,
                           std::shared_ptr<MirrorBudget> budget, int memfd,
                           uint8_t* view, uint8_t* writable, uint64_t size,
                           uint64_t mapped)
    : reader_(std::move(reader)),
      budget_(std::move(budget)),
      memfd_(memfd),
      view_(view),
      writable_(writable),
      size_(size),
      mapped_(mapped) {
  const uint64_t blocks = (size + kBlockBytes - 1) / kBlockBytes;
  state_.assign(blocks, kAbsent);
  where_.resize(blocks);
}

RemoteMirror::~RemoteMirror() {
  if (slot_ >= 0) UnregisterMirror(slot_);
  {
    std::lock_guard<std::mutex> l(budget_->mu_);
    for (uint64_t b = 0; b < state_.size(); ++b) {
      if (state_[b] != kResident) continue;
      budget_->order_.erase(where_[b]);
      budget_->resident_ -= BlockLength(b);
    }
  }
  if (view_ != nullptr) munmap(view_, mapped_);
  if (writable_ != nullptr) munmap(writable_, mapped_);
  if (memfd_ >= 0) close(memfd_);
}

uint64_t RemoteMirror::BlockLength(uint64_t block) const {
  return std::min(kBlockBytes, size_ - block * kBlockBytes);
}

absl::Status RemoteMirror::EnsureResident(uint64_t offset,
                                          uint64_t length) const {
  if (offset > size_ || length > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat(
        "bytes [", offset, ", ", offset, "+", length, ") of '",
        reader_->display(), "' lie outside its ", size_, " bytes"));
  }
  if (length == 0) return absl::OkStatus();
  return Fill(offset / kBlockBytes, (offset + length - 1) / kBlockBytes + 1);
}

absl::Status RemoteMirror::OnFault(uint64_t offset) const {
  const uint64_t block = offset / kBlockBytes;
  uint64_t window = 1;
  {
    std::lock_guard<std::mutex> l(budget_->mu_);
    ++stats_.faults;
    // A fault where the last window ended is a reader streaming on: fetch
    // further ahead each time, so a decode waits on few round trips.
    window_ = block == next_expected_
                  ? std::min<uint64_t>(window_ * 2, kMaxWindowBlocks)
                  : 1;
    window = window_;
    next_expected_ = block + window;
  }
  return Fill(block, std::min<uint64_t>(block + window, state_.size()));
}

absl::Status RemoteMirror::Fill(uint64_t first, uint64_t last) const {
  std::unique_lock<std::mutex> l(budget_->mu_);
  // Runs of blocks this call fetches, as [first, last) block indices.
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  uint64_t incoming = 0;
  for (uint64_t b = first; b < last; ++b) {
    if (state_[b] != kAbsent) continue;
    state_[b] = kFilling;
    incoming += BlockLength(b);
    if (!runs.empty() && runs.back().second == b) {
      runs.back().second = b + 1;
    } else {
      runs.push_back({b, b + 1});
    }
  }
  MakeRoomLocked(incoming);
  l.unlock();

  absl::Status result;
  std::vector<bool> fetched(runs.size(), false);
  for (size_t i = 0; i < runs.size(); ++i) {
    const uint64_t begin = runs[i].first * kBlockBytes;
    const uint64_t end = std::min(runs[i].second * kBlockBytes, size_);
    absl::Status s = reader_->ReadAt(
        begin, end - begin, reinterpret_cast<char*>(writable_ + begin));
    if (s.ok() && mprotect(view_ + begin,
                           std::min(RoundUp(end, PageBytes()), mapped_) - begin,
                           PROT_READ) != 0) {
      s = Exhausted(*reader_, "mprotect of a fetched block failed");
    }
    if (!s.ok()) {
      if (result.ok()) result = s;
      continue;
    }
    fetched[i] = true;
  }

  l.lock();
  for (size_t i = 0; i < runs.size(); ++i) {
    for (uint64_t b = runs[i].first; b < runs[i].second; ++b) {
      if (!fetched[i]) {
        state_[b] = kAbsent;  // not cached: the next touch asks again
        continue;
      }
      state_[b] = kResident;
      where_[b] = budget_->order_.insert(budget_->order_.end(),
                                         {const_cast<RemoteMirror*>(this), b});
      budget_->resident_ += BlockLength(b);
      ++stats_.fills;
    }
  }
  budget_->filled_.notify_all();
  if (!result.ok()) return result;
  // Blocks another call was fetching: wait for them. One that came back
  // absent (its fetch failed) is fetched here, where its error is ours.
  for (uint64_t b = first; b < last; ++b) {
    budget_->filled_.wait(l, [&] { return state_[b] != kFilling; });
    if (state_[b] == kAbsent) {
      l.unlock();
      return Fill(b, b + 1);
    }
  }
  return absl::OkStatus();
}

void RemoteMirror::MakeRoomLocked(uint64_t incoming) const {
  while (!budget_->order_.empty() &&
         budget_->resident_ + incoming > budget_->limit_) {
    const MirrorBudget::Entry e = budget_->order_.front();
    e.mirror->DropLocked(e.block);
  }
}

void RemoteMirror::DropLocked(uint64_t block) const {
  const uint64_t begin = block * kBlockBytes;
  const uint64_t end =
      std::min(RoundUp(begin + BlockLength(block), PageBytes()), mapped_);
  // Unreadable first, then freed: a reader racing the drop faults and
  // fetches the block again; none can read the freed (zero) pages.
  mprotect(view_ + begin, end - begin, PROT_NONE);
  fallocate(memfd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
            static_cast<off_t>(begin), static_cast<off_t>(end - begin));
  budget_->order_.erase(where_[block]);
  budget_->resident_ -= BlockLength(block);
  ++budget_->evicted_;
  ++stats_.evicted;
  state_[block] = kAbsent;
}

MirrorStats RemoteMirror::stats() const {
  std::lock_guard<std::mutex> l(budget_->mu_);
  return stats_;
}

}  // namespace tensormorph
