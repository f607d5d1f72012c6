// A checkpoint: one or more memory-mapped files and the tensors in them.
#ifndef TENSORMORPH_CORE_FORMAT_CHECKPOINT_H_
#define TENSORMORPH_CORE_FORMAT_CHECKPOINT_H_

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/format/checkpoint_files.h"
#include "core/format/gguf_metadata.h"
#include "core/format/stored_tensor.h"
#include "core/io/mapped_file.h"
#include "core/io/remote_files.h"
#include "core/quant/resolve_problem.h"
#include "core/tensor.h"

namespace tensormorph {

enum class CheckpointFormat { kSafetensors, kGguf };
absl::string_view FormatName(CheckpointFormat format);

// The names in `dir` that decide what Checkpoint::Open(dir) opens and how
// (.safetensors and .gguf files, the index, the config files), sorted: one
// readdir, no stat.
// Errors: NOT_FOUND when `dir` cannot be listed.
absl::StatusOr<std::vector<std::string>> ListCheckpointNames(
    const std::string& dir, const FileAccess& access);
inline absl::StatusOr<std::vector<std::string>> ListCheckpointNames(
    const std::string& dir) {
  return ListCheckpointNames(dir, *FileAccess::Anywhere());
}
// The same for a directory that may be a URL.
absl::StatusOr<std::vector<std::string>> ListCheckpointNames(
    const std::string& dir, const CheckpointFiles& files);

// One metadata entry for display: safetensors `__metadata__` (type
// "string") or a GGUF key/value.
// `key` and `value` are valid UTF-8 (GGUF bytes that are not are escaped,
// see core/util/utf8.h); `raw` keeps a string value's stored bytes exactly.
struct MetadataEntry {
  std::string key;
  std::string type;
  std::string value;  // rendered for people
  std::string raw;    // type "string" only: the stored bytes, unescaped
  // The file it was read from, an index into Checkpoint::files(): a sharded
  // safetensors checkpoint has one `__metadata__` per shard.
  int file_index = 0;
};

// How Checkpoint::Open treats what it finds.
struct OpenOptions {
  // A safetensors index naming shard files that do not exist opens with the
  // shards that do (absent_files() lists the others), instead of DATA_LOSS:
  // what a server holding some of a checkpoint's shards (one pod of a
  // StatefulSet, each with its own volume) serves. Everything present is
  // validated as in a full open. No effect on GGUF or single files.
  bool allow_absent_shards = false;
  // For `tensormorph check`, which must report every rule a checkpoint
  // breaks rather than refuse it at the first: what a strict open refuses
  // is recorded in problems() instead, and everything that can be opened
  // is. An index naming absent shards opens as allow_absent_shards does
  // (shard-missing); a tensor the index places in a shard that lacks it
  // (index-tensor-missing) or a shard tensor the index does not list
  // (shard-tensor-unindexed) is recorded; a config file that is not JSON,
  // each config key problem (ParseQuantConfigLenient) and each tensor whose
  // convention cannot be resolved (ResolveConventions) too, that tensor's
  // stored tensors staying tensors of their own. A shard that fails its
  // rules (shard-corrupt) has its tensors treated as missing, and the other
  // shards open (none opening: nothing to check, so an error, the first
  // one's, as without an index); an index that is not JSON, not an object
  // with a weight_map, names a file outside its directory, or is no
  // readable regular file (index-corrupt) is set aside and the directory's
  // .safetensors files open as though it were absent, each one that fails
  // its rules or is no regular file a shard-corrupt (none opening: an error
  // naming the index's problem too); a tensor name stored in two files
  // (duplicate-name) keeps the copy the index places, else its first.
  // Everything read is still bounds-checked. Never for serving: values of
  // a lenient open may be incomplete.
  bool lenient = false;
  // Where the checkpoint's files are opened, listed and stat'ed (a server
  // passes its roots: FileAccess::Beneath); null: anywhere. The checkpoint
  // keeps it (access()) for later checks of its files.
  std::shared_ptr<const FileAccess> access = nullptr;
  // Where paths that are storage URLs (https://, s3://, hf://) are opened:
  // their files are mirrored (remote_mirror.h), fetched as read. Null: URLs
  // are refused with INVALID_ARGUMENT.
  std::shared_ptr<const RemoteFiles> remote = nullptr;
  // Local roots backed by storage URL prefixes (root_backing.h): a file of
  // the checkpoint beneath one that the disk lacks (a shard the index
  // names, a split, a config) is read from its backing URL through
  // `remote`, as a URL's file is; present files are read from the disk.
  // An index shard that neither holds is NOT_FOUND naming the URL. Null:
  // none.
  std::shared_ptr<const RootBackings> backings = nullptr;
};

// Thread safety: immutable after Open; every method is safe to call from
// many threads. Tensor data views stay valid while the Checkpoint lives.
class Checkpoint {
 public:
  // Opens `path`, which may be:
  //  - a safetensors or GGUF file (detected by its magic bytes, not its name);
  //  - one split of a split GGUF (`name-00001-of-00003.gguf`): all splits open;
  //  - `model.safetensors.index.json`, or a directory holding it: the shards
  //    its weight_map names, which must agree with their headers; or a
  //    directory of safetensors files (the .gguf files and subdirectories
  //    beside them are not in it: ScanCheckpoints lists those apart), or of
  //    one GGUF (or one split set). Opening maps files, parses headers only.
  // With allow_absent_shards, an index may name absent shards (absent_files()).
  // Errors: NOT_FOUND (no such path, or no checkpoint in a directory; with
  // allow_absent_shards, an index none of whose shards exist, naming it);
  // INVALID_ARGUMENT (not a regular file or directory; an ambiguous
  // directory); DATA_LOSS (a corrupt file, index or split set, naming the
  // file and the rule; lenient, only a GGUF or safetensors none of whose
  // files opens; a shard the index names and the disk lacks, unless
  // allowed); UNIMPLEMENTED (an unsupported dtype or version).
  static absl::StatusOr<std::shared_ptr<const Checkpoint>> Open(
      const std::string& path, const OpenOptions& options = {});

