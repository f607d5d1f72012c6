// The files the CLI's commands write (read -o, heatmap -o, check --manifest,
// diff-merge -o, and any added later) go through this one helper, for two
// guarantees a user can rely on whatever the command:
//  - An output is never an input: CheckOutputIsNoInput refuses, before any
//    work, an output path that is or lies inside something the command reads
//    (the checkpoint, its config, index and shards, a reference, a manifest).
//  - An output is whole or absent: OutputFile writes a temporary file beside
//    the target and renames it into place only on Commit(), so a failure, a
//    refusal or SIGINT/SIGTERM/SIGHUP/SIGQUIT leaves the previous file at the
//    final name byte for byte as it was, and no temporary behind. (SIGKILL
//    and a power cut leave the previous file too, and may leave a
//    `.NAME.tmp-XXXXXX` beside it: nothing can run then to remove it.)
#ifndef TENSORMORPH_CLIENT_CLI_OUTPUT_FILE_H_
#define TENSORMORPH_CLIENT_CLI_OUTPUT_FILE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/client.h"

namespace tensormorph {

// Something a command reads, that its outputs must never overwrite.
struct CommandInput {
  enum class Kind {
    // A checkpoint. A directory: every file beneath it. A file: itself and
    // its companions beside it, the files its reader opens or would open
    // (config.json, quantize_config.json, quant_config.json,
    // hf_quant_config.json, any *.index.json, the other *.safetensors and
    // *.gguf shards), whether they exist yet or not.
    kCheckpoint,
    // A file read whole (a --verify manifest, a diff-merge part file).
    kFile,
    // The --imatrix file: read whole as kFile is, by the server with
    // --server (a path beneath its roots, whose identity
    // GetImportanceMatrix tells).
    kImportanceMatrix,
  };
  Kind kind = Kind::kCheckpoint;
  std::string path;  // as the user wrote it; empty = not given, skipped
  std::string role;  // how a refusal names it: "checkpoint", "--ref checkpoint"
};

// Refuses `output` (the option that named it, e.g. "-o", is `option`) when
// it is, or lies inside, one of `inputs`. Compared by resolved identity: the
// realpath of the output's directory plus its name, and the device and inode
// of an existing output against those of the inputs' files, so `./x/../m`,
// symbolic and hard links are caught. An input that does not exist locally
// is skipped: with --server, checkpoint paths are the server's, and this
// guards the common case where client and server share the machine. An
// empty `output` (none asked for) passes.
// Errors: INVALID_ARGUMENT naming the option, the output, the input and what
// it is of the command, and saying to write elsewhere.
absl::Status CheckOutputIsNoInput(absl::string_view option,
                                  const std::string& output,
                                  const std::vector<CommandInput>& inputs);

// A command's output and its inputs, as the two checks take them.
struct GuardedOutput {
  std::string option;  // "-o", "--manifest"
  std::string output;  // empty: none asked for
  std::vector<CommandInput> inputs;
};

// With --server, the same refusal against the files the server reads, for
// the common case of a client on the server's machine (checkpoint paths are
// the server's, beneath its roots, so CheckOutputIsNoInput cannot resolve
// them): GetCheckpoint of each checkpoint input tells its files' and their
// directory's device and inode, and `output` is refused when it is one of
// those files, or would be a shard, config or index beside them
// (CommandInput::kCheckpoint's companions); GetImportanceMatrix tells the
// importance matrix's, and `output` is refused when it is that file. On
// another machine no identity matches. An input the call cannot open, or
// in remote storage, is skipped: the command reports its own error.
// Errors: INVALID_ARGUMENT as CheckOutputIsNoInput's, saying the input is
// the server's.
absl::Status CheckOutputIsNoServerInput(const GuardedOutput& guarded,
                                        Client& client);

class OutputFile;

// OutputFile::Create(path) for the option `option` ("-o", "--manifest"),
// its error naming the option: every command reports a path it cannot
// write alike, by the errno's code (NOT_FOUND for a missing directory,
// PERMISSION_DENIED, FAILED_PRECONDITION for a directory at the path:
// exit 2; INVALID_ARGUMENT for ENOTDIR or ENAMETOOLONG: exit 1).
absl::StatusOr<std::unique_ptr<OutputFile>> CreateOutput(
    absl::string_view option, const std::string& path);

// A file written whole or not at all. Create() makes a temporary file in the
// target's directory (same filesystem, so the rename is atomic), named
// `.NAME.tmp-XXXXXX` and created as open(2) creates files (0666 less the
// umask; a replaced file's permission bits are kept). Commit() fsyncs it and
// renames it over the target. Destroyed without Commit() (an error, a
// refusal, an early return), it removes the temporary and the target is as
// it was. While a temporary exists, SIGINT, SIGTERM, SIGHUP and SIGQUIT
// (where not ignored) remove it before the process dies of the signal as it
// would have. A target that exists and is no regular file (/dev/null, a
// pipe) is written in place: there is nothing to keep or replace. A
// symbolic link at the target is followed: the file it names is replaced.
//
// Thread safety: one thread at a time per object; objects are independent.
class OutputFile {
 public:
  // Outputs open at once in a process: the signal handler's registry is a
  // fixed array, as a handler may not allocate.
  static constexpr int kMaxOpenOutputs = 16;

  // Errors: the errno's code with "cannot write 'PATH': reason" (a missing
  // directory, no permission, a directory at PATH); RESOURCE_EXHAUSTED past
  // kMaxOpenOutputs open at once.
  static absl::StatusOr<std::unique_ptr<OutputFile>> Create(
      const std::string& path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // The open file, for writers that write to an fd (writev): valid until
  // Commit() or destruction.
  int fd() const { return fd_; }
  // The path as Create() was given it, for messages.
  const std::string& path() const { return path_; }

  // Writes every byte of `bytes`. Errors: the errno's code naming the path.
  absl::Status Write(absl::string_view bytes);
  // Makes the written bytes the file at the path: fsync, rename, fsync of
  // the directory. Once; nothing may be written after. Errors: the errno's
  // code naming the path (the target is then as it was).
  absl::Status Commit();

 private:
  OutputFile(std::string path, int dir_fd, int fd, std::string temp_name,
             std::string final_name, int slot);
  absl::Status Error(int error) const;
  void Discard();

  std::string path_;
  int dir_fd_;              // the target's directory; -1 when in place
  int fd_;                  // -1 once closed
  std::string temp_name_;   // in dir_fd_; empty when written in place
  std::string final_name_;  // in dir_fd_
  int slot_;                // in the signal handler's registry; -1 = none
  bool committed_ = false;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_CLI_OUTPUT_FILE_H_
