// A subcommand of `tensormorph`, as main sees it: a Register function in the
// command's own file adds the subcommand with its options and help to the
// app (app.cc lists them, in --help's order), and when it is the one the
// user chose, main checks it and runs it. Adding a command is its own file,
// its Register declaration below and one line in app.cc's table; main and
// the other commands do not change.
#ifndef TENSORMORPH_CLIENT_CLI_COMMAND_H_
#define TENSORMORPH_CLIENT_CLI_COMMAND_H_

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "client/cli/commands.h"
#include "client/cli/output_file.h"
#include "client/client.h"

namespace tensormorph {

// What main hands a command's Run.
struct CommandContext {
  const GlobalOptions& global;
  // The token, TLS files and --timeout read; default for Needs::kNothing.
  const ClientOptions& client_options;
  // Embedded or connected; null unless the command Needs::kClient.
  Client* client = nullptr;
};

class Command {
 public:
  // What main makes before Run.
  enum class Needs {
    kNothing,  // reads files only (diff-merge): no server, no token read
    kChannel,  // opens its own channel (health): the client options
    kClient,   // a Client, embedded or connected to --server
  };

  // `app`: the subcommand, added by the caller; its options bind to the
  // derived command's members, so a Command is never copied or moved.
  explicit Command(CLI::App* app, Needs needs = Needs::kClient)
      : app_(app), needs_(needs) {}
  virtual ~Command() = default;
  Command(const Command&) = delete;
  Command& operator=(const Command&) = delete;

  // Whether the user chose this command (CLI11 parsed it).
  bool chosen() const { return app_->parsed(); }
  Needs needs() const { return needs_; }

  // The file the command writes and what it reads, which main holds apart
  // before any work (output_file.h: CheckOutputIsNoInput, and with --server
  // CheckOutputIsNoServerInput once connected), reporting a refusal as a
  // usage error, with --json also on stdout. None by default.
  virtual GuardedOutput Output() const { return {}; }
  // Turns what CLI11 checked into the command's options and checks them
  // against each other, before any client is made: a failure is a usage
  // error (exit 1), with --json also on stdout (its reason's metadata).
  virtual absl::Status Finish() { return absl::OkStatus(); }
  // The exit code (commands.h).
  virtual int Run(const CommandContext& context) = 0;

 protected:
  CLI::App* app() const { return app_; }

 private:
  CLI::App* app_;
  Needs needs_;
};

// Each adds its subcommand to `app` (defined beside the command's Run).
std::unique_ptr<Command> RegisterLs(CLI::App& app);
std::unique_ptr<Command> RegisterInfo(CLI::App& app);
std::unique_ptr<Command> RegisterRead(CLI::App& app);
std::unique_ptr<Command> RegisterScalar(CLI::App& app);
std::unique_ptr<Command> RegisterStats(CLI::App& app);
std::unique_ptr<Command> RegisterHeatmap(CLI::App& app);
std::unique_ptr<Command> RegisterArch(CLI::App& app);
std::unique_ptr<Command> RegisterDiff(CLI::App& app);
std::unique_ptr<Command> RegisterDiffMerge(CLI::App& app);
std::unique_ptr<Command> RegisterHealth(CLI::App& app);
std::unique_ptr<Command> RegisterCheck(CLI::App& app);
std::unique_ptr<Command> RegisterCompare(CLI::App& app);
std::unique_ptr<Command> RegisterImatrix(CLI::App& app);

// Help and checks the commands' options share.

// -o and the like: a path, not an empty string (which would silently mean
// "no file").
CLI::Validator OutputPathValidator();
// What every file-writing option's help adds: the guarantees of
// output_file.h.
inline constexpr char kOutputGuarantee[] =
    "; written whole or not at all (a temporary file beside it, renamed into "
    "place when complete: a failure or Ctrl-C leaves the previous file as it "
    "was), and refused (exit 1, before any work) when it is one of the "
    "command's inputs";
// The help of --part on commands that name a tensor.
inline constexpr char kPartHelp[] =
    "the name is a stored part's (ls's STORED AS), read as a plain "
    "tensor of its stored dtype, even where a logical tensor "
    "has the name too";
// A CLI11 validator from a parser of ours: the parser's message on failure.
template <typename Parse>
CLI::Validator ParsedBy(Parse parse, std::string name) {
  return CLI::Validator(
      [parse](std::string& text) {
        auto parsed = parse(text);
        return parsed.ok() ? std::string()
                           : std::string(parsed.status().message());
      },
      std::move(name));
}
// A name typed or pasted as its raw bytes (not UTF-8, so no API string can
// carry it) means the tensor listed under its escaped spelling.
void EscapeTensorName(std::string* name);
// The same for a path the service opens (a checkpoint, a reference, an
// importance matrix): raw bytes that are not UTF-8 become their escaped
// spelling, as listings show the path, which the service resolves back to
// the bytes (PathSandbox). A transform: valid UTF-8 is left as it is.
CLI::Validator ServedPath();

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_CLI_COMMAND_H_
