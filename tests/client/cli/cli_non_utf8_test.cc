// The built CLI on a GGUF file whose names, keys and values are not UTF-8,
// remote and embedded: `ls` lists every tensor under its escaped spelling,
// and that spelling, passed back on the command line, works in info, read
// and scalar.
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
using ::tensormorph::testing::GgufArray;
using ::tensormorph::testing::GgufSpec;
using ::tensormorph::testing::GgufString;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::WriteFile;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

class CliNonUtf8Test : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    dir = new std::string(MakeTempDir());
    GgufSpec spec;
    // Three tensors, the odd one in the middle (the placement that hung).
    for (const std::string name : {"a.weight", "m\xE3\x81.weight", "z"}) {
      spec.tensors.push_back({name, {8}, 0, std::string(32, '\0')});
    }
    spec.kv = {{"general.name", GgufString("caf\xE9")},
               {"k\xFF", GgufArray(8, {GgufString("\xC0\x80")})}};
    WriteFile(*dir + "/odd.gguf", BuildGguf(spec));
    WriteFile(*dir + "/p\xE9.gguf", BuildGguf(spec));  // Latin-1
    cli = new CliModes({*dir});
  }
  static void TearDownTestSuite() {
    delete cli;
    delete dir;
  }
  CommandResult Run(std::vector<std::string> args) {
    args.insert(args.begin(), {"--timeout", "60"});
    return cli->Run(GetParam(), std::move(args));
  }
  std::string Odd() const { return *dir + "/odd.gguf"; }

  static CliModes* cli;
  static std::string* dir;
};
CliModes* CliNonUtf8Test::cli = nullptr;
std::string* CliNonUtf8Test::dir = nullptr;

TEST_P(CliNonUtf8Test, LsListsEveryTensorAndEachListedNameWorks) {
  CommandResult ls = Run({"ls", Odd(), "--json"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  std::vector<std::string> names;
  for (absl::string_view line :
       absl::StrSplit(ls.out, '\n', absl::SkipEmpty())) {
    names.push_back(nlohmann::json::parse(line)["name"].get<std::string>());
  }
  ASSERT_THAT(names,
              UnorderedElementsAre("a.weight", "m\\xE3\\x81.weight", "z"));
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    CommandResult info = Run({"info", Odd(), name});
    EXPECT_EQ(info.exit_code, 0) << info.err;
    EXPECT_THAT(info.out, HasSubstr("tensor       " + name));
    CommandResult read = Run({"read", Odd(), name});
    EXPECT_EQ(read.exit_code, 0) << read.err;
    EXPECT_THAT(read.out, HasSubstr("shape [8], float32"));
    CommandResult scalar = Run({"scalar", Odd(), name, "3"});
    EXPECT_EQ(scalar.exit_code, 0) << scalar.err;
  }
  CommandResult table = Run({"ls", Odd()});
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("3 tensors"));
}

TEST_P(CliNonUtf8Test, ANameGivenAsItsRawBytesFindsTheTensor) {
  CommandResult r = Run({"read", Odd(), "m\xE3\x81.weight"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("shape [8], float32"));
}

TEST_P(CliNonUtf8Test, InfoShowsEscapedMetadata) {
  CommandResult r = Run({"info", Odd()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("general.name (string) = \"caf\\xE9\""));
  EXPECT_THAT(r.out, HasSubstr("k\\xFF (array<string>) = [\"\\xC0\\x80\"]"));
}

// A file named in Latin-1: listed under its escaped spelling, which opens
// it, as its raw bytes on the command line do; neither reaches protobuf as
// a string that is not UTF-8.
TEST_P(CliNonUtf8Test, APathThatIsNotUtf8OpensByItsListedSpellingOrItsBytes) {
  const std::string where = GetParam() ? "" : *dir + "/";
  std::vector<std::string> ls_args = {"--json", "ls"};
  if (!GetParam()) ls_args.push_back(*dir);  // remote: the server's root
  CommandResult ls = Run(ls_args);
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  std::vector<std::string> paths;
  for (absl::string_view line :
       absl::StrSplit(ls.out, '\n', absl::SkipEmpty())) {
    paths.push_back(nlohmann::json::parse(line)["path"].get<std::string>());
  }
  EXPECT_THAT(paths, ::testing::Contains(where + "p\\xE9.gguf"));
  for (const std::string& path :
       {where + "p\\xE9.gguf", where + "p\xE9.gguf"}) {
    SCOPED_TRACE(path);
    CommandResult info = Run({"info", path, "z"});
    EXPECT_EQ(info.exit_code, 0) << info.err;
    EXPECT_THAT(info.out, HasSubstr("tensor       z"));
    EXPECT_THAT(info.err, Not(HasSubstr("libprotobuf")));
  }
}

INSTANTIATE_TEST_SUITE_P(BothModes, CliNonUtf8Test, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Remote" : "Embedded";
                         });

}  // namespace
}  // namespace tensormorph
