#include "core/format/checkpoint_scan.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/format/gguf_reader.h"
#include "core/format/json_header.h"
#include "core/io/remote_files.h"

namespace tensormorph {
namespace {

constexpr absl::string_view kIndexName = "model.safetensors.index.json";
// The position of the scanned directory itself: no path components, so
// before everything in it and after nothing (ScanOrderLess).
constexpr absl::string_view kItself = "/";
// Headers and indices read for a tensor count; past this, "not known".
constexpr int64_t kMaxCountedHeaderBytes = 1 << 20;

std::string Join(const std::string& dir, absl::string_view name) {
  if (!dir.empty() && dir.back() == '/') return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

std::vector<absl::string_view> Components(absl::string_view path) {
  return absl::StrSplit(path, '/', absl::SkipEmpty());
}

// `prefix` names `path` or a directory above it.
bool IsPathPrefix(absl::string_view prefix, absl::string_view path) {
  if (prefix.empty() || prefix == path) return true;
  return absl::StartsWith(path, prefix) && path.size() > prefix.size() &&
         path[prefix.size()] == '/';
}

// Reads what a listing looks at: through the FileAccess, or, for a file
// beneath a backed root that the disk lacks, from its backing URL.
struct ScanFiles {
  const FileAccess& access;
  const CheckpointFiles& files;

  // The bytes [offset, offset + n) of `path`, or nullopt when they cannot
  // all be read.
  std::optional<std::string> ReadAt(const std::string& path, int64_t offset,
                                    int64_t n) const {
    absl::StatusOr<UniqueFd> opened = access.Open(path, O_RDONLY | O_NONBLOCK);
    if (!opened.ok()) return ReadBacked(path, offset, n, opened.status());
    const int fd = opened->get();
    std::string out(static_cast<size_t>(n), '\0');
    int64_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd, out.data() + done, n - done, offset + done);
      if (r <= 0) break;
      done += r;
    }
    if (done != n) return std::nullopt;
    return out;
  }

  // From the reader, not the mirror's mapping: no fault to guard, and the
  // first 64 KiB (a header, an index) came with the open.
  std::optional<std::string> ReadBacked(const std::string& path, int64_t offset,
                                        int64_t n,
                                        const absl::Status& local) const {
    if (!absl::IsNotFound(local) || !files.BackingOf(path)) return std::nullopt;
    absl::StatusOr<std::shared_ptr<const MappedFile>> m = files.Map(path);
    if (!m.ok() || !(*m)->remote() || offset < 0 || n < 0 ||
        static_cast<uint64_t>(offset) + static_cast<uint64_t>(n) >
            (*m)->size()) {
      return std::nullopt;
    }
    std::string out(static_cast<size_t>(n), '\0');
    if (!(*m)->mirror()
             ->reader()
             .ReadAt(static_cast<uint64_t>(offset), static_cast<uint64_t>(n),
                     out.data())
             .ok()) {
      return std::nullopt;
    }
    return out;
  }
};

uint64_t LittleEndian(absl::string_view bytes) {
  uint64_t v = 0;
  for (size_t i = bytes.size(); i-- > 0;) {
    v = (v << 8) | static_cast<uint8_t>(bytes[i]);
  }
  return v;
}

// What a cheap read of a checkpoint file's head says: its stored tensors,
// where that is cheap to count, and what breaks its format there (empty
// when nothing does, or when nothing was read far enough to say).
struct HeadCount {
  std::optional<int64_t> count;
  std::string broken;
};

HeadCount Broken(std::string why) { return {std::nullopt, std::move(why)}; }

// A GGUF (v2, v3) header's tensor count, where the file of `size` bytes
// can hold that many: past the 24 bytes of the header, each tensor's info
// takes 24 at least (name length, rank, type, offset). A count no file of
// its size could hold (a header cut short or corrupt) is not listed as if
// the file held it: the file is broken. A file of at most
// kMaxCountedHeaderBytes is parsed whole (ParseGguf), and broken where that
// finds its bytes break a rule.
HeadCount GgufTensorCount(const ScanFiles& access, const std::string& path,
                          int64_t size) {
  constexpr int64_t kHeaderBytes = 24, kMinInfoBytes = 24;
  if (size < kHeaderBytes) {
    return Broken(absl::StrCat("a file of ", size,
                               " bytes: shorter than a GGUF header (",
                               kHeaderBytes, ")"));
  }
  auto head = access.ReadAt(path, 0, 16);
  if (!head) return {};
  if (head->compare(0, 4, "GGUF") != 0) return Broken("no GGUF magic");
  // Another version is not broken: UNIMPLEMENTED when opened (errors.md).
  const uint64_t version = LittleEndian(absl::string_view(*head).substr(4, 4));
  if (version != 2 && version != 3) return {};
  const uint64_t count = LittleEndian(absl::string_view(*head).substr(8, 8));
  if (count > static_cast<uint64_t>((size - kHeaderBytes) / kMinInfoBytes)) {
    return Broken(absl::StrCat("its header counts ", count,
                               " tensors, more than its ", size,
                               " bytes can describe (cut short?)"));
  }
  // A small file is parsed whole, as opening it would: a header cut short
  // within its key-values or tensor infos breaks it there, which no count
  // of the first bytes can see.
  if (size <= kMaxCountedHeaderBytes) {
    auto file = access.ReadAt(path, 0, size);
    if (!file) return {};
    absl::StatusOr<GgufFile> parsed = ParseGguf(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(file->data()),
                            file->size()),
        path);
    if (absl::IsDataLoss(parsed.status())) {
      // The listing names the file already.
      return Broken(std::string(absl::StripPrefix(
          parsed.status().message(), absl::StrCat("file '", path, "': "))));
    }
  }
  return {static_cast<int64_t>(count), ""};
}

