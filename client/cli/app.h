// The tensormorph program around its commands (command.h): the description
// and global options --help shows, the table of commands in --help's order,
// and the steps from a parsed command line to the chosen command's exit
// code.
#ifndef TENSORMORPH_CLIENT_CLI_APP_H_
#define TENSORMORPH_CLIENT_CLI_APP_H_

#include <CLI/CLI.hpp>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "client/cli/command.h"
#include "client/cli/commands.h"
#include "client/client.h"

namespace tensormorph {

// The top-level --help text: what the program is, and its exit codes.
extern const char kAppDescription[];

// --server, --token-file, the TLS files, --timeout, --json and --version,
// bound to `g` (which must outlive the parse).
void RegisterGlobalOptions(CLI::App& app, GlobalOptions& g);

// Every command, registered on `app` in the order --help lists them.
std::vector<std::unique_ptr<Command>> RegisterCommands(CLI::App& app);

// The command line as CLI11 is given it: `--NAME=` with nothing after the
// `=` (a script's "--server=$ADDR" with ADDR unset) becomes `--NAME` and
// an empty argument, which the option's check refuses; CLI11 took the
// next word (the command) as its value. argv[0] stays first.
std::vector<std::string> ArgumentsOf(int argc, const char* const* argv);

// Whether the command line asks for --json (before a `--`): a parse that
// fails reports as JSON even where CLI11 had not yet stored the flag.
bool AsksForJson(const std::vector<std::string>& args);

// A set but empty $TENSORMORPH_SERVER, with no --server given: as an empty
// --server, a usage error, not a silent fall back to local files.
// Errors: INVALID_ARGUMENT saying to set or unset it.
absl::Status CheckServerEnvironment(const GlobalOptions& g);

// What a failed parse tells the user: CLI11's message, except for a word
// where a command belongs that is none ("tensormorph lss"), which CLI11
// reports as "A subcommand is required": that names the word, the closest
// command when one is a typo away, and the commands there are.
std::string ParseErrorMessage(CLI::App& app, const CLI::ParseError& e);

// The client options of `g`: --timeout, and the token (its first line) and
// TLS files read.
// Errors: INVALID_ARGUMENT "cannot read 'PATH'" for a file that cannot be
// read (a usage error).
absl::Status ReadClientOptions(const GlobalOptions& g, ClientOptions* out);

// After a successful parse: refuses outputs that are inputs (usage, --json
// aware), finishes the chosen command's options (usage), makes what it
// needs (client options, then a client: a malformed --server is usage, a
// client that cannot be made a failed call) and runs it.
int RunChosenCommand(const std::vector<std::unique_ptr<Command>>& commands,
                     const GlobalOptions& g);

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_CLI_APP_H_
