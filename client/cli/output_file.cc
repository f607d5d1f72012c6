#include "client/cli/output_file.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/util/utf8.h"

namespace tensormorph {
namespace {

// ---- Paths ----

// realpath(3) of `path`, or nothing when a component does not exist.
std::optional<std::string> RealPath(const std::string& path) {
  char* real = ::realpath(path.c_str(), nullptr);
  if (real == nullptr) return std::nullopt;
  std::string out(real);
  std::free(real);
  return out;
}

// `path` split at its last '/': ("." or the directory, the name).
std::pair<std::string, std::string> SplitPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  return absl::StrCat(dir == "/" ? "" : dir, "/", name);
}

// Whether the canonical path `path` lies beneath the canonical directory
// `dir` (at any depth).
bool IsBeneath(const std::string& path, const std::string& dir) {
  const std::string prefix = absl::StrCat(dir == "/" ? "" : dir, "/");
  return path.size() > prefix.size() && absl::StartsWith(path, prefix);
}

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// What a file named `name` beside a checkpoint file is to it (the readers
// open these by name beside it, or would once they exist), or empty.
std::string CompanionRole(absl::string_view name) {
  for (absl::string_view config :
       {"config.json", "quantize_config.json", "quant_config.json",
        "hf_quant_config.json"}) {
    if (name == config) return "the config";
  }
  if (absl::EndsWith(name, ".index.json")) return "the index";
  if (absl::EndsWith(name, ".safetensors") || absl::EndsWith(name, ".gguf")) {
    return "a shard";
  }
  return "";
}

// An output as the checks see it.
struct ResolvedOutput {
  // The canonical path it names: realpath of an existing output, else of
  // its directory plus its name. Empty when its directory does not exist
  // (nothing can be written there, nor be an input).
  std::string full;
  std::optional<struct stat> st;  // of the file it names, when one exists
};

ResolvedOutput ResolveOutput(const std::string& path) {
  ResolvedOutput r;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    r.st = st;
    r.full = RealPath(path).value_or("");
    return r;
  }
  const auto [dir, name] = SplitPath(path);
  if (auto real = RealPath(dir)) r.full = JoinPath(*real, name);
  return r;
}

// Files beneath a directory checkpoint compared by identity (hard links,
// links from elsewhere into a blob store) at most: past it, the path
// comparison alone guards.
constexpr int kMaxFilesCompared = 100000;

// Which hits a pass over the inputs looks for. Every input is asked first
// whether the output is it itself, and only then whether the output lies
// inside or beside one: an output that is quantization [1] and also a shard
// beside the source is named as what the user gave it as.
enum class HitPass { kItself, kInsideOrBeside };

// Where `out` hits `input` in `pass`: a description of what it is to the
// command ("checkpoint 'm' itself"), or empty.
std::string Hit(const ResolvedOutput& out, const CommandInput& input,
                HitPass pass) {
  // What the service opens comes in its spelling (ServedPath): its bytes
  // are what is on disk.
  const std::string path = input.kind == CommandInput::Kind::kFile
                               ? input.path
                               : UnescapeUtf8(input.path);
  struct stat in;
  if (path.empty() || ::stat(path.c_str(), &in) != 0) return "";
  const std::optional<std::string> real = RealPath(path);
  if (!real) return "";
  const std::string named = absl::StrCat(input.role, " '", input.path, "'");
  if (pass == HitPass::kItself) {
    const bool same_as_input = (out.st && SameFile(*out.st, in)) ||
                               (!out.full.empty() && out.full == *real);
    return same_as_input ? absl::StrCat(named, " itself") : "";
  }
  if (input.kind != CommandInput::Kind::kCheckpoint) return "";

  if (S_ISDIR(in.st_mode)) {
    const std::string inside = absl::StrCat("a file inside ", named);
    if (!out.full.empty() && IsBeneath(out.full, *real)) return inside;
    if (!out.st) return "";
    // An existing file elsewhere may still be one of its files under
    // another name (a hard link, or the blob a link inside points to).
    std::error_code ec;
    int seen = 0;
    for (std::filesystem::recursive_directory_iterator
             it(*real,
                std::filesystem::directory_options::skip_permission_denied, ec),
         end;
         !ec && it != end && seen < kMaxFilesCompared; it.increment(ec)) {
      struct stat f;
      ++seen;
      if (::stat(it->path().c_str(), &f) == 0 && S_ISREG(f.st_mode) &&
          SameFile(*out.st, f)) {
        return inside;
      }
    }
    return "";
  }

  // A checkpoint file: its companions beside the name given and beside the
  // file it resolves to (a Hub cache's snapshot links into a blob store).
  const std::string given_dir = RealPath(SplitPath(path).first).value_or("");
  for (const std::string& dir : {given_dir, SplitPath(*real).first}) {
    if (dir.empty()) continue;
    if (!out.full.empty()) {
      const auto [out_dir, out_name] = SplitPath(out.full);
      const std::string role = CompanionRole(out_name);
      if (out_dir == dir && !role.empty()) {
        return absl::StrCat(role, " beside ", named);
      }
    }
    if (!out.st) continue;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end;
         it.increment(ec)) {
      const std::string role = CompanionRole(it->path().filename().string());
      struct stat f;
      if (!role.empty() && ::stat(it->path().c_str(), &f) == 0 &&
          SameFile(*out.st, f)) {
        return absl::StrCat(role, " beside ", named, " ('", it->path().string(),
                            "')");
      }
    }
  }
  return "";
}