// The entries of a small safetensors header, `__metadata__` aside.
HeadCount SafetensorsTensorCount(const ScanFiles& access,
                                 const std::string& path, int64_t size) {
  if (size < 8) {
    return Broken(absl::StrCat("a file of ", size,
                               " bytes: shorter than its 8-byte header "
                               "length"));
  }
  auto prefix = access.ReadAt(path, 0, 8);
  if (!prefix) return {};
  const uint64_t n = LittleEndian(*prefix);
  if (n == 0 || n > static_cast<uint64_t>(size - 8)) {
    return Broken(
        absl::StrCat("header length ", n, " in a file of ", size, " bytes"));
  }
  if (n > static_cast<uint64_t>(kMaxCountedHeaderBytes)) return {};
  auto header = access.ReadAt(path, 8, static_cast<int64_t>(n));
  if (!header) return {};
  auto json = ParseStrictJson(*header, path);
  if (!json.ok() || !json->is_object()) {
    return Broken("its header is not a JSON object");
  }
  return {static_cast<int64_t>(json->size()) -
              (json->contains("__metadata__") ? 1 : 0),
          ""};
}

// The tensors a small index places.
HeadCount IndexTensorCount(const ScanFiles& access, const std::string& path,
                           int64_t size) {
  if (size > kMaxCountedHeaderBytes) return {};
  auto text = access.ReadAt(path, 0, size);
  if (!text) return {};
  auto json = ParseStrictJson(*text, path);
  if (!json.ok() || !json->is_object()) {
    return Broken(absl::StrCat(kIndexName, " is not a JSON object"));
  }
  auto it = json->find("weight_map");
  if (it == json->end() || !it->is_object()) {
    return Broken(absl::StrCat(kIndexName, " has no weight_map object"));
  }
  return {static_cast<int64_t>(it->size()), ""};
}

// `prefix-00001-of-00003.gguf`: (prefix, index, count).
struct SplitName {
  std::string prefix;
  int index = 0;
  int count = 0;
};
std::optional<SplitName> ParseSplit(absl::string_view name) {
  constexpr absl::string_view kTail = ".gguf";
  // "-00001-of-00003.gguf" is 20 characters.
  if (name.size() < 20 || !absl::EndsWith(name, kTail)) return std::nullopt;
  const absl::string_view s = name.substr(name.size() - 20, 15);
  if (s[0] != '-' || s.substr(6, 4) != "-of-") return std::nullopt;
  int index = 0, count = 0;
  const absl::string_view a = s.substr(1, 5), b = s.substr(10, 5);
  for (absl::string_view d : {a, b}) {
    for (char c : d) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
        return std::nullopt;
      }
    }
  }
  if (!absl::SimpleAtoi(a, &index) || !absl::SimpleAtoi(b, &count) ||
      index < 1 || count < 1 || index > count) {
    return std::nullopt;
  }
  return SplitName{std::string(name.substr(0, name.size() - 20)), index, count};
}