  struct File {
    std::string path;
    std::shared_ptr<const MappedFile> mapping;
  };

  const std::string& path() const { return path_; }
  CheckpointFormat format() const { return format_; }
  const std::vector<File>& files() const { return files_; }
  const std::vector<StoredTensor>& stored_tensors() const { return stored_; }
  const std::vector<LogicalTensor>& tensors() const { return tensors_; }
  const std::vector<MetadataEntry>& metadata() const { return metadata_; }
  // GGUF key/values of the first file (empty for safetensors).
  const std::vector<GgufKv>& gguf_metadata() const { return gguf_kv_; }
  // Quantization conventions found ("ggml", "gptq", "compressed-tensors"...).
  const std::vector<std::string>& conventions() const { return conventions_; }
  // How the conventions were found, when a user should know (e.g. a config
  // naming an unknown quant_method, resolved from the stored tensors).
  const std::vector<std::string>& notes() const { return notes_; }
  // The quantization config as parsed, defaults applied: key/value lines,
  // "quant_method" first (conventions::SummarizeQuantConfig). Empty for
  // GGUF, whose types carry their parameters.
  const std::vector<std::pair<std::string, std::string>>& quant_config() const {
    return quant_config_;
  }
  // The JSON config files read beside a safetensors checkpoint
  // (config.json, quantize_config.json, quant_config.json,
  // hf_quant_config.json), in that order, each as compact JSON (valid
  // UTF-8: the parser accepts nothing else). A file over kMaxShownConfigBytes
  // compact is listed with `json` empty and `truncated` set, so a response
  // carrying it stays small. Empty for GGUF.
  struct ConfigFile {
    std::string name;  // base name, e.g. "config.json"
    std::string json;
    bool truncated = false;
  };
  static constexpr size_t kMaxShownConfigBytes = 256 << 10;
  const std::vector<ConfigFile>& config_files() const { return config_files_; }
  // What a lenient open went past (OpenOptions::lenient), in the order
  // found: index and shards first, then configs, then conventions. Always
  // empty for a strict open.
  const std::vector<ResolveProblem>& problems() const { return problems_; }
  uint64_t total_bytes() const;

  // What else the checkpoint was opened from, so that a cache can notice it
  // is stale: files read at open and not kept mapped (the index; every
  // config file looked for, with no identity when it was absent), and, when
  // a directory was opened, that directory and the names in it that decide
  // what opens (ListCheckpointNames). Identities are taken before the reads.
  struct ReadFile {
    std::string path;
    std::optional<FileIdentity> identity;
  };
  const std::vector<ReadFile>& read_files() const { return read_files_; }

  // Where the files were opened (OpenOptions::access); later looks at them
  // go through it too.
  const FileAccess& access() const { return *access_; }
  // The same with remote storage and backings (OpenOptions::remote,
  // ::backings): what a later read of a file beside the checkpoint (a
  // config) goes through, URL or path.
  CheckpointFiles storage() const {
    return CheckpointFiles(access_, remote_, backings_);
  }

  // Whether each file `t` is read from is still the file mapped: the same
  // device, inode, size, mtime and ctime. ctime cannot be set back from user
  // space, so a rewrite in place that restores mtime is seen as well (and the
  // kernel gives a change after a stat a finer ctime than the stat saw). A
  // reader calls it after its last read of the mapping, and a stream between
  // chunks, so that bytes read across a rewrite never pass as one result.
  // Errors: ABORTED naming the file, what changed, and `t`: the result may
  // mix old and new bytes; read again.
  absl::Status CheckUnchanged(const LogicalTensor& t) const;
  // The same for files()[index].
  absl::Status CheckFileUnchanged(size_t index, absl::string_view what) const;
  // Before the first read of `t` (after the identity was taken: Open, or a
  // cache's check that the files are unchanged): no process holds a file
  // `t` is read from open for writing (writer_probe.h says why the identity
  // alone cannot tell a write still copying its bytes).
  // Errors: ABORTED naming the file; those of FileAccess::Open.
  absl::Status CheckNoWriters(const LogicalTensor& t) const;
  // The same for files()[index].
  absl::Status CheckFileNoWriters(size_t index) const;
  const std::string& directory() const { return directory_; }  // or empty
  const std::vector<std::string>& directory_names() const {
    return directory_names_;
  }