// ---- The signal handler's registry of temporaries ----

// One live temporary file. A handler may only read it: it is filled while
// `state` is kFilling and read only once kLive.
struct TempSlot {
  enum : int { kFree, kFilling, kLive };
  std::atomic<int> state{kFree};
  int dir_fd = -1;
  char name[NAME_MAX + 1] = {};
};
static_assert(std::atomic<int>::is_always_lock_free,
              "the handler reads the slots' state: it must not take a lock");

TempSlot g_temp_slots[OutputFile::kMaxOpenOutputs];

constexpr int kCleanedSignals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM};

// Async-signal-safe: unlinkat and raise only. SA_RESETHAND put the default
// action back, so the raise (pending until this returns) ends the process
// as the signal would have, exit status and all.
extern "C" void RemoveTemporariesAndDie(int signal) {
  const int saved_errno = errno;
  for (TempSlot& slot : g_temp_slots) {
    if (slot.state.load(std::memory_order_acquire) == TempSlot::kLive) {
      ::unlinkat(slot.dir_fd, slot.name, 0);
    }
  }
  ::raise(signal);
  errno = saved_errno;
}

// Installs the handler for the signals still at their default action: one
// the user ignores (nohup) stays ignored, and a handler someone else set
// is theirs.
void InstallHandlerOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action = {};
    action.sa_handler = RemoveTemporariesAndDie;
    action.sa_flags = SA_RESETHAND;
    sigemptyset(&action.sa_mask);
    for (int s : kCleanedSignals) sigaddset(&action.sa_mask, s);
    for (int s : kCleanedSignals) {
      struct sigaction old;
      if (::sigaction(s, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) &&
          old.sa_handler == SIG_DFL) {
        ::sigaction(s, &action, nullptr);
      }
    }
  });
}

// A free slot, now kFilling; -1 when all are taken.
int ClaimSlot() {
  for (int i = 0; i < OutputFile::kMaxOpenOutputs; ++i) {
    int expected = TempSlot::kFree;
    if (g_temp_slots[i].state.compare_exchange_strong(
            expected, TempSlot::kFilling, std::memory_order_acq_rel)) {
      return i;
    }
  }
  return -1;
}

// Publishes `name` in `dir_fd` for the handler to remove.
void FillSlot(int slot, int dir_fd, const std::string& name) {
  TempSlot& s = g_temp_slots[slot];
  s.state.store(TempSlot::kFilling, std::memory_order_release);
  s.dir_fd = dir_fd;
  std::memcpy(s.name, name.c_str(), name.size() + 1);
  s.state.store(TempSlot::kLive, std::memory_order_release);
}