std::string SplitFileName(const SplitName& s, int index) {
  return absl::StrFormat("%s-%05d-of-%05d.gguf", s.prefix, index, s.count);
}

class Scanner {
 public:
  explicit Scanner(const CheckpointScanOptions& o)
      : o_(o),
        access_(o.access != nullptr ? *o.access : *FileAccess::Anywhere()),
        files_(o.access != nullptr ? o.access : FileAccess::Anywhere(),
               o.remote, o.backings),
        reader_{access_, files_},
        position_(o.after) {}

  absl::Status Run(const std::string& dir) {
    absl::StatusOr<struct stat> top = files_.Stat(dir);
    if (!top.ok() && !absl::IsNotFound(top.status())) return top.status();
    if (!top.ok()) {
      return absl::NotFoundError(absl::StrCat("'", dir, "' does not exist"));
    }
    const struct stat& st = *top;
    if (!S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", dir, "' is not a directory"));
    }
    char real[PATH_MAX];
    top_ = ::realpath(dir.c_str(), real) != nullptr ? real : dir;
    visited_.insert({st.st_dev, st.st_ino});
    return Visit(dir, "", 0);
  }

  CheckpointScan Take() && { return std::move(out_); }

 private:
  bool After(const std::string& rel) const {
    return o_.after.empty() || ScanOrderLess(o_.after, rel);
  }

  bool Stopped() const { return stopped_; }

  // Records a checkpoint; stops once one more than max_found is known, so
  // that a page ends with a token only when something follows it.
  void Found(FoundCheckpoint f) {
    out_.found.push_back(std::move(f));
    if (out_.found.size() > std::max<size_t>(o_.max_found, 1)) {
      out_.found.pop_back();
      out_.resume_after = ResumePosition(out_.found.back().path);
      stopped_ = true;
    }
  }

  // The scanned directory itself is spelled kItself as a position: an
  // empty one means "from the start".
  static std::string ResumePosition(const std::string& rel) {
    return rel.empty() ? std::string(kItself) : rel;
  }

