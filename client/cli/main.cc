// tensormorph: look inside checkpoints, locally or on a tensormorphd. Each
// command registers its own options (command.h); app.h runs the one chosen.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/cli/app.h"
#include "client/cli/commands.h"
#include "client/cli/terminal_text.h"
#include "server/stream_heap.h"

int main(int argc, char** argv) {
  using namespace tensormorph;  // NOLINT: a program's main.
  KeepStreamBuffersOnHeap();
  FilterTerminalControls(std::cerr);
  // The embedded server logs like tensormorphd does, to stderr and only when
  // asked ($TENSORMORPH_LOG_LEVEL): the CLI reports failures itself.
  spdlog::set_default_logger(spdlog::stderr_color_mt("tensormorph"));
  const char* level = std::getenv("TENSORMORPH_LOG_LEVEL");
  spdlog::set_level(level ? spdlog::level::from_str(level)
                          : spdlog::level::off);

  GlobalOptions g;
  CLI::App app{kAppDescription, "tensormorph"};
  RegisterGlobalOptions(app, g);
  const std::vector<std::unique_ptr<Command>> commands = RegisterCommands(app);
  const std::vector<std::string> args = ArgumentsOf(argc, argv);
  std::vector<const char*> arg_pointers;
  for (const std::string& a : args) arg_pointers.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(arg_pointers.size()), arg_pointers.data());
  } catch (const CLI::ParseError& e) {
    // --help and --version print their text and succeed; a malformed
    // command line is a usage error, reported as every other one is
    // (commands.h: ReportUsage; docs/errors.md).
    if (e.get_exit_code() == 0) return app.exit(e) == 0 ? kExitOk : kExitUsage;
    ReportErrorsAsJson(g.json || AsksForJson(args));
    ReportUsage(absl::InvalidArgumentError(ParseErrorMessage(app, e)));
    std::cerr << "Run with --help for more information.\n";
    return kExitUsage;
  }
  if (absl::Status s = CheckServerEnvironment(g); !s.ok()) {
    ReportErrorsAsJson(g.json);
    return ReportUsage(s);
  }
  if (!g.json) FilterTerminalControls(std::cout);
  try {
    return RunChosenCommand(commands, g);
  } catch (const std::bad_alloc&) {
    // Memory ran out (inputs are bounded, but a small machine may still
    // run short): an error like any other rather than an abort.
    return ReportFailure(absl::ResourceExhaustedError(
        "out of memory: ask for less at once (fewer indices, a smaller "
        "slice) or run where there is more"));
  }
}
