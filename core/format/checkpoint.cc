#include "core/format/checkpoint.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <optional>
#include <regex>
#include <thread>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/format/checkpoint_files.h"
#include "core/format/gguf_reader.h"
#include "core/format/json_header.h"
#include "core/format/safetensors_reader.h"
#include "core/io/fault_guard.h"
#include "core/io/writer_probe.h"
#include "core/quant/convention_resolver.h"
#include "core/quant/stored_encoding.h"
#include "core/util/error_reason.h"
#include "core/util/status_macros.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TM_LEAK_CHECKED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TM_LEAK_CHECKED 1
#endif
#ifdef TM_LEAK_CHECKED
#include <sanitizer/lsan_interface.h>
#endif

namespace tensormorph {
namespace {

constexpr absl::string_view kIndexName = "model.safetensors.index.json";
constexpr int64_t kMaxConfigBytes = 16 << 20;
// Read beside safetensors, in this order (Finish).
constexpr absl::string_view kConfigNames[] = {
    "config.json", "quantize_config.json", "quant_config.json",
    "hf_quant_config.json"};
// An index of 100,000 tensors is about 10 MB.
constexpr int64_t kMaxIndexBytes = 256 << 20;

std::string Basename(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}
std::string Dirname(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}
std::string Join(const std::string& dir, absl::string_view name) {
  if (!dir.empty() && dir.back() == '/') return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

bool DecidesWhatOpens(absl::string_view name) {
  return absl::EndsWith(name, ".safetensors") ||
         absl::EndsWith(name, ".gguf") || name == kIndexName ||
         std::find(std::begin(kConfigNames), std::end(kConfigNames), name) !=
             std::end(kConfigNames);
}

// Regular files directly inside `dir`, sorted by name.
// Errors: NOT_FOUND (cannot list); PERMISSION_DENIED (a name that decides
// what opens leads out of the roots).
absl::StatusOr<std::vector<std::string>> ListFiles(
    const std::string& dir, const CheckpointFiles& files) {
  absl::StatusOr<std::vector<std::string>> all = files.ListDirectory(dir);
  if (!all.ok()) {
    return absl::NotFoundError(absl::StrCat("cannot list directory '", dir,
                                            "': ", all.status().message()));
  }
  std::vector<std::string> paths;
  for (const std::string& name : *all) paths.push_back(Join(dir, name));
  files.Prefetch(paths);
  std::vector<std::string> names;
  for (std::string& name : *all) {
    absl::StatusOr<struct stat> st = files.Stat(Join(dir, name));
    // A name that decides what opens (a shard, the index, a config) and
    // leads out of the roots refuses the open: serving the rest as though
    // it were absent would answer for another checkpoint.
    if (absl::IsPermissionDenied(st.status()) && DecidesWhatOpens(name)) {
      return st.status();
    }
    if (st.ok() && S_ISREG(st->st_mode)) names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

// `prefix-00001-of-00003.gguf` → (prefix, 1, 3).
struct SplitName {
  std::string prefix;
  int index = 0;
  int count = 0;
};
std::optional<SplitName> ParseSplitName(const std::string& name) {
  static const std::regex kPattern(R"((.*)-(\d{5})-of-(\d{5})\.gguf)");
  std::smatch m;
  if (!std::regex_match(name, m, kPattern)) return std::nullopt;
  SplitName s{m[1].str(), std::stoi(m[2].str()), std::stoi(m[3].str())};
  if (s.index < 1 || s.count < 1 || s.index > s.count) return std::nullopt;
  return s;
}
std::string SplitFileName(const SplitName& s, int index) {
  return absl::StrFormat("%s-%05d-of-%05d.gguf", s.prefix, index, s.count);
}

// A JSON text (the index), not a safetensors length prefix that happens to
// start with '{' (a 123-byte header): JSON has no NUL among its first bytes.
bool LooksLikeSafetensorsIndex(absl::Span<const uint8_t> bytes) {
  size_t i = 0;
  while (i < bytes.size() && std::isspace(bytes[i])) ++i;
  if (i >= bytes.size() || bytes[i] != '{') return false;
  for (size_t k = i; k < std::min<size_t>(bytes.size(), i + 8); ++k) {
    if (bytes[k] == 0) return false;
  }
  return true;
}

// DATA_LOSS INDEX_INVALID: the index `file` and its shards break `rule` (the
// check's rule name where it has one).
absl::Status IndexInvalid(absl::string_view file, absl::string_view rule,
                          std::string message) {
  return WithReason(absl::DataLossError(std::move(message)),
                    ErrorReason::kIndexInvalid,
                    {{"file", std::string(file)}, {"rule", std::string(rule)}});
}

// The tensors an index places in one shard (views of the index's keys).
using TensorNames = absl::flat_hash_set<absl::string_view>;
// Shard file name -> the tensors the index places there, in name order.
using ShardTensors = std::map<std::string, TensorNames>;

// Parses a safetensors index into `index` and, from it, `shards`: shard file
// name -> the tensors the weight_map places there (views of `index`'s keys,
// valid while it lives). DATA_LOSS INDEX_INVALID naming `what` (the index
// file `file`, which the metadata holds) and the rule broken: not JSON, not
// an object with a 'weight_map' object, an entry that is not a string, or
// one that is not a plain file name (a hostile index must not reach outside
// its directory).
absl::Status ReadWeightMap(absl::string_view text, absl::string_view file,
                           absl::string_view what, nlohmann::json* index,
                           ShardTensors* shards) {
  auto invalid = [&](absl::string_view rule, std::string message) {
    return IndexInvalid(file, rule, std::move(message));
  };
  absl::StatusOr<nlohmann::json> parsed = ParseStrictJson(text, what);
  if (!parsed.ok()) {
    return invalid("json", std::string(parsed.status().message()));
  }
  *index = *std::move(parsed);
  if (!index->is_object() || !index->contains("weight_map") ||
      !(*index)["weight_map"].is_object()) {
    // A JSON file that is no index at all (a config.json named by
    // mistake) says what to name instead.
    const bool no_map = !index->is_object() || !index->contains("weight_map");
    return invalid(
        "weight-map-object",
        absl::StrCat(what, ": expected an object with a 'weight_map' object",
                     no_map ? " (this JSON has none: it is no safetensors "
                              "index such as model.safetensors.index.json; "
                              "to open a checkpoint, name its directory, its "
                              "index, or a .safetensors or .gguf file)"
                            : ""));
  }
  for (const auto& [tensor, shard] : (*index)["weight_map"].items()) {
    if (!shard.is_string()) {
      return invalid("weight-map-file-name",
                     absl::StrCat(what, ": weight_map['", tensor,
                                  "'] must be a file name string"));
    }
    const std::string& name = shard.get_ref<const std::string&>();
    if (name.empty() || name.find('/') != std::string::npos || name == "." ||
        name == "..") {
      return invalid(
          "weight-map-file-name",
          absl::StrCat(what, ": weight_map['", tensor, "'] = '", name,
                       "' is not a plain file name in the index's directory"));
    }
    (*shards)[name].insert(tensor);
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view FormatName(CheckpointFormat format) {
  return format == CheckpointFormat::kGguf ? "gguf" : "safetensors";
}

namespace {

// The names of `all` (a listing of `dir`) that decide what opens, sorted.
absl::StatusOr<std::vector<std::string>> NamesThatDecide(
    const std::string& dir, absl::StatusOr<std::vector<std::string>> all) {
  if (!all.ok()) {
    return absl::NotFoundError(absl::StrCat("cannot list directory '", dir,
                                            "': ", all.status().message()));
  }
  std::vector<std::string> names;
  for (std::string& entry : *all) {
    const absl::string_view name = entry;
    if (DecidesWhatOpens(name)) {
      names.push_back(std::move(entry));
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ListCheckpointNames(
    const std::string& dir, const CheckpointFiles& files) {
  return NamesThatDecide(dir, files.ListDirectory(dir));
}

absl::StatusOr<std::vector<std::string>> ListCheckpointNames(
    const std::string& dir, const FileAccess& access) {
  return NamesThatDecide(dir, access.ListDirectory(dir));
}

// A fault while reading `path` at open: the file shrank under its mapping.
static absl::Status ChangedWhileOpened(const std::string& path,
                                       const absl::Status& fault) {
  return WithReason(absl::FailedPreconditionError(absl::StrCat(
                        "'", path, "' changed while it was opened (",
                        fault.message(), "); try again")),
                    ErrorReason::kFileChanged, {{"file", path}});
}

// Parses a header under the fault guard: a file shrunk between its mapping
// and its parse fails the open, not the process. (A fault there skips the
// parser's destructors: a partial header leaks, once per such fault. Under
// LeakSanitizer this thread's allocations meanwhile are exempt: a
// suppression by stack missed them where libabsl has no frame pointers.)
template <typename T, typename Parse>
absl::StatusOr<T> ParseGuarded(const std::string& path, const Parse& parse) {
#ifdef TM_LEAK_CHECKED
  struct LeakCheckPause {
    LeakCheckPause() { __lsan_disable(); }
    ~LeakCheckPause() { __lsan_enable(); }
  } pause;
#endif
  std::optional<absl::StatusOr<T>> out;
  absl::Status s = GuardedRead([&]() -> absl::Status {
    out.emplace(parse());
    return absl::OkStatus();
  });
  if (!s.ok()) return ChangedWhileOpened(path, s);
  return *std::move(out);
}

namespace {

// One shard an index names: its mapping and parsed header, or the status
// that stopped either.
struct ParsedShard {
  const std::string* name;
  std::shared_ptr<const MappedFile> m;
  absl::StatusOr<SafetensorsHeader> header = absl::UnknownError("unparsed");
};

// Maps and parses the shards `shards` names (in `dir`) on a few threads: they
// are independent, and headers of thousands of tensors are most of an open's
// time. The result is in `shards`' name order, so errors and layout do not
// depend on timing; its names point into `shards`' keys.
std::vector<ParsedShard> ParseShards(const CheckpointFiles& files,
                                     const std::string& dir,
                                     const ShardTensors& shards) {
  std::vector<ParsedShard> parsed;
  for (const auto& entry : shards) parsed.push_back({&entry.first, nullptr});
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < parsed.size();) {
      ParsedShard& sh = parsed[i];
      const std::string path = Join(dir, *sh.name);
      auto m = files.Map(path);
      if (!m.ok()) {
        sh.header = m.status();
        continue;
      }
      sh.m = *std::move(m);
      sh.header = ParseGuarded<SafetensorsHeader>(
          path, [&] { return ParseSafetensors(sh.m->bytes(), path); });
    }
  };
  const size_t threads = std::min<size_t>(
      {parsed.size(), std::max(1u, std::thread::hardware_concurrency()), 4});
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
  return parsed;
}

// A shard as its index places it, for the checks that hold one to the other.
struct ShardPlace {
  const std::string& index_path;
  absl::string_view what;      // "index '<index_path>'", as messages name it
  const std::string& name;     // as the weight_map names it
  std::string path;            // `name` in the index's directory
  const TensorNames& tensors;  // the tensors the weight_map places there
};

// The first of `tensors` in name order ("" when none): the tensor a problem
// with the whole shard names.
std::string FirstTensor(const TensorNames& tensors) {
  std::vector<absl::string_view> some(tensors.begin(), tensors.end());
  std::sort(some.begin(), some.end());
  return some.empty() ? "" : std::string(some.front());
}

}  // namespace

// Assembles a Checkpoint from files; keeps Open() readable.
class CheckpointBuilder {
 public:
  CheckpointBuilder(std::string path, const OpenOptions& options)
      : ckpt_(new Checkpoint()),
        options_(options),
        files_(
            options.access != nullptr ? options.access : FileAccess::Anywhere(),
            options.remote, options.backings) {
    ckpt_->path_ = std::move(path);
    ckpt_->access_ =
        options.access != nullptr ? options.access : FileAccess::Anywhere();
    ckpt_->remote_ = options.remote;
    ckpt_->backings_ = options.backings;
  }

  absl::StatusOr<std::shared_ptr<const Checkpoint>> OpenPath();

 private:
  using Mapping = std::shared_ptr<const MappedFile>;
  // Each Add* maps `p` unless handed the mapping already.
  absl::Status AddSafetensors(const std::string& p, Mapping m = nullptr);
  absl::Status AddParsedSafetensors(const std::string& p, Mapping m,
                                    SafetensorsHeader h);
  absl::Status AddGguf(const std::string& p, Mapping m = nullptr);
  absl::StatusOr<int> AddFile(const std::string& p, Mapping* m) {
    if (*m == nullptr) {
      TM_ASSIGN_OR_RETURN(*m, files_.Map(p));
    }
    ckpt_->files_.push_back({p, *m});
    return static_cast<int>(ckpt_->files_.size()) - 1;
  }
  absl::Status OpenGgufSet(const std::string& p, Mapping m);
  // Opens the shards the index at `index_path` names. Lenient: a shard that
  // fails its rules is shard-corrupt (AddIndexedShard) unless none opens:
  // then nothing is left to check, and the first one's error fails the open.
  absl::Status OpenSafetensorsIndex(const std::string& index_path);
  // Of the shards `shards` names (for the index at `index_path`, `what` in
  // messages), removes those absent here and records them absent. Fails on
  // a shard refused (outside the roots); strict, on one its backing lacks
  // (the store's reason) and, unless absent shards are allowed, on one
  // missing (INDEX_INVALID shard-missing). NOT_FOUND when none is left.
  absl::Status SetAsideAbsentShards(const std::string& index_path,
                                    absl::string_view what,
                                    ShardTensors* shards);
  // Records the shard at `path` absent, and with it `tensors`.
  void MarkShardAbsent(const std::string& path, const TensorNames& tensors);
  // Adds a parsed shard `sh` and holds it to the index (`tensors` are those
  // the index places there). Lenient: a shard that failed to parse is
  // shard-corrupt and absent, and a mismatch is a problem, not an error.
  absl::Status AddIndexedShard(const std::string& index_path,
                               absl::string_view what,
                               const TensorNames& tensors, ParsedShard& sh);
  // The tensors stored from position `first` on (a shard's) that the index
  // does not place there: INDEX_INVALID shard-tensor-unindexed, or (lenient)
  // problems and unindexed_.
  absl::Status CheckUnindexedTensors(const ShardPlace& shard, size_t first);
  // The tensors the index places in the shard stored from position `first`
  // on that it lacks: INDEX_INVALID index-tensor-missing, or (lenient)
  // problems in name order.
  absl::Status CheckLackingTensors(const ShardPlace& shard, size_t first);
  absl::Status OpenGgufSet(const std::string& p);
  absl::Status OpenDirectory(const std::string& dir);
  // Every .safetensors file in `dir`, in name order. Lenient: a file that
  // fails its rules is a shard-corrupt problem, and the rest open (an error
  // only when none does).
  absl::Status AddSafetensorsFiles(const std::string& dir);
  // Lenient: records the index at `index_path` as index-corrupt (`expected`
  // vs `actual`) and opens the directory's shards as though it were absent;
  // when none opens, the error names the index's problem too.
  absl::Status OpenShardsPastIndex(const std::string& index_path,
                                   absl::string_view expected,
                                   const std::string& actual);
  absl::Status OpenFile(const std::string& p);
  // Indexes what was opened: names, logical tensors (by convention, from the
  // configs beside safetensors) and parts.
  absl::Status Finish();
  // A name stored twice fails a strict open (DATA_LOSS). Lenient: one copy
  // stays, the copy the index places where there is one, else the first; the
  // other is a duplicate-name problem and goes from stored_.
  absl::Status DropDuplicateNames();
  // GGUF: each stored tensor is a logical tensor of convention ggml, in name
  // order.
  void ResolveGgufTensors();
  // Safetensors: the configs beside the checkpoint read (and watched), and
  // the stored tensors resolved by convention (withheld modules aside).
  absl::Status ResolveSafetensorsTensors();
  // Reads config `name` in `dir` into `out` (nullopt when absent). Lenient:
  // one that fails to read is a config-key problem and reads as absent.
  absl::Status ReadConfigInto(const std::string& dir, absl::string_view name,
                              std::optional<nlohmann::json>* out);
  void BuildParts();
  // Partial opens: fills absent_modules_ and resolved_from_ (see
  // Checkpoint's members).
  void WithholdAbsentModules();

  std::unique_ptr<Checkpoint> ckpt_;
  const OpenOptions options_;
  // Every file is opened, listed and stat'ed through this (OpenOptions).
  const CheckpointFiles files_;
  // Lenient: positions in stored_ of tensors a shard holds where the index
  // does not place them (shard-tensor-unindexed); of a name stored twice,
  // Finish keeps the copy the index places.
  absl::flat_hash_set<size_t> unindexed_;
};

absl::Status CheckpointBuilder::AddSafetensors(const std::string& p,
                                               Mapping m) {
  if (m == nullptr) {
    TM_ASSIGN_OR_RETURN(m, files_.Map(p));
  }
  TM_ASSIGN_OR_RETURN(SafetensorsHeader h,
                      ParseGuarded<SafetensorsHeader>(
                          p, [&] { return ParseSafetensors(m->bytes(), p); }));
  return AddParsedSafetensors(p, std::move(m), std::move(h));
}

absl::Status CheckpointBuilder::AddParsedSafetensors(const std::string& p,
                                                     Mapping m,
                                                     SafetensorsHeader h) {
  ckpt_->format_ = CheckpointFormat::kSafetensors;
  TM_ASSIGN_OR_RETURN(const int file_index, AddFile(p, &m));
  for (StoredTensor& t : h.tensors) {
    t.file_index = file_index;
    ckpt_->stored_.push_back(std::move(t));
  }
  for (auto& [k, v] : h.metadata) {
    ckpt_->metadata_.push_back({k, "string", v, v, file_index});
  }
  return absl::OkStatus();
}

absl::Status CheckpointBuilder::AddGguf(const std::string& p, Mapping m) {
  ckpt_->format_ = CheckpointFormat::kGguf;
  TM_ASSIGN_OR_RETURN(const int file_index, AddFile(p, &m));
  TM_ASSIGN_OR_RETURN(GgufFile g, ParseGuarded<GgufFile>(p, [&] {
                        return ParseGguf(m->bytes(), p);
                      }));
  for (StoredTensor& t : g.tensors) {
    t.file_index = file_index;
    ckpt_->stored_.push_back(std::move(t));
  }
  if (file_index == 0) {
    // Values are views of the mapping. A fault under the guard unwinds with
    // siglongjmp, past every destructor, so nothing is allocated there:
    // their bytes are copied into storage sized here, and the copies are
    // rendered after. (Each value is a distinct range of the file: the sum
    // is at most its size.)
    std::vector<size_t> at(g.metadata.size());
    size_t total = 0;
    for (size_t k = 0; k < g.metadata.size(); ++k) {
      at[k] = total;
      total += g.metadata[k].str.size() + g.metadata[k].raw.size();
    }
    std::string bytes(total, '\0');
    if (absl::Status s = GuardedRead([&] {
          for (size_t k = 0; k < g.metadata.size(); ++k) {
            const GgufKv& kv = g.metadata[k];
            char* out = bytes.data() + at[k];
            if (!kv.str.empty()) {
              std::memcpy(out, kv.str.data(), kv.str.size());
            }
            if (!kv.raw.empty()) {
              std::memcpy(out + kv.str.size(), kv.raw.data(), kv.raw.size());
            }
          }
          return absl::OkStatus();
        });
        !s.ok()) {
      return ChangedWhileOpened(p, s);
    }
    for (size_t k = 0; k < g.metadata.size(); ++k) {
      GgufKv kv = g.metadata[k];
      kv.str = absl::string_view(bytes.data() + at[k], kv.str.size());
      kv.raw =
          absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()) +
                                  at[k] + kv.str.size(),
                              kv.raw.size());
      std::string type(GgufTypeName(kv.type));
      if (kv.type == GgufType::kArray) {
        type = absl::StrCat("array<", GgufTypeName(kv.elem_type), ">");
      }
      ckpt_->metadata_.push_back(
          {kv.key, type, GgufValueToString(kv),
           kv.type == GgufType::kString ? std::string(kv.str) : ""});
    }
    ckpt_->gguf_kv_ = std::move(g.metadata);
  }
  return absl::OkStatus();
}

absl::Status CheckpointBuilder::OpenGgufSet(const std::string& p, Mapping m) {
  const std::string dir = Dirname(p);
  auto split = ParseSplitName(Basename(p));
  if (!split) return AddGguf(p, std::move(m));
  for (int i = 1; i <= split->count; ++i) {
    const std::string part = Join(dir, SplitFileName(*split, i));
    absl::StatusOr<struct stat> present = files_.Stat(part);
    if (!present.ok() && !absl::IsNotFound(present.status())) {
      return present.status();
    }
    if (!present.ok()) {
      return IndexInvalid(
          p, "split-missing",
          absl::StrCat("split GGUF '", p, "': split ", i, " of ", split->count,
                       " ('", part, "') is missing"));
    }
    TM_RETURN_IF_ERROR(AddGguf(part));
  }
  return absl::OkStatus();
}

absl::Status CheckpointBuilder::OpenSafetensorsIndex(
    const std::string& index_path) {
  // Read, not mapped: an index truncated while it is parsed is a status.
  TM_ASSIGN_OR_RETURN(const FileIdentity index_identity,
                      files_.Identity(index_path));
  ckpt_->read_files_.push_back({index_path, index_identity});
  TM_ASSIGN_OR_RETURN(const std::string text,
                      files_.ReadWhole(index_path, kMaxIndexBytes));
  const std::string what = absl::StrCat("index '", index_path, "'");
  // shard file name -> tensors the index places there (views of the
  // document's keys)
  ShardTensors shards;
  nlohmann::json index;
  if (absl::Status s = ReadWeightMap(text, index_path, what, &index, &shards);
      !s.ok()) {
    if (!options_.lenient) return s;
    return OpenShardsPastIndex(
        index_path,
        "a JSON object with a 'weight_map' object of plain shard file names",
        std::string(s.message()));
  }
  const std::string dir = Dirname(index_path);
  {
    std::vector<std::string> paths;
    for (const auto& entry : shards) paths.push_back(Join(dir, entry.first));
    files_.Prefetch(paths);  // remote shards: opened at once, not in turn
  }
  TM_RETURN_IF_ERROR(SetAsideAbsentShards(index_path, what, &shards));
  std::vector<ParsedShard> parsed = ParseShards(files_, dir, shards);
  if (options_.lenient && !parsed.empty() &&
      std::none_of(parsed.begin(), parsed.end(),
                   [](const ParsedShard& sh) { return sh.header.ok(); })) {
    // Nothing to check: fail as a directory of corrupt files without an
    // index does, so that whether a check runs never depends on the index.
    const absl::Status& first = parsed.front().header.status();
    const size_t absent = ckpt_->absent_files_.size();
    return CopyReason(
        first, absl::Status(
                   first.code(),
                   absl::StrCat(
                       what, ": no shard its weight_map names opens (",
                       parsed.size(), " corrupt",
                       absent > 0 ? absl::StrCat(", ", absent, " absent") : "",
                       "), so there is nothing to check; the first: ",
                       first.message())));
  }
  size_t total = ckpt_->stored_.size();
  for (const ParsedShard& sh : parsed) {
    if (sh.header.ok()) total += sh.header->tensors.size();
  }
  ckpt_->stored_.reserve(total);
  for (ParsedShard& sh : parsed) {
    // `parsed` was built from `shards`' keys: the name is always there.
    TM_RETURN_IF_ERROR(
        AddIndexedShard(index_path, what, shards.find(*sh.name)->second, sh));
  }
  return absl::OkStatus();
}

absl::Status CheckpointBuilder::SetAsideAbsentShards(
    const std::string& index_path, absl::string_view what,
    ShardTensors* shards) {
  const std::string dir = Dirname(index_path);
  for (auto it = shards->begin(); it != shards->end();) {
    const auto& [name, tensors] = *it;
    const std::string shard_path = Join(dir, name);
    absl::StatusOr<struct stat> present = files_.Stat(shard_path);
    if (present.ok()) {
      ++it;
      continue;
    }
    // Refused (a symlink out of the roots), not absent: say so.
    if (!absl::IsNotFound(present.status())) return present.status();
    if (files_.BackingOf(shard_path).has_value() && !options_.lenient) {
      // Absent from the disk and its backing: the store's NOT_FOUND names
      // the URL it asked for.
      return CopyReason(
          present.status(),
          absl::NotFoundError(absl::StrCat(
              what, ": weight_map names shard '", name, "' for ",
              tensors.size(), " tensors, and neither '", shard_path,
              "' nor its backing holds it: ", present.status().message())));
    }
    if (!options_.allow_absent_shards && !options_.lenient) {
      return IndexInvalid(
          index_path, "shard-missing",
          absl::StrCat(what, ": weight_map names shard '", name, "' for ",
                       tensors.size(), " tensors but '", shard_path,
                       "' does not exist"));
    }
    if (!options_.allow_absent_shards) {
      ckpt_->problems_.push_back(
          {.rule = "shard-missing",
           .tensor = FirstTensor(tensors),
           .message = "",
           .file = index_path,
           .key = "",
           .expected =
               absl::StrCat("shard '", name, "', which weight_map names for ",
                            tensors.size(), " tensors"),
           .actual = absl::StrCat("'", shard_path, "' does not exist")});
    }
    // Absent, not a DATA_LOSS: another server holds it. Should it appear,
    // the cache must reopen (a read file that came).
    ckpt_->read_files_.push_back({shard_path, std::nullopt});
    MarkShardAbsent(shard_path, tensors);
    it = shards->erase(it);
  }
  if (shards->empty() && !ckpt_->absent_files_.empty()) {
    return absl::NotFoundError(
        absl::StrCat(what, ": none of the ", ckpt_->absent_files_.size(),
                     " shard files its weight_map names exists here"));
  }
  return absl::OkStatus();
}

void CheckpointBuilder::MarkShardAbsent(const std::string& path,
                                        const TensorNames& tensors) {
  const size_t absent = ckpt_->absent_files_.size();
  ckpt_->absent_files_.push_back({path, static_cast<int64_t>(tensors.size())});
  for (absl::string_view t : tensors) {
    ckpt_->absent_tensors_.emplace(std::string(t), absent);
  }
}

absl::Status CheckpointBuilder::AddIndexedShard(const std::string& index_path,
                                                absl::string_view what,
                                                const TensorNames& tensors,
                                                ParsedShard& sh) {
  const ShardPlace shard{index_path, what, *sh.name,
                         Join(Dirname(index_path), *sh.name), tensors};
  if (!sh.header.ok()) {
    if (!options_.lenient) return sh.header.status();
    // Its tensors are as good as missing; the other shards are checked.
    ckpt_->problems_.push_back(
        {.rule = "shard-corrupt",
         .tensor = FirstTensor(tensors),
         .message = "",
         .file = shard.path,
         .key = "",
         .expected =
             absl::StrCat("a safetensors file holding the ", tensors.size(),
                          " tensors the weight_map places there"),
         .actual = std::string(sh.header.status().message())});
    MarkShardAbsent(shard.path, tensors);
    return absl::OkStatus();
  }
  const size_t before = ckpt_->stored_.size();
  TM_RETURN_IF_ERROR(
      AddParsedSafetensors(shard.path, std::move(sh.m), *std::move(sh.header)));
  TM_RETURN_IF_ERROR(CheckUnindexedTensors(shard, before));
  return CheckLackingTensors(shard, before);
}

absl::Status CheckpointBuilder::CheckUnindexedTensors(const ShardPlace& shard,
                                                      size_t first) {
  for (size_t i = first; i < ckpt_->stored_.size(); ++i) {
    const std::string& t = ckpt_->stored_[i].name;
    if (shard.tensors.contains(t)) continue;
    if (!options_.lenient) {
      return IndexInvalid(
          shard.index_path, "shard-tensor-unindexed",
          absl::StrCat(shard.what, ": shard '", shard.name, "' holds tensor '",
                       t, "' which the weight_map does not place there"));
    }
    unindexed_.insert(i);
    ckpt_->problems_.push_back(
        {.rule = "shard-tensor-unindexed",
         .tensor = t,
         .message = "",
         .file = shard.path,
         .key = "",
         .expected = absl::StrCat("weight_map of '", shard.index_path,
                                  "' places '", t, "' in '", shard.name, "'"),
         .actual = "the weight_map does not place it there"});
  }
  return absl::OkStatus();
}

absl::Status CheckpointBuilder::CheckLackingTensors(const ShardPlace& shard,
                                                    size_t first) {
  // Every tensor of the shard is placed there, once (a header has no
  // duplicate keys): the index places no more iff the counts agree.
  if (!options_.lenient &&
      ckpt_->stored_.size() - first == shard.tensors.size()) {
    return absl::OkStatus();
  }
  absl::flat_hash_set<absl::string_view> present;
  for (size_t i = first; i < ckpt_->stored_.size(); ++i) {
    present.insert(ckpt_->stored_[i].name);
  }
  std::vector<absl::string_view> lacking;
  for (absl::string_view t : shard.tensors) {
    if (present.contains(t)) continue;
    if (!options_.lenient) {
      return IndexInvalid(
          shard.index_path, "index-tensor-missing",
          absl::StrCat(shard.what, ": weight_map places tensor '", t,
                       "' in shard '", shard.name, "' but the shard lacks it"));
    }
    lacking.push_back(t);
  }
  std::sort(lacking.begin(), lacking.end());  // not in hash order
  for (absl::string_view t : lacking) {
    ckpt_->problems_.push_back(
        {.rule = "index-tensor-missing",
         .tensor = std::string(t),
         .message = "",
         .file = shard.path,
         .key = "",
         .expected = absl::StrCat("'", t, "' in shard '", shard.name,
                                  "', where the weight_map of '",
                                  shard.index_path, "' places it"),
         .actual = "the shard lacks it"});
  }
  return absl::OkStatus();
}

absl::Status CheckpointBuilder::OpenFile(const std::string& p) {
  TM_ASSIGN_OR_RETURN(auto m, files_.Map(p));
  // Sniffing reads the mapping too: under the guard, like every parse.
  const auto bytes = m->bytes();
  bool gguf = false, index = false, safetensors = false;
  if (absl::Status s = GuardedRead([&] {
        gguf = LooksLikeGguf(bytes);
        index = LooksLikeSafetensorsIndex(bytes);
        safetensors = LooksLikeSafetensors(bytes);
        return absl::OkStatus();
      });
      !s.ok()) {
    return ChangedWhileOpened(p, s);
  }
  // A file named .gguf is held to GGUF's rules whatever its first bytes:
  // one whose magic is damaged ("GGUX") is a broken GGUF, and read as
  // safetensors it would only break a rule it never meant to follow
  // (header-limit), never GGUF's `magic`.
  if (gguf || absl::EndsWithIgnoreCase(p, ".gguf")) {
    return OpenGgufSet(p, std::move(m));
  }
  if (index) return OpenSafetensorsIndex(p);
  // safetensors has no magic: anything else must pass its rules, and a file
  // that does not gets the precise rule it broke.
  absl::Status s = AddSafetensors(p, m);
  if (!s.ok() && !safetensors) {
    // The safetensors rule's reason stays: the message only says more.
    return CopyReason(
        s, absl::Status(s.code(),
                        absl::StrCat(s.message(),
                                     " (the file has no GGUF magic either, so "
                                     "it was read as safetensors)")));
  }
  return s;
}

absl::Status CheckpointBuilder::AddSafetensorsFiles(const std::string& dir) {
  TM_ASSIGN_OR_RETURN(std::vector<std::string> names, ListFiles(dir, files_));
  absl::Status first_error;
  bool added = false;
  auto corrupt = [&](const std::string& path, absl::string_view why) {
    ckpt_->problems_.push_back({.rule = "shard-corrupt",
                                .tensor = "",
                                .message = "",
                                .file = path,
                                .key = "",
                                .expected = "a safetensors file",
                                .actual = std::string(why)});
  };
  for (const std::string& n : names) {
    if (!absl::EndsWith(n, ".safetensors")) continue;
    const std::string path = Join(dir, n);
    absl::Status s = AddSafetensors(path);
    if (s.ok()) {
      added = true;
      continue;
    }
    if (!options_.lenient) return s;
    if (first_error.ok()) first_error = s;
    corrupt(path, s.message());
  }
  if (options_.lenient) {
    // A name a loader would try that is no regular file (a dangling
    // symlink, a loop, a directory, a FIFO): never opened, reported.
    TM_ASSIGN_OR_RETURN(std::vector<std::string> all,
                        ListCheckpointNames(dir, files_));
    for (const std::string& n : all) {
      if (!absl::EndsWith(n, ".safetensors") ||
          std::binary_search(names.begin(), names.end(), n)) {
        continue;
      }
      const std::string path = Join(dir, n);
      const std::string why = absl::StrCat(
          "'", path,
          "' is not a regular file that can be read (a dangling or looping "
          "symlink, a directory, a FIFO...)");
      if (first_error.ok()) first_error = absl::DataLossError(why);
      corrupt(path, why);
    }
  }
  if (added) return absl::OkStatus();
  if (!first_error.ok()) return first_error;  // nothing left to check
  return WithReason(absl::NotFoundError(absl::StrCat(
                        "directory '", dir, "' holds no .safetensors file")),
                    ErrorReason::kCheckpointNotFound, {{"checkpoint", dir}});
}

absl::Status CheckpointBuilder::OpenShardsPastIndex(
    const std::string& index_path, absl::string_view expected,
    const std::string& actual) {
  ckpt_->problems_.push_back(
      {.rule = "index-corrupt",
       .tensor = "",
       .message = "",
       .file = index_path,
       .key = "",
       .expected = std::string(expected),
       .actual =
           absl::StrCat(actual,
                        "; the directory's .safetensors files were checked "
                        "instead")});
  absl::Status s = AddSafetensorsFiles(Dirname(index_path));
  if (s.ok()) return s;
  // Nothing to check: the refusal says why the index was passed over too.
  return CopyReason(
      s,
      absl::Status(s.code(), absl::StrCat("index '", index_path, "': ", actual,
                                          "; and without it: ", s.message())));
}

absl::Status CheckpointBuilder::OpenDirectory(const std::string& dir) {
  ckpt_->directory_ = dir;
  TM_ASSIGN_OR_RETURN(ckpt_->directory_names_,
                      ListCheckpointNames(dir, files_));
  TM_ASSIGN_OR_RETURN(std::vector<std::string> names, ListFiles(dir, files_));
  if (std::find(names.begin(), names.end(), kIndexName) != names.end()) {
    return OpenSafetensorsIndex(Join(dir, kIndexName));
  }
  if (options_.lenient &&
      std::find(ckpt_->directory_names_.begin(), ckpt_->directory_names_.end(),
                kIndexName) != ckpt_->directory_names_.end()) {
    // An index a loader would follow, that cannot be read.
    return OpenShardsPastIndex(
        Join(dir, kIndexName), "a readable regular file",
        "not a regular file that can be read (a dangling or looping symlink, "
        "a directory, a FIFO...)");
  }
  std::vector<std::string> st, gguf;
  for (const std::string& n : names) {
    if (absl::EndsWith(n, ".safetensors")) st.push_back(n);
    if (absl::EndsWith(n, ".gguf")) gguf.push_back(n);
  }
  if (!st.empty()) return AddSafetensorsFiles(dir);
  if (gguf.size() == 1) return OpenGgufSet(Join(dir, gguf[0]), nullptr);
  if (!gguf.empty()) {
    auto first = ParseSplitName(gguf[0]);
    bool one_set =
        first.has_value() && gguf.size() == static_cast<size_t>(first->count);
    for (const std::string& n : gguf) {
      auto s = ParseSplitName(n);
      one_set = one_set && s && s->prefix == first->prefix &&
                s->count == first->count;
    }
    if (one_set) return OpenGgufSet(Join(dir, gguf[0]), nullptr);
    return absl::InvalidArgumentError(absl::StrCat(
        "directory '", dir, "' holds ", gguf.size(),
        " GGUF files that are not one split set: name the file to open"));
  }
  return WithReason(absl::NotFoundError(absl::StrCat(
                        "directory '", dir,
                        "' holds no .safetensors, .gguf or ", kIndexName)),
                    ErrorReason::kCheckpointNotFound, {{"checkpoint", dir}});
}

// Reads an optional JSON config beside the checkpoint (nullopt when absent).
// Its keys are typed by ParseQuantConfig, not here.
// Opened through `access`: a config that is a symlink out of the server's
// roots is refused (PERMISSION_DENIED), never read, so none of its values
// can reach an error message.
absl::StatusOr<std::optional<nlohmann::json>> ReadConfig(
    const std::string& dir, absl::string_view name,
    const CheckpointFiles& files) {
  const std::string path = Join(dir, name);
  absl::StatusOr<struct stat> st = files.Stat(path);
  if (!st.ok() && absl::IsNotFound(st.status())) return std::nullopt;
  if (!st.ok()) return st.status();
  if (!S_ISREG(st->st_mode)) return std::nullopt;
  TM_ASSIGN_OR_RETURN(const std::string text,
                      files.ReadWhole(path, kMaxConfigBytes));
  return ParseStrictJson(text, absl::StrCat("config '", path, "'"));
}

namespace {

// The configs as the page shows them: compact JSON, or only their names
// when large (a config.json with a big vocabulary table).
void KeepConfigFiles(const QuantConfigs& configs,
                     std::vector<Checkpoint::ConfigFile>* out) {
  const std::pair<const char*, const std::optional<nlohmann::json>*> files[] = {
      {"config.json", &configs.config},
      {"quantize_config.json", &configs.quantize_config},
      {"quant_config.json", &configs.quant_config},
      {"hf_quant_config.json", &configs.hf_quant_config}};
  for (const auto& [name, json] : files) {
    if (!json->has_value()) continue;
    Checkpoint::ConfigFile f;
    f.name = name;
    // Replace, never throw: the parser admitted only valid UTF-8 anyway.
    f.json =
        (*json)->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (f.json.size() > Checkpoint::kMaxShownConfigBytes) {
      f.json.clear();
      f.truncated = true;
    }
    out->push_back(std::move(f));
  }
}

}  // namespace

absl::Status CheckpointBuilder::DropDuplicateNames() {
  Checkpoint& c = *ckpt_;
  std::vector<bool> drop(c.stored_.size(), false);
  {
    absl::flat_hash_map<absl::string_view, size_t> first;
    for (size_t i = 0; i < c.stored_.size(); ++i) {
      auto [at, added] = first.emplace(c.stored_[i].name, i);
      if (added) continue;
      size_t kept = at->second, gone = i;
      if (unindexed_.contains(kept) && !unindexed_.contains(gone)) {
        std::swap(kept, gone);
        at->second = kept;
      }
      const StoredTensor& t = c.stored_[gone];
      const std::string& kept_file = c.files_[c.stored_[kept].file_index].path;
      const std::string& gone_file = c.files_[t.file_index].path;
      if (!options_.lenient) {
        return absl::DataLossError(absl::StrCat(
            "checkpoint '", c.path_, "': tensor '", t.name,
            "' appears in both '", kept_file, "' and '", gone_file, "'"));
      }
      c.problems_.push_back(
          {.rule = "duplicate-name",
           .tensor = t.name,
           .message = "",
           .file = gone_file,
           .key = "",
           .expected =
               absl::StrCat("'", t.name, "' stored once, in '", kept_file, "'"),
           .actual = absl::StrCat("stored again in '", gone_file,
                                  "' (that copy was not checked)")});
      drop[gone] = true;
    }
  }
  size_t kept = 0;
  for (size_t i = 0; i < c.stored_.size(); ++i) {
    if (drop[i]) continue;
    if (kept != i) c.stored_[kept] = std::move(c.stored_[i]);
    ++kept;
  }
  c.stored_.resize(kept);
  return absl::OkStatus();
}

void CheckpointBuilder::ResolveGgufTensors() {
  Checkpoint& c = *ckpt_;
  c.tensors_.reserve(c.stored_.size());
  for (const StoredTensor& t : c.stored_) {
    c.tensors_.push_back(LogicalTensor{t.name, t.shape, t.num_elements,
                                       MakeStoredEncoding(t, "ggml")});
  }
  std::sort(c.tensors_.begin(), c.tensors_.end(),
            [](const LogicalTensor& a, const LogicalTensor& b) {
              return a.name < b.name;
            });
  c.conventions_ = {"ggml"};
}

absl::Status CheckpointBuilder::ReadConfigInto(
    const std::string& dir, absl::string_view name,
    std::optional<nlohmann::json>* out) {
  absl::StatusOr<std::optional<nlohmann::json>> json =
      ReadConfig(dir, name, files_);
  if (json.ok()) {
    *out = *std::move(json);
    return absl::OkStatus();
  }
  if (!options_.lenient) return json.status();
  // Read as though absent: its problem is the finding.
  ckpt_->problems_.push_back({.rule = "config-key",
                              .tensor = "",
                              .message = std::string(json.status().message()),
                              .file = Join(dir, name),
                              .key = "(the whole file)",
                              .expected = "a JSON document",
                              .actual = std::string(json.status().message())});
  return absl::OkStatus();
}

absl::Status CheckpointBuilder::ResolveSafetensorsTensors() {
  Checkpoint& c = *ckpt_;
  absl::StatusOr<struct stat> st = files_.Stat(c.path_);
  const std::string dir =
      st.ok() && S_ISDIR(st->st_mode) ? c.path_ : Dirname(c.files_[0].path);
  for (absl::string_view name : kConfigNames) {
    const std::string path = Join(dir, name);
    absl::StatusOr<FileIdentity> id = files_.Identity(path);
    c.read_files_.push_back(
        {path, id.ok() ? std::optional<FileIdentity>(*id) : std::nullopt});
  }
  WithholdAbsentModules();
  QuantConfigs configs;
  TM_RETURN_IF_ERROR(ReadConfigInto(dir, "config.json", &configs.config));
  TM_RETURN_IF_ERROR(
      ReadConfigInto(dir, "quantize_config.json", &configs.quantize_config));
  TM_RETURN_IF_ERROR(
      ReadConfigInto(dir, "quant_config.json", &configs.quant_config));
  TM_RETURN_IF_ERROR(
      ReadConfigInto(dir, "hf_quant_config.json", &configs.hf_quant_config));
  KeepConfigFiles(configs, &c.config_files_);
  std::vector<ResolveProblem> problems;
  absl::StatusOr<ResolvedTensors> resolved_or =
      ResolveConventions(c.absent_files_.empty() ? c.stored_ : c.resolved_from_,
                         configs, options_.lenient ? &problems : nullptr);
  for (ResolveProblem& p : problems) {
    // The parser names config files by base name: say where.
    if (!p.file.empty()) p.file = Join(dir, p.file);
    c.problems_.push_back(std::move(p));
  }
  if (!resolved_or.ok()) {
    // The resolver names the config file and key; say whose it is.
    return CopyReason(
        resolved_or.status(),
        absl::Status(resolved_or.status().code(),
                     absl::StrCat("checkpoint '", c.path_,
                                  "': ", resolved_or.status().message())));
  }
  ResolvedTensors resolved = *std::move(resolved_or);
  c.tensors_ = std::move(resolved.tensors);
  c.conventions_ = std::move(resolved.conventions);
  c.notes_ = std::move(resolved.notes);
  c.quant_config_ = std::move(resolved.config);
  return absl::OkStatus();
}

absl::Status CheckpointBuilder::Finish() {
  Checkpoint& c = *ckpt_;
  TM_RETURN_IF_ERROR(DropDuplicateNames());
  // Built over the kept tensors where they end up: its keys view their names.
  for (size_t i = 0; i < c.stored_.size(); ++i) {
    c.stored_index_.emplace(c.stored_[i].name, i);
  }
  if (c.format_ == CheckpointFormat::kGguf) {
    ResolveGgufTensors();
  } else {
    TM_RETURN_IF_ERROR(ResolveSafetensorsTensors());
  }
  for (size_t i = 0; i < c.tensors_.size(); ++i) {
    c.tensor_index_.emplace(c.tensors_[i].name, i);
  }
  BuildParts();
  return absl::OkStatus();
}

namespace {

// The module a tensor name belongs to, for withholding the companions of a
// tensor in an absent shard: the name less its last component, after
// trimming it to its shortest leading part that is itself a tensor
// (bitsandbytes' `m.weight.absmax` belongs with `m.weight`, in module `m`).
// `is_tensor` says whether a name is a stored tensor, present or absent.
template <typename IsTensor>
absl::string_view ModuleOf(absl::string_view name, const IsTensor& is_tensor) {
  absl::string_view root = name;
  for (size_t dot = name.find('.'); dot != absl::string_view::npos;
       dot = name.find('.', dot + 1)) {
    if (is_tensor(name.substr(0, dot))) {
      root = name.substr(0, dot);
      break;
    }
  }
  const size_t last = root.rfind('.');
  return last == absl::string_view::npos ? root : root.substr(0, last);
}

}  // namespace

void CheckpointBuilder::WithholdAbsentModules() {
  Checkpoint& c = *ckpt_;
  if (c.absent_files_.empty()) return;
  auto is_tensor = [&c](absl::string_view n) {
    return c.stored_index_.contains(n) || c.absent_tensors_.contains(n);
  };
  for (const auto& [name, file] : c.absent_tensors_) {
    auto [it, inserted] =
        c.absent_modules_.emplace(std::string(ModuleOf(name, is_tensor)), file);
    // The same answer whatever the hash order: the first absent file.
    if (!inserted) it->second = std::min(it->second, file);
  }
  for (const StoredTensor& t : c.stored_) {
    if (!c.absent_modules_.contains(ModuleOf(t.name, is_tensor))) {
      c.resolved_from_.push_back(t);
    }
  }
}

void CheckpointBuilder::BuildParts() {
  Checkpoint& c = *ckpt_;
  const absl::string_view convention =
      c.format_ == CheckpointFormat::kGguf ? "ggml" : "safetensors";
  // The logical tensor that is stored tensor `t` itself, or nullptr.
  auto itself = [&](const StoredTensor& t) -> const LogicalTensor* {
    const LogicalTensor* l = c.FindTensor(t.name);
    if (l == nullptr || l->shape != t.shape ||
        l->encoding->info().scheme != DTypeName(t.dtype)) {
      return nullptr;
    }
    // A partial open resolved copies (resolved_from_): the same tensor then
    // has the same name.
    const auto parts = l->encoding->parts();
    return parts.size() == 1 && (parts[0] == &t || (!c.resolved_from_.empty() &&
                                                    parts[0]->name == t.name))
               ? l
               : nullptr;
  };
  for (const StoredTensor& t : c.stored_) {
    if (itself(t) == nullptr) {
      c.part_views_.push_back(LogicalTensor{t.name, t.shape, t.num_elements,
                                            MakeStoredEncoding(t, convention)});
    }
  }
  // part_views_ is complete: pointers into it stay valid.
  c.parts_.reserve(c.stored_.size());
  size_t view = 0;
  for (const StoredTensor& t : c.stored_) {
    const LogicalTensor* l = itself(t);
    c.parts_.push_back(l != nullptr ? l : &c.part_views_[view++]);
  }
}

absl::StatusOr<std::shared_ptr<const Checkpoint>>
CheckpointBuilder::OpenPath() {
  const std::string& p = ckpt_->path_;
  absl::StatusOr<struct stat> st = files_.Stat(p);
  if (!st.ok() && absl::IsNotFound(st.status())) {
    return WithReason(absl::NotFoundError(
                          absl::StrCat("no such file or directory: '", p, "'")),
                      ErrorReason::kCheckpointNotFound, {{"checkpoint", p}});
  }
  if (!st.ok()) return st.status();
  if (S_ISDIR(st->st_mode)) {
    TM_RETURN_IF_ERROR(OpenDirectory(p));
  } else if (S_ISREG(st->st_mode)) {
    TM_RETURN_IF_ERROR(OpenFile(p));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("'", p, "' is neither a regular file nor a directory"));
  }
  TM_RETURN_IF_ERROR(Finish());
  return std::shared_ptr<const Checkpoint>(std::move(ckpt_));
}

absl::StatusOr<std::shared_ptr<const Checkpoint>> Checkpoint::Open(
    const std::string& path, const OpenOptions& options) {
  return CheckpointBuilder(path, options).OpenPath();
}

const Checkpoint::AbsentFile* Checkpoint::AbsentFileFor(
    absl::string_view name) const {
  if (absent_files_.empty()) return nullptr;
  if (auto it = absent_tensors_.find(name); it != absent_tensors_.end()) {
    return &absent_files_[it->second];
  }
  auto is_tensor = [this](absl::string_view n) {
    return stored_index_.contains(n) || absent_tensors_.contains(n);
  };
  auto it = absent_modules_.find(ModuleOf(name, is_tensor));
  return it == absent_modules_.end() ? nullptr : &absent_files_[it->second];
}

absl::Status Checkpoint::CheckFileUnchanged(size_t index,
                                            absl::string_view what) const {
  const File& f = files_[index];
  // Every fetch of a remote file's bytes is conditional on its version at
  // open: a replaced object fails the read itself (ABORTED).
  if (f.mapping->remote()) return absl::OkStatus();
  const FileIdentity& was = f.mapping->identity();
  absl::StatusOr<FileIdentity> now = StatFile(f.path, *access_);
  if (now.ok() && *now == was) return absl::OkStatus();
  std::string change;
  if (!now.ok()) {
    change = std::string(now.status().message());
  } else if (now->device != was.device || now->inode != was.inode) {
    change = "replaced by another file";
  } else if (now->size != was.size) {
    change = absl::StrCat("size ", was.size, " -> ", now->size);
  } else {
    change =
        absl::StrCat("rewritten: mtime ", was.mtime_ns, " -> ", now->mtime_ns,
                     " ns, ctime ", was.ctime_ns, " -> ", now->ctime_ns, " ns");
  }
  return WithReason(
      absl::AbortedError(absl::StrCat(
          "file '", f.path, "' changed during the read of ", what, " (", change,
          "): the result may mix old and new bytes; read it again")),
      ErrorReason::kFileChangedDuringRead, {{"file", f.path}});
}

absl::Status Checkpoint::CheckFileNoWriters(size_t index) const {
  if (files_[index].mapping->remote()) return absl::OkStatus();  // no writers
  return tensormorph::CheckNoWriters(*access_, files_[index].path);
}

absl::Status Checkpoint::CheckNoWriters(const LogicalTensor& t) const {
  absl::InlinedVector<int, 4> seen;
  for (const StoredTensor* part : t.encoding->parts()) {
    if (absl::c_linear_search(seen, part->file_index)) continue;
    seen.push_back(part->file_index);
    TM_RETURN_IF_ERROR(
        CheckFileNoWriters(static_cast<size_t>(part->file_index)));
  }
  return absl::OkStatus();
}

absl::Status Checkpoint::CheckUnchanged(const LogicalTensor& t) const {
  absl::InlinedVector<int, 4> seen;
  for (const StoredTensor* part : t.encoding->parts()) {
    if (absl::c_linear_search(seen, part->file_index)) continue;
    seen.push_back(part->file_index);
    TM_RETURN_IF_ERROR(
        CheckFileUnchanged(static_cast<size_t>(part->file_index),
                           absl::StrCat("tensor '", t.name, "'")));
  }
  return absl::OkStatus();
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const File& f : files_) n += f.mapping->size();
  return n;
}

const LogicalTensor* Checkpoint::FindTensor(absl::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const StoredTensor* Checkpoint::FindStored(absl::string_view name) const {
  auto it = stored_index_.find(name);
  return it == stored_index_.end() ? nullptr : &stored_[it->second];
}

const LogicalTensor* Checkpoint::FindPart(absl::string_view name) const {
  auto it = stored_index_.find(name);
  return it == stored_index_.end() ? nullptr : parts_[it->second];
}

const LogicalTensor* Checkpoint::Lookup(absl::string_view name,
                                        bool part) const {
  if (!part) {
    if (const LogicalTensor* t = FindTensor(name)) return t;
    // A partial open withheld the logical tensors of `name`'s module: its
    // stored tensor of the same name may be a half (FP8's codes without
    // their scale), and read as the tensor it would give wrong values.
    if (AbsentFileFor(name) != nullptr) return nullptr;
  }
  return FindPart(name);
}

}  // namespace tensormorph