  absl::Status Visit(const std::string& abs, const std::string& rel,
                     int depth) {
    // Beneath a backed root: what the disk or the backing holds.
    absl::StatusOr<std::vector<std::string>> listed = files_.ListDirectory(abs);
    if (!listed.ok()) {
      if (rel.empty()) {
        return absl::NotFoundError(
            absl::StrCat("cannot list directory '", abs, "'"));
      }
      return absl::OkStatus();  // unreadable below the top: skipped
    }
    std::vector<std::string> names = *std::move(listed);
    std::sort(names.begin(), names.end());
    // Entries answered by requests, not the disk: beneath a backed root, or
    // beneath a storage URL root (--root s3://...).
    const bool url = RemoteFiles::IsUrl(abs);
    const bool backed = url || files_.BackingOf(abs).has_value();
    if (backed) {
      // The backing's entries are stat'ed by requests: at once, not in turn.
      std::vector<std::string> paths;
      for (const std::string& n : names) paths.push_back(Join(abs, n));
      files_.Prefetch(paths);
    }

    // A safetensors directory is one checkpoint, as Checkpoint::Open(dir)
    // opens it, listed before what is in it: the GGUF files and
    // subdirectories beside its shards are checkpoints of their own, which
    // opening the directory never reaches, so only the listing shows them.
    const bool index =
        std::binary_search(names.begin(), names.end(), kIndexName);
    std::vector<std::string> shards;
    for (const std::string& n : names) {
      if (absl::EndsWith(n, ".safetensors")) shards.push_back(n);
    }
    if (index || !shards.empty()) {
      // Without an index, a directory none of whose shards this server can
      // read (each a link out of the root, a FIFO, a device) holds nothing
      // that would open: listed, it showed 0 files from 1970.
      if (After(rel)) {
        FoundCheckpoint f = DirectoryCheckpoint(abs, rel, index, shards);
        if (index || f.file_count > 0) Found(std::move(f));
      }
      position_ = ResumePosition(rel);
    }
    // A directory one level past max_depth is looked at only to see
    // whether it is a checkpoint itself.
    if (depth > o_.max_depth) return absl::OkStatus();

    for (const std::string& name : names) {
      if (Stopped()) return absl::OkStatus();
      const std::string child = rel.empty() ? name : Join(rel, name);
      const bool after = After(child);
      if (!after && !IsPathPrefix(child, o_.after)) continue;
      // Only new ground counts, and moves the position: the directories
      // down to `after` are passed again on every resume.
      if (after) {
        if (++scanned_ > std::max<int64_t>(o_.max_scanned, 1)) {
          out_.resume_after = position_;
          stopped_ = true;
          return absl::OkStatus();
        }
        position_ = child;
      }
      const std::string path = Join(abs, name);
      struct stat st;
      bool in_backing = false;
      if (url || ::lstat(path.c_str(), &st) != 0) {
        // Only in the backing (an object store has no symlinks, nor loops).
        absl::StatusOr<struct stat> got = url || (backed && errno == ENOENT)
                                              ? files_.Stat(path)
                                              : absl::NotFoundError("");
        if (!got.ok()) continue;
        st = *got;
        in_backing = true;
      } else if (!S_ISLNK(st.st_mode)) {
        // Again through the access: a directory on the way swapped for a
        // symlink since must not show what lies outside the roots.
        absl::StatusOr<struct stat> got = access_.Stat(path);
        if (!got.ok()) continue;
        st = *got;
      } else {
        char real[PATH_MAX];
        if (::realpath(path.c_str(), real) == nullptr) continue;
        if (o_.allowed && !o_.allowed(real)) continue;  // leads out
        // Through the access, not by `real`: a swap since realpath cannot
        // lead out of the roots.
        absl::StatusOr<struct stat> target = access_.Stat(path);
        if (!target.ok()) continue;
        st = *target;
        // A directory inside the tree is listed where it is, and one above
        // it holds the tree: following a link to either lists things twice.
        if (S_ISDIR(st.st_mode) &&
            (IsPathPrefix(top_, real) || IsPathPrefix(real, top_))) {
          continue;
        }
      }
      if (S_ISDIR(st.st_mode)) {
        if (depth > o_.max_depth) continue;
        if (!in_backing && !visited_.insert({st.st_dev, st.st_ino}).second) {
          continue;
        }
        if (absl::Status s = Visit(path, child, depth + 1); !s.ok()) return s;
        continue;
      }
      if (!S_ISREG(st.st_mode) || !absl::EndsWith(name, ".gguf") || !after) {
        continue;
      }
      FoundGguf(abs, name, child, st);
    }
    return absl::OkStatus();
  }

  // The .gguf file `name` in `abs`: a checkpoint, or a split set's first
  // split standing for the set. A later split is listed only when the
  // first is missing: each is then listed, marked, and opening it says
  // which split is missing.
  void FoundGguf(const std::string& abs, const std::string& name,
                 const std::string& child, const struct stat& st) {
    auto split = ParseSplit(name);
    std::string first_missing;
    if (split && split->index != 1) {
      const std::string first = SplitFileName(*split, 1);
      if (files_.Stat(Join(abs, first)).ok()) return;
      first_missing = absl::StrCat("split ", first, " is missing");
      split.reset();
    }
    FoundCheckpoint f = GgufCheckpoint(abs, name, child, st, split);
    if (!first_missing.empty()) f.broken = first_missing;
    Found(std::move(f));
  }

