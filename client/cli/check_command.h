// tensormorph check CKPT: validates a checkpoint before anyone serves it.
#ifndef TENSORMORPH_CLIENT_CLI_CHECK_COMMAND_H_
#define TENSORMORPH_CLIENT_CLI_CHECK_COMMAND_H_

#include <string>

#include "client/cli/commands.h"

namespace tensormorph {

struct CheckOptionsCli {
  std::string checkpoint;
  std::string fail_level = "error";  // error | warning | info
  std::string manifest;              // --manifest OUT: write hashes there
  std::string verify;                // --verify MANIFEST: check against it
  std::string source;                // --source SRC: diff against it
};

// Exit codes: kExitOk when no finding is at or above --fail-level,
// kExitThreshold when one is, kExitCallFailed when the call fails (or the
// manifest cannot be written), kExitUsage for a --verify manifest that
// cannot be read or does not parse (checked before the call).
int RunCheck(Client& client, const GlobalOptions& g, const CheckOptionsCli& o);

// The subcommand's --help footer: what each severity means, every rule with
// its severity, the exit codes, examples.
std::string CheckHelpFooter();

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_CLI_CHECK_COMMAND_H_
