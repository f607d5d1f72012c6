// Every command's --help lists every option and positional it takes, with
// the global options on the top-level --help: the commands register their
// own options (client/cli/command.h), and this holds the whole set to what
// users and scripts rely on.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli/commands.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/process.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::RunCommand;
using ::testing::HasSubstr;

struct CommandHelp {
  std::string command;
  std::vector<std::string> lists;  // options and positionals, as --help shows
};

const std::vector<CommandHelp>& EveryCommand() {
  static const auto* commands = new std::vector<CommandHelp>{
      {"ls", {"checkpoint", "--filter", "--depth", "--compat"}},
      {"info", {"checkpoint", "tensor", "--part"}},
      {"read",
       {"checkpoint", "tensor", "--slice", "--raw", "-o,--output", "--part"}},
      {"scalar",
       {"checkpoint", "tensor", "index", "--indices-file", "--part", "--ref",
        "--ref-tensor"}},
      {"stats",
       {"checkpoint", "tensor", "--bins", "--ref", "--ref-tensor", "--group"}},
      {"heatmap",
       {"checkpoint", "tensor", "--mode", "--ref", "--ref-tensor", "--size",
        "--index", "--rows", "--cols", "-o,--output", "--term"}},
      {"arch", {"checkpoint", "--dot"}},
      {"diff",
       {"quantized", "reference", "--filter", "--top", "--fail-on", "--part",
        "--imatrix"}},
      {"diff-merge", {"parts", "--fail-on", "-o,--output"}},
      {"health", {"--service"}},
      {"check",
       {"checkpoint", "--fail-level", "--manifest", "--verify", "--source"}},
      {"compare",
       {"source", "quantizations", "--filter", "--budget-bpw", "--budget-bytes",
        "--base", "--imatrix"}},
      {"imatrix", {"file"}},
  };
  return *commands;
}

TEST(CliHelpTest, EveryCommandListsItsOptions) {
  for (const CommandHelp& c : EveryCommand()) {
    CommandResult r = RunCommand({CliPath(), c.command, "--help"});
    EXPECT_EQ(r.exit_code, 0) << c.command << ": " << r.err;
    for (const std::string& option : c.lists) {
      EXPECT_THAT(r.out, HasSubstr("  " + option + " ")) << c.command;
    }
  }
}

TEST(CliHelpTest, TopLevelListsEveryCommandAndTheGlobalOptions) {
  CommandResult r = RunCommand({CliPath(), "--help"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const CommandHelp& c : EveryCommand()) {
    EXPECT_THAT(r.out, HasSubstr("  " + c.command + " "));
  }
  for (const char* option :
       {"--server", "--token-file", "--tls-ca", "--tls-cert", "--tls-key",
        "--timeout", "--json", "--version"}) {
    EXPECT_THAT(r.out, HasSubstr(option));
  }
  EXPECT_THAT(r.out, HasSubstr("Exit codes"));
  // Every code commands.h defines (kExitOk .. kExitGaps), each with what
  // it means.
  for (int code = kExitOk; code <= kExitGaps; ++code) {
    EXPECT_THAT(r.out,
                ::testing::ContainsRegex(absl::StrCat("[:,] ", code, " [a-z]")))
        << "exit code " << code;
  }
  EXPECT_THAT(r.out, HasSubstr("4 a diff, diff-merge or compare"));
}

// Global options may follow the command, and a command's help is reached
// that way too.
TEST(CliHelpTest, GlobalOptionsAfterTheCommand) {
  CommandResult r = RunCommand({CliPath(), "health", "--json", "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("--service"));
}

// A word where a command belongs that is none is named, with the command a
// typo away when there is one and the list of commands; a usage error (exit
// 1), on stdout too with --json.
TEST(CliHelpTest, AnUnknownCommandIsNamedWithTheClosestOne) {
  CommandResult r = RunCommand({CliPath(), "lss", "models/"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("'lss' is not a command (did you mean 'ls'?)"));
  EXPECT_THAT(r.err, HasSubstr("the commands are ls, info, read"));
  r = RunCommand({CliPath(), "--json", "frobnicate"});
  EXPECT_EQ(r.exit_code, 1);
  const nlohmann::json line = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(line.is_object()) << r.out;
  EXPECT_EQ(line["error"]["reason"], "REQUEST_INVALID");
  EXPECT_THAT(line["error"]["message"].get<std::string>(),
              HasSubstr("'frobnicate' is not a command;"));
}

}  // namespace
}  // namespace tensormorph