  // Shards the index names that were absent when it opened with
  // allow_absent_shards (empty otherwise), in name order, each spelled as
  // files() would spell it, with the number of stored tensors the index
  // places there. Their tensors are not served, and neither is any logical
  // tensor of a module with a stored tensor there: a convention builds a
  // logical tensor from companions of one module (GPTQ's qweight, qzeros,
  // scales; bitsandbytes' weight and weight.absmax), and one must never be
  // half-built. (A module split across shards is thus served by no partial
  // open; its present stored tensors still are, as parts.)
  struct AbsentFile {
    std::string path;
    int64_t tensor_count = 0;
  };
  const std::vector<AbsentFile>& absent_files() const { return absent_files_; }
  // The absent shard that keeps `name` (a stored or logical tensor name)
  // from being served here: the one the index places it in, or else one
  // holding a tensor of its module. nullptr when no absent shard concerns
  // `name`.
  const AbsentFile* AbsentFileFor(absl::string_view name) const;

  // nullptr when absent.
  const LogicalTensor* FindTensor(absl::string_view name) const;
  const StoredTensor* FindStored(absl::string_view name) const;

  // Stored parts. Every stored tensor (each one a TensorInfo lists under
  // parts, `ls`'s STORED AS) can be read and inspected by its own name as a
  // plain tensor of its stored dtype and shape: GPTQ's qweight (I32),
  // qzeros and scales, AWQ's, compressed-tensors' weight_scale, FP8's
  // weight_scale_inv, bitsandbytes' absmax, MXFP4's blocks and scales...
  // Reading one raw gives the file's bytes at its offset. Where a logical
  // tensor is the stored tensor itself (plain dtypes, ggml types), the part
  // is that logical tensor.
  //
  // The stored tensor `name` as a part, or nullptr when absent.
  const LogicalTensor* FindPart(absl::string_view name) const;
  // The lookup of every call that names a tensor: the logical tensor `name`,
  // or else the part `name`. With `part`, the part only: the way to a part
  // whose name a logical tensor also has (compressed-tensors', FP8's and
  // bitsandbytes' `weight` hold the codes of a logical `weight`).
  // nullptr when absent, and, without `part`, when a partial open withheld
  // `name` (AbsentFileFor(name) is set): a withheld logical tensor never
  // falls back to its stored part of the same name, whose values alone are
  // wrong (FP8 codes without their scale); only `part` reads that part.
  const LogicalTensor* Lookup(absl::string_view name, bool part) const;
  // Every stored tensor as a part, in the order of stored_tensors().
  const std::vector<const LogicalTensor*>& parts() const { return parts_; }

 private:
  Checkpoint() = default;
  friend class CheckpointBuilder;

  std::string path_;
  std::shared_ptr<const FileAccess> access_;
  std::shared_ptr<const RemoteFiles> remote_;
  std::shared_ptr<const RootBackings> backings_;
  CheckpointFormat format_ = CheckpointFormat::kSafetensors;
  std::vector<File> files_;
  std::vector<StoredTensor> stored_;
  std::vector<LogicalTensor> tensors_;
  std::vector<MetadataEntry> metadata_;
  std::vector<GgufKv> gguf_kv_;
  std::vector<std::string> conventions_;
  std::vector<std::string> notes_;
  std::vector<std::pair<std::string, std::string>> quant_config_;
  std::vector<ConfigFile> config_files_;
  std::vector<ResolveProblem> problems_;
  std::vector<ReadFile> read_files_;
  std::string directory_;
  std::vector<std::string> directory_names_;
  // Keys view the names in tensors_ and stored_, which never change once
  // the checkpoint is built.
  absl::flat_hash_map<absl::string_view, size_t> tensor_index_;
  absl::flat_hash_map<absl::string_view, size_t> stored_index_;
  // Plain views of the stored tensors that are not a logical tensor
  // themselves; parts_[i] is stored_[i]'s part (into tensors_ or here).
  std::vector<LogicalTensor> part_views_;
  std::vector<const LogicalTensor*> parts_;
  // Partial opens only (see absent_files()): the stored tensors the index
  // places in absent shards and the modules that have one, each to its
  // absent file; and the stored tensors the conventions were resolved from
  // (stored_ less those of such modules), which the logical tensors view.
  std::vector<AbsentFile> absent_files_;
  absl::flat_hash_map<std::string, size_t> absent_tensors_;
  absl::flat_hash_map<std::string, size_t> absent_modules_;
  std::vector<StoredTensor> resolved_from_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_FORMAT_CHECKPOINT_H_
