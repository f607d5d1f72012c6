// A remote object's bytes at one fixed address range, fetched on first
// touch: what lets every reader of mapped files (the format parsers, the
// decoders, the scans) read an object of HTTP, S3 or the Hub exactly as it
// reads a local mapping, without knowing which bytes it will need.
//
// The range is a MAP_SHARED view of a memfd whose pages start PROT_NONE. A
// read of a page not yet fetched raises SIGSEGV; demand_paging.h's handler
// has the block fetched (through the object's reader: conditional on the
// identity taken at open, so every byte is of one version) into a second,
// writable view of the same memfd, then makes the block readable and lets
// the read go on. Blocks become readable only once wholly written, so no
// reader ever sees a partial block. Fetched blocks count against a shared
// MirrorBudget; over it, the oldest are dropped (made PROT_NONE, their pages
// freed) and fetched again if touched again.
#ifndef TENSORMORPH_CORE_IO_REMOTE_MIRROR_H_
#define TENSORMORPH_CORE_IO_REMOTE_MIRROR_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/io/object_reader.h"

namespace tensormorph {

class RemoteMirror;

// The bytes every mirror sharing it may hold fetched at once.
// Thread safety: thread-safe.
class MirrorBudget {
 public:
  // Errors: INVALID_ARGUMENT when `bytes` is below 64 MiB (a decode touches
  // a few blocks of several tensors at once; a smaller budget would drop
  // blocks still being read, again and again).
  static absl::StatusOr<std::shared_ptr<MirrorBudget>> Create(uint64_t bytes);

  uint64_t limit() const { return limit_; }
  uint64_t resident_bytes() const;
  uint64_t evicted_blocks() const;

 private:
  friend class RemoteMirror;
  explicit MirrorBudget(uint64_t bytes) : limit_(bytes) {}
  struct Entry {
    RemoteMirror* mirror;
    uint64_t block;
  };
  const uint64_t limit_;
  mutable std::mutex mu_;
  std::condition_variable filled_;  // a block left kFilling
  std::list<Entry> order_;          // oldest fill first
  uint64_t resident_ = 0;
  uint64_t evicted_ = 0;
};

struct MirrorStats {
  uint64_t faults = 0;   // reads of a block not fetched (demand_paging.h)
  uint64_t fills = 0;    // blocks fetched
  uint64_t evicted = 0;  // blocks dropped to stay within the budget
};

// Thread safety: thread-safe. The object's bytes stay addressable (bytes())
// for the mirror's life; readers must read them under GuardedRead
// (fault_guard.h), which turns a fetch that fails into that fetch's status.
class RemoteMirror {
 public:
  // Small, so that a scalar lookup fetches little and a header within an
  // object's first 64 KiB (what HttpObjectReader's open fetches) costs no
  // further request.
  static constexpr uint64_t kBlockBytes = uint64_t{64} << 10;
  // The most a fault fetches ahead of a reader streaming through the object
  // (32 MiB: each fault that continues the last doubles the window).
  static constexpr uint64_t kMaxWindowBlocks = 512;

  // Reserves the address range for `reader`'s object and registers it with
  // demand paging. Fetches nothing.
  // Errors: RESOURCE_EXHAUSTED when the memfd or either view cannot be made
  // (naming the object), or when demand paging holds too many mirrors.
  static absl::StatusOr<std::shared_ptr<const RemoteMirror>> Create(
      std::shared_ptr<const ObjectReader> reader,
      std::shared_ptr<MirrorBudget> budget);
  ~RemoteMirror();
  RemoteMirror(const RemoteMirror&) = delete;
  RemoteMirror& operator=(const RemoteMirror&) = delete;

  // The object's bytes. Reading them fetches what is not fetched yet.
  absl::Span<const uint8_t> bytes() const { return {view_, size_}; }
  const ObjectReader& reader() const { return *reader_; }
  uint64_t size() const { return size_; }

  // Fetches whatever of [offset, offset + length) is not fetched (one
  // request per run of absent blocks; runs of 8 MiB or more go out as
  // parallel ranges through the reader), and waits for blocks another
  // thread is fetching. A header parse calls it first so its reads do not
  // fault one block at a time. The bytes may be dropped again later.
  // Errors: OUT_OF_RANGE when the range does not lie within size(); those of
  // ObjectReader::ReadAt.
  absl::Status EnsureResident(uint64_t offset, uint64_t length) const;

  // demand_paging.h: a read faulted at `offset`. Fetches its block, and
  // ahead of it when the reader streams.
  absl::Status OnFault(uint64_t offset) const;

  MirrorStats stats() const;

 private:
  enum BlockState : uint8_t { kAbsent, kFilling, kResident };
  RemoteMirror(std::shared_ptr<const ObjectReader> reader,
               std::shared_ptr<MirrorBudget> budget, int memfd, uint8_t* view,
               uint8_t* writable, uint64_t size, uint64_t mapped);
  // Fetches blocks [first, last) that are absent; waits for those filling.
  absl::Status Fill(uint64_t first, uint64_t last) const;
  // Drops the oldest blocks until the budget holds `incoming` more bytes.
  // REQUIRES: budget_->mu_ held.
  void MakeRoomLocked(uint64_t incoming) const;
  void DropLocked(uint64_t block) const;
  uint64_t BlockLength(uint64_t block) const;

  std::shared_ptr<const ObjectReader> reader_;
  std::shared_ptr<MirrorBudget> budget_;
  int memfd_;
  uint8_t* view_;      // readers': PROT_NONE until a block is resident
  uint8_t* writable_;  // fills write here
  uint64_t size_;
  uint64_t mapped_;  // both views' length: size_ rounded up to pages
  int slot_ = -1;    // demand paging's registration
  // Under budget_->mu_:
  mutable std::vector<BlockState> state_;
  mutable std::vector<std::list<MirrorBudget::Entry>::iterator> where_;
  mutable uint64_t next_expected_ =
      UINT64_MAX;  // the block a stream faults next
  mutable uint64_t window_ = 1;
  mutable MirrorStats stats_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_REMOTE_MIRROR_H_
