// The built CLI, remote and embedded, on a GGUF file whose tensor names and
// metadata hold terminal controls (a file anyone may have written): no
// command's text output, stdout or stderr, carries a control byte a
// terminal would obey; each is shown as \xHH. --json keeps the names exact.
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/gguf_writer.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildGguf;
using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::GgufSpec;
using ::tensormorph::testing::GgufString;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::WriteFile;
using ::testing::Contains;
using ::testing::HasSubstr;

// Clears the screen, rings, returns the carriage, and CSI as a C1 control.
const std::string kClearing = "a\x1b[2Jb";
const std::string kRinging = "c\rforged\x07";
const std::string kC1 =
    "d\xC2\x9B"
    "31m";
const std::string kTitle = "\x1b]0;owned\x07";

// The first byte of `text` a terminal would obey (a C0 control other than
// line feed and tab, DEL, or a C1 control), with its offset; "" if none.
std::string FirstControl(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    const bool c1 = b == 0xc2 && i + 1 < text.size() &&
                    (static_cast<unsigned char>(text[i + 1]) & 0xe0) == 0x80;
    if ((b < 0x20 && b != '\n' && b != '\t') || b == 0x7f || c1) {
      return "byte " + std::to_string(b) + " at " + std::to_string(i) +
             ": ..." + text.substr(i < 20 ? 0 : i - 20, 40);
    }
  }
  return "";
}

class CliTerminalControlsTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    dir = new std::string(MakeTempDir());
    GgufSpec spec;
    for (const std::string& name : {kClearing, kRinging, kC1}) {
      spec.tensors.push_back({name, {8}, 0, std::string(32, '\0')});
    }
    spec.kv = {{"general.name", GgufString(kTitle)}};
    WriteFile(*dir + "/hostile.gguf", BuildGguf(spec));
    cli = new CliModes({*dir});
  }
  static void TearDownTestSuite() {
    delete cli;
    delete dir;
  }
  CommandResult Run(std::vector<std::string> args) {
    return cli->Run(GetParam(), std::move(args));
  }
  std::string File() const { return *dir + "/hostile.gguf"; }
  // Runs `args`: exit `code`, and neither stream holds a control.
  CommandResult ExpectShownSafely(std::vector<std::string> args, int code) {
    SCOPED_TRACE(::testing::PrintToString(args));
    CommandResult r = Run(std::move(args));
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_EQ(FirstControl(r.out), "");
    EXPECT_EQ(FirstControl(r.err), "");
    return r;
  }

  static CliModes* cli;
  static std::string* dir;
};
CliModes* CliTerminalControlsTest::cli = nullptr;
std::string* CliTerminalControlsTest::dir = nullptr;

TEST_P(CliTerminalControlsTest, ListingsAndInfoShowEveryControlEscaped) {
  const CommandResult ls = ExpectShownSafely({"ls", File()}, 0);
  EXPECT_THAT(ls.out, HasSubstr("a\\x1B[2Jb"));
  EXPECT_THAT(ls.out, HasSubstr("c\\x0Dforged\\x07"));
  EXPECT_THAT(ls.out, HasSubstr("d\\xC2\\x9B31m"));
  const CommandResult info = ExpectShownSafely({"info", File()}, 0);
  EXPECT_THAT(info.out, HasSubstr("\\x1B]0;owned\\x07"));
  ExpectShownSafely({"info", File(), kClearing}, 0);
  ExpectShownSafely({"stats", File(), kRinging}, 0);
  ExpectShownSafely({"scalar", File(), kC1, "3"}, 0);
}

TEST_P(CliTerminalControlsTest, ErrorsQuotingANameShowItEscaped) {
  const CommandResult r =
      ExpectShownSafely({"read", File(), kClearing + "-missing"}, 2);
  EXPECT_THAT(r.err, HasSubstr("a\\x1B[2Jb-missing"));
}

TEST_P(CliTerminalControlsTest, TheTerminalHeatmapKeepsItsColoursOnly) {
  const CommandResult r = Run({"heatmap", File(), kClearing, "--term"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\x1b[38;2;"));  // its own colours
  EXPECT_THAT(r.out, HasSubstr("a\\x1B[2Jb"));  // the name in its title
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr(kClearing)));
}

TEST_P(CliTerminalControlsTest, JsonKeepsTheNamesExact) {
  const CommandResult r = Run({"--json", "ls", File()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> names;
  for (absl::string_view line :
       absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
    names.push_back(nlohmann::json::parse(line)["name"].get<std::string>());
  }
  EXPECT_THAT(names, Contains(kClearing));
  EXPECT_THAT(names, Contains(kRinging));
  EXPECT_THAT(names, Contains(kC1));
}

INSTANTIATE_TEST_SUITE_P(Modes, CliTerminalControlsTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Server" : "Embedded";
                         });

}  // namespace
}  // namespace tensormorph