void ReleaseSlot(int slot) {
  if (slot >= 0) {
    g_temp_slots[slot].state.store(TempSlot::kFree, std::memory_order_release);
  }
}

// `.NAME.tmp-XXXXXX`, hidden from ls and globs such as *.npy, and no longer
// than a name may be.
std::string TempName(const std::string& name, std::mt19937_64& random) {
  static constexpr char kChars[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string suffix = ".tmp-";
  for (int i = 0; i < 6; ++i) suffix += kChars[random() % (sizeof(kChars) - 1)];
  const size_t room = NAME_MAX - 1 - suffix.size();
  return absl::StrCat(".", absl::string_view(name).substr(0, room), suffix);
}

// `doing`: what failed, where it is not the file itself (its temporary).
absl::Status WriteError(const std::string& path, int error,
                        absl::string_view doing = "") {
  // A file too large for its filesystem is out of room, as a full disk is
  // (absl says OUT_OF_RANGE, which the CLI exits as a usage error).
  return absl::Status(
      error == EFBIG ? absl::StatusCode::kResourceExhausted
                     : absl::ErrnoToStatusCode(error),
      absl::StrCat("cannot write '", path, "': ", doing,
                   doing.empty() ? "" : ": ", std::strerror(error)));
}

}  // namespace

absl::Status CheckOutputIsNoInput(absl::string_view option,
                                  const std::string& output,
                                  const std::vector<CommandInput>& inputs) {
  if (output.empty()) return absl::OkStatus();
  const ResolvedOutput out = ResolveOutput(output);
  for (const HitPass pass : {HitPass::kItself, HitPass::kInsideOrBeside}) {
    for (const CommandInput& input : inputs) {
      const std::string hit = Hit(out, input, pass);
      if (hit.empty()) continue;
      return absl::InvalidArgumentError(
          absl::StrCat(option, " '", output, "' is an input of this command (",
                       hit, "): refusing to overwrite it; write it elsewhere"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckOutputIsNoServerInput(const GuardedOutput& guarded,
                                        Client& client) {
  if (guarded.output.empty()) return absl::OkStatus();
  const ResolvedOutput out = ResolveOutput(guarded.output);
  // The output's directory as the write will find it (a link at the
  // output is followed to the file it names).
  struct stat dir;
  const auto [out_dir, out_name] = SplitPath(out.full);
  const bool have_dir = !out.full.empty() && ::stat(out_dir.c_str(), &dir) == 0;
  const auto same = [](const v1::FileIdentity& id, const struct stat& st) {
    return id.inode() != 0 && id.device() == static_cast<uint64_t>(st.st_dev) &&
           id.inode() == static_cast<uint64_t>(st.st_ino);
  };
  // Where the output hits `input` as the server reads it, or "".
  const auto hit_of = [&](const CommandInput& input) -> std::string {
    if (input.kind == CommandInput::Kind::kImportanceMatrix) {
      absl::StatusOr<v1::GetImportanceMatrixResponse> m =
          client.GetImportanceMatrix(input.path);
      return m.ok() && out.st && same(m->identity(), *out.st) ? "the file" : "";
    }
    if (input.kind != CommandInput::Kind::kCheckpoint) return "";
    absl::StatusOr<v1::GetCheckpointResponse> ckpt =
        client.GetCheckpoint(input.path);
    if (!ckpt.ok()) return "";
    for (const v1::FileInfo& f : ckpt->files()) {
      if (out.st && same(f.identity(), *out.st)) {
        return absl::StrCat("its file '", f.path(), "'");
      }
    }
    const std::string role = CompanionRole(out_name);
    if (have_dir && !role.empty() && ckpt->has_directory() &&
        same(ckpt->directory(), dir)) {
      return absl::StrCat(role, " beside its files");
    }
    return "";
  };
  for (const CommandInput& input : guarded.inputs) {
    if (input.path.empty()) continue;
    const std::string hit = hit_of(input);
    if (hit.empty()) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        guarded.option, " '", guarded.output, "' is an input of this command (",
        hit, ": ", input.role, " '", input.path,
        "' as the server reads it): refusing to overwrite it; write it "
        "elsewhere"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<OutputFile>> CreateOutput(
    absl::string_view option, const std::string& path) {
  absl::StatusOr<std::unique_ptr<OutputFile>> file = OutputFile::Create(path);
  if (file.ok()) return file;
  return absl::Status(file.status().code(),
                      absl::StrCat(option, ": ", file.status().message()));
}

absl::StatusOr<std::unique_ptr<OutputFile>> OutputFile::Create(
    const std::string& path) {
  std::string target = path;
  struct stat st;
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) return WriteError(path, EISDIR);
  if (exists && !S_ISREG(st.st_mode)) {
    // A device or a pipe: no previous content to keep, no name to rename.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return WriteError(path, errno);
    return std::unique_ptr<OutputFile>(
        new OutputFile(path, -1, fd, "", "", -1));
  }
  struct stat link;
  if (exists && ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
    // Replace the file the link names, keeping the link.
    if (auto real = RealPath(path)) target = *real;
  }
  auto [dir, name] = SplitPath(target);
  if (name.empty() || name == "." || name == "..") {
    return WriteError(path, EISDIR);
  }
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return WriteError(path, errno);

  InstallHandlerOnce();
  const int slot = ClaimSlot();
  if (slot < 0) {
    ::close(dir_fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot write '", path, "': more than ", kMaxOpenOutputs,
                     " outputs open at once"));
  }
  std::mt19937_64 random(std::random_device{}());
  for (int attempt = 0; attempt < 100; ++attempt) {
    const std::string temp = TempName(name, random);
    // Published before it exists, so that no signal finds it unlisted.
    FillSlot(slot, dir_fd, temp);
    const int fd = ::openat(dir_fd, temp.c_str(),
                            O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) {
      const int error = errno;
      ReleaseSlot(slot);
      ::close(dir_fd);
      // The file is written beside itself first and renamed: a directory
      // that takes no new file (read-only, /proc) refuses that.
      return WriteError(path, error,
                        absl::StrCat("creating its temporary in '", dir, "'"));
    }
    // A replaced file keeps its permission bits, as a truncating open
    // would have kept them.
    if (exists) ::fchmod(fd, st.st_mode & 07777);
    return std::unique_ptr<OutputFile>(
        new OutputFile(path, dir_fd, fd, temp, name, slot));
  }
  ReleaseSlot(slot);
  ::close(dir_fd);
  return WriteError(path, EEXIST);
}

OutputFile::OutputFile(std::string path, int dir_fd, int fd,
                       std::string temp_name, std::string final_name, int slot)
    : path_(std::move(path)),
      dir_fd_(dir_fd),
      fd_(fd),
      temp_name_(std::move(temp_name)),
      final_name_(std::move(final_name)),
      slot_(slot) {}

OutputFile::~OutputFile() { Discard(); }

void OutputFile::Discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!committed_ && !temp_name_.empty()) {
    ::unlinkat(dir_fd_, temp_name_.c_str(), 0);
  }
  ReleaseSlot(slot_);
  slot_ = -1;
  if (dir_fd_ >= 0) ::close(dir_fd_);
  dir_fd_ = -1;
}

absl::Status OutputFile::Error(int error) const {
  return WriteError(path_, error);
}

absl::Status OutputFile::Write(absl::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError("write after Commit()");
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error(errno);
    if (n == 0) return Error(EIO);  // would loop forever
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status OutputFile::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError("a second Commit()");
  if (temp_name_.empty()) {  // written in place
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) return Error(errno);
    committed_ = true;
    return absl::OkStatus();
  }
  // Data before name: after a crash the name holds the old file or the
  // whole new one, never a prefix of it.
  if (::fsync(fd_) != 0) return Error(errno);
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) return Error(errno);
  if (::renameat(dir_fd_, temp_name_.c_str(), dir_fd_, final_name_.c_str()) !=
      0) {
    return Error(errno);
  }
  committed_ = true;
  ReleaseSlot(slot_);
  slot_ = -1;
  ::fsync(dir_fd_);  // the rename itself; a filesystem may not support it
  return absl::OkStatus();
}

}  // namespace tensormorph
