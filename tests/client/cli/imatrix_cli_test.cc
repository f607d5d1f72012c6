// An importance matrix that is not there, or lies outside the server's
// roots: the refusal calls it an importance matrix (never a checkpoint),
// names its path in the metadata, and hints at nothing about checkpoints;
// in embedded mode it speaks of no roots. Over gRPC, through the CLI
// embedded and against a tensormorphd.
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "core/util/error_reason.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/cli_error.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/process.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliJsonErrorOf;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::MessageOmits;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::ServerProcess;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

class ImatrixRefusalTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root = new std::string(::tensormorph::testing::MakeTempDir());
    ::tensormorph::testing::WriteDemoImatrix(*root + "/imatrix.dat");
    server = new ServerProcess({*root});
  }
  static void TearDownTestSuite() {
    delete server;
    delete root;
  }
  static CommandResult Remote(std::vector<std::string> args) {
    args.insert(args.begin(), {CliPath(), "--server", server->address()});
    return RunCommand(args);
  }

  static std::string* root;
  static ServerProcess* server;
};

std::string* ImatrixRefusalTest::root = nullptr;
ServerProcess* ImatrixRefusalTest::server = nullptr;

TEST_F(ImatrixRefusalTest, AMissingMatrixIsNotFoundNamingItsPath) {
  auto client = Client::Connect(server->address());
  ASSERT_TRUE(client.ok()) << client.status();
  const auto rpc = (*client)->GetImportanceMatrix("nope.dat");
  EXPECT_THAT(
      rpc.status(),
      AllOf(HasReason(ErrorReason::kNotFound), HasMetadata("path", "nope.dat"),
            MessageNames("importance matrix 'nope.dat' not found"),
            MessageOmits("checkpoint"), MessageOmits("path:")));
  // Through the CLI, remote and embedded: the same reason and metadata; no
  // roots in embedded mode, which has none.
  for (const bool remote : {true, false}) {
    SCOPED_TRACE(remote ? "remote" : "embedded");
    const std::string path = remote ? "nope.dat" : *root + "/nope.dat";
    std::vector<std::string> args = {"--json", "imatrix", path};
    const CommandResult r =
        remote ? Remote(args)
               : RunCommand({CliPath(), args[0], args[1], args[2]});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_THAT(CliJsonErrorOf(r.out), AllOf(HasReason(ErrorReason::kNotFound),
                                             HasMetadata("path", path)));
    const absl::Status line = CliErrorOf(r.err);
    EXPECT_THAT(line, AllOf(MessageNames("importance matrix '" + path + "'"),
                            MessageOmits("checkpoint"), MessageOmits("path:")));
    if (!remote) {
      EXPECT_THAT(line, MessageOmits("roots"));
    }
  }
}

TEST_F(ImatrixRefusalTest,
       AMatrixOutsideTheRootsIsCalledOneWithNoCheckpointHint) {
  auto client = Client::Connect(server->address());
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_THAT((*client)->GetImportanceMatrix("/etc/passwd").status(),
              AllOf(HasReason(ErrorReason::kOutsideRoots),
                    HasMetadata("path", "/etc/passwd"),
                    MessageNames("importance matrix '/etc/passwd' is outside"),
                    MessageOmits("checkpoint")));
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"imatrix", "/etc/passwd"},
        std::vector<std::string>{"diff", "q", "s", "--imatrix",
                                 "/etc/passwd"}}) {
    SCOPED_TRACE(args[0]);
    const CommandResult r = Remote(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    // A diff opens its matrix before its checkpoints (which do not exist).
    EXPECT_THAT(CliErrorOf(r.err),
                AllOf(HasReason(ErrorReason::kOutsideRoots),
                      MessageNames("importance matrix '/etc/passwd'"),
                      MessageOmits("checkpoint")));
    EXPECT_THAT(r.err, Not(HasSubstr("tensormorph info")));
  }
}

}  // namespace
}  // namespace tensormorph