  FoundCheckpoint DirectoryCheckpoint(const std::string& abs,
                                      const std::string& rel, bool index,
                                      const std::vector<std::string>& shards) {
    FoundCheckpoint f;
    f.path = rel;
    f.format = CheckpointFormat::kSafetensors;
    std::optional<int64_t> count = 0;
    for (const std::string& n : shards) {
      const std::string p = Join(abs, n);
      absl::StatusOr<struct stat> got = files_.Stat(p);
      if (!got.ok() || !S_ISREG(got->st_mode)) continue;
      const struct stat& st = *got;
      ++f.file_count;
      f.total_bytes += st.st_size;
      f.modified_unix_seconds =
          std::max<int64_t>(f.modified_unix_seconds, st.st_mtime);
      if (!index && (count || f.broken.empty())) {
        HeadCount head = SafetensorsTensorCount(reader_, p, st.st_size);
        Note(shards.size() > 1 ? n : "", head, &f);
        count = count && head.count
                    ? std::optional<int64_t>(*count + *head.count)
                    : std::nullopt;
      }
    }
    if (index) {
      const std::string p = Join(abs, kIndexName);
      count = std::nullopt;
      if (absl::StatusOr<struct stat> st = files_.Stat(p); st.ok()) {
        f.modified_unix_seconds =
            std::max<int64_t>(f.modified_unix_seconds, st->st_mtime);
        HeadCount head = IndexTensorCount(reader_, p, st->st_size);
        Note("", head, &f);
        count = head.count;
      }
    }
    f.stored_tensor_count = count;
    return f;
  }

  FoundCheckpoint GgufCheckpoint(const std::string& abs,
                                 const std::string& name,
                                 const std::string& rel,
                                 const struct stat& first,
                                 const std::optional<SplitName>& split) {
    FoundCheckpoint f;
    f.path = rel;
    f.format = CheckpointFormat::kGguf;
    std::vector<std::string> files = {name};
    for (int i = 2; split && i <= split->count; ++i) {
      files.push_back(SplitFileName(*split, i));
    }
    std::optional<int64_t> count = 0;
    for (const std::string& n : files) {
      const std::string p = Join(abs, n);
      struct stat st = first;
      if (n != name) {
        absl::StatusOr<struct stat> got = files_.Stat(p);
        if (!got.ok()) {
          count = std::nullopt;
          if (f.broken.empty()) {
            f.broken = absl::StrCat("split ", n, " is missing");
          }
          continue;
        }
        st = *got;
      }
      ++f.file_count;
      f.total_bytes += st.st_size;
      f.modified_unix_seconds =
          std::max<int64_t>(f.modified_unix_seconds, st.st_mtime);
      if (count || f.broken.empty()) {
        HeadCount head = GgufTensorCount(reader_, p, st.st_size);
        Note(files.size() > 1 ? n : "", head, &f);
        count = count && head.count
                    ? std::optional<int64_t>(*count + *head.count)
                    : std::nullopt;
      }
    }
    f.stored_tensor_count = count;
    return f;
  }

  // Keeps the first broken file's word in f->broken, naming `file` where
  // the checkpoint has more than one.
  static void Note(const std::string& file, const HeadCount& head,
                   FoundCheckpoint* f) {
    if (head.broken.empty() || !f->broken.empty()) return;
    f->broken =
        file.empty() ? head.broken : absl::StrCat(file, ": ", head.broken);
  }

  const CheckpointScanOptions& o_;
  const FileAccess& access_;
  const CheckpointFiles files_;
  const ScanFiles reader_;
  std::string top_;  // realpath of the scanned directory
  std::set<std::pair<dev_t, ino_t>> visited_;
  int64_t scanned_ = 0;
  std::string position_;  // the last path passed, in scan order
  bool stopped_ = false;
  CheckpointScan out_;
};

}  // namespace

bool ScanOrderLess(const std::string& a, const std::string& b) {
  const auto ca = Components(a), cb = Components(b);
  return std::lexicographical_compare(ca.begin(), ca.end(), cb.begin(),
                                      cb.end());
}

absl::StatusOr<CheckpointScan> ScanCheckpoints(
    const std::string& dir, const CheckpointScanOptions& options) {
  Scanner scanner(options);
  if (absl::Status s = scanner.Run(dir); !s.ok()) return s;
  return std::move(scanner).Take();
}

}  // namespace tensormorph
