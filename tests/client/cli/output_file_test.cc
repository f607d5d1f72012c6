// OutputFile and CheckOutputIsNoInput, the one helper every file-writing
// command uses: a file appears whole at its name or not at all, the
// previous one stays until then, and an output that is an input is refused
// however it is spelled. (The commands themselves, through the real binary:
// output_safety_cli_test.cc.)
#include "client/cli/output_file.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ReadFileBytes;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::StartsWith;
using Kind = CommandInput::Kind;

// The names in `dir`, sorted.
std::vector<std::string> Names(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    names.insert(e.path().filename().string());
  }
  return {names.begin(), names.end()};
}

mode_t Mode(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// A file whose directory takes no new file (/proc) is refused saying that
// its temporary could not be made there, not that the file is missing.
TEST(OutputFileTest, ADirectoryThatTakesNoTemporaryIsNamed) {
  auto file = OutputFile::Create("/proc/version");
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status(), MessageNames("creating its temporary in '/proc'"));
}

TEST(OutputFileTest, TheNameHoldsTheOldFileUntilCommitThenTheWholeNewOne) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/out.npy";
  WriteFile(path, "old");
  auto file = OutputFile::Create(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE((*file)->Write("new ").ok());
  ASSERT_TRUE((*file)->Write("bytes").ok());
  EXPECT_EQ(ReadFileBytes(path), "old");
  // The temporary is beside it, hidden, named after it.
  ASSERT_EQ(Names(dir).size(), 2u);
  EXPECT_THAT(Names(dir)[0], StartsWith(".out.npy.tmp-"));
  ASSERT_TRUE((*file)->Commit().ok());
  EXPECT_EQ(ReadFileBytes(path), "new bytes");
  EXPECT_THAT(Names(dir), ElementsAre("out.npy"));
  file->reset();
  EXPECT_EQ(ReadFileBytes(path), "new bytes");
}

TEST(OutputFileTest, DestroyedUncommittedItLeavesThePreviousFileAndNoTrace) {
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/kept.json", "previous");
  {
    auto file = OutputFile::Create(dir + "/kept.json");
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE((*file)->Write("half a manif").ok());
  }
  EXPECT_EQ(ReadFileBytes(dir + "/kept.json"), "previous");
  EXPECT_THAT(Names(dir), ElementsAre("kept.json"));
  {
    auto file = OutputFile::Create(dir + "/new.json");
    ASSERT_TRUE(file.ok());
  }
  EXPECT_THAT(Names(dir), ElementsAre("kept.json"));
}

TEST(OutputFileTest,
     ANewFileIsCreatedAsOpenCreatesOneAndAReplacedOneKeepsItsMode) {
  const std::string dir = MakeTempDir();
  const mode_t old_umask = ::umask(027);
  auto created = OutputFile::Create(dir + "/new");
  ::umask(old_umask);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE((*created)->Commit().ok());
  EXPECT_EQ(Mode(dir + "/new"), 0640u);

  WriteFile(dir + "/private", "old");
  ASSERT_EQ(::chmod((dir + "/private").c_str(), 0600), 0);
  auto replaced = OutputFile::Create(dir + "/private");
  ASSERT_TRUE(replaced.ok());
  ASSERT_TRUE((*replaced)->Commit().ok());
  EXPECT_EQ(Mode(dir + "/private"), 0600u);
}

TEST(OutputFileTest, ASymbolicLinkIsFollowedAndKept) {
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/real.png", "old");
  fs::create_symlink(dir + "/real.png", dir + "/link.png");
  auto file = OutputFile::Create(dir + "/link.png");
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->Write("new").ok());
  ASSERT_TRUE((*file)->Commit().ok());
  EXPECT_TRUE(fs::is_symlink(dir + "/link.png"));
  EXPECT_EQ(ReadFileBytes(dir + "/real.png"), "new");
}

TEST(OutputFileTest, ANonRegularFileIsWrittenInPlaceAndNeverRemoved) {
  {
    auto file = OutputFile::Create("/dev/null");
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_TRUE((*file)->Write("discarded").ok());
  }
  EXPECT_EQ(::access("/dev/null", F_OK), 0);
  auto file = OutputFile::Create("/dev/null");
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE((*file)->Commit().ok());
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

TEST(OutputFileTest, APathThatCannotBeWrittenIsRefusedNamingIt) {
  EXPECT_THAT(OutputFile::Create("/nonexistent-dir/x.npy").status(),
              AllOf(HasReason(ErrorReason::kNotFound),
                    MessageNames("'/nonexistent-dir/x.npy'")));
  const std::string dir = MakeTempDir();
  EXPECT_THAT(
      OutputFile::Create(dir).status(),
      AllOf(HasReason(ErrorReason::kFailedPrecondition), MessageNames(dir)));
  EXPECT_THAT(Names(dir), IsEmpty());
}

TEST(OutputFileTest, ACommittedFileTakesNoMoreWrites) {
  auto file = OutputFile::Create(MakeTempDir() + "/x");
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*file)->Commit().ok());
  EXPECT_THAT((*file)->Write("late"),
              HasReason(ErrorReason::kFailedPrecondition));
  EXPECT_THAT((*file)->Commit(), HasReason(ErrorReason::kFailedPrecondition));
}

// A signal that ends the process removes the temporary first; the process
// still dies of that signal. (Fork-style death test: the child shares the
// parent's paths.)
TEST(OutputFileDeathTest,
     ASignalRemovesTheTemporaryAndTheProcessStillDiesOfIt) {
  for (int signal : {SIGINT, SIGTERM}) {
    const std::string dir = MakeTempDir();
    WriteFile(dir + "/out.npy", "old");
    EXPECT_EXIT(
        {
          auto file = OutputFile::Create(dir + "/out.npy");
          if (!file.ok() || !(*file)->Write("partial").ok()) ::_exit(1);
          ::raise(signal);
          ::_exit(2);  // not reached: the handler re-raises
        },
        ::testing::KilledBySignal(signal), "");
    EXPECT_EQ(ReadFileBytes(dir + "/out.npy"), "old");
    EXPECT_THAT(Names(dir), ElementsAre("out.npy"));
  }
}

// ---- CheckOutputIsNoInput ----

class OutputIsNoInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    fs::create_directories(dir_ + "/single");
    fs::create_directories(dir_ + "/sharded/sub");
    WriteFile(dir_ + "/single/m.safetensors", "weights");
    WriteFile(dir_ + "/single/config.json", "{}");
    WriteFile(dir_ + "/single/model.safetensors.index.json", "{}");
    WriteFile(dir_ + "/single/other.gguf", "gguf");
    WriteFile(dir_ + "/sharded/model-00001-of-00002.safetensors", "s1");
    WriteFile(dir_ + "/sharded/sub/deep.json", "{}");
    WriteFile(dir_ + "/verify.json", "{}");
  }
  absl::Status Check(const std::string& output) {
    return CheckOutputIsNoInput(
        "-o", output,
        {{Kind::kCheckpoint, dir_ + "/single/m.safetensors", "checkpoint"},
         {Kind::kCheckpoint, dir_ + "/sharded", "--ref checkpoint"},
         {Kind::kFile, dir_ + "/verify.json", "--verify manifest"},
         {Kind::kCheckpoint, dir_ + "/not-here", "checkpoint"},
         {Kind::kCheckpoint, "", "--source checkpoint"}});
  }
  std::string dir_;
};

TEST_F(OutputIsNoInputTest, TheCheckpointFileHoweverSpelledIsRefused) {
  fs::create_symlink(dir_ + "/single/m.safetensors", dir_ + "/soft");
  fs::create_hard_link(dir_ + "/single/m.safetensors", dir_ + "/hard");
  for (const std::string& out : {dir_ + "/single/m.safetensors",
                                 dir_ + "/single/../single/./m.safetensors",
                                 dir_ + "/soft", dir_ + "/hard"}) {
    EXPECT_THAT(Check(out), HasReason(ErrorReason::kRequestInvalid)) << out;
  }
}

TEST_F(OutputIsNoInputTest, CompanionsBesideACheckpointFileAreRefused) {
  // Existing or not yet: a config written there changes how it reads.
  for (const char* name :
       {"config.json", "quantize_config.json", "quant_config.json",
        "hf_quant_config.json", "model.safetensors.index.json",
        "x.safetensors.index.json", "other.gguf", "new.safetensors"}) {
    EXPECT_THAT(Check(dir_ + "/single/" + name),
                HasReason(ErrorReason::kRequestInvalid))
        << name;
  }
  fs::create_hard_link(dir_ + "/single/config.json", dir_ + "/cfg-link");
  EXPECT_THAT(Check(dir_ + "/cfg-link"),
              HasReason(ErrorReason::kRequestInvalid));
  EXPECT_TRUE(Check(dir_ + "/single/out.npy").ok());
  EXPECT_TRUE(Check(dir_ + "/single/notes.json").ok());
}

TEST_F(OutputIsNoInputTest, AnythingInsideADirectoryCheckpointIsRefused) {
  fs::create_hard_link(dir_ + "/sharded/sub/deep.json", dir_ + "/deep-link");
  for (const std::string& out :
       {dir_ + "/sharded", dir_ + "/sharded/model-00001-of-00002.safetensors",
        dir_ + "/sharded/new.npy", dir_ + "/sharded/sub/deep.json",
        dir_ + "/sharded/sub/../sub/new.png", dir_ + "/deep-link"}) {
    EXPECT_THAT(Check(out), HasReason(ErrorReason::kRequestInvalid)) << out;
  }
  EXPECT_TRUE(Check(dir_ + "/sharded-out.npy").ok());
}

TEST_F(OutputIsNoInputTest, AFileInputIsRefusedAndWhatIsNoInputPasses) {
  EXPECT_THAT(Check(dir_ + "/verify.json"),
              HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(Check(dir_ + "/./verify.json"),
              HasReason(ErrorReason::kRequestInvalid));
  EXPECT_TRUE(Check(dir_ + "/manifest.json").ok());
  EXPECT_TRUE(Check("/dev/null").ok());
  EXPECT_TRUE(Check("").ok());  // no output asked for
  // In a directory that does not exist: nothing to refuse, and Create will
  // say why it cannot write there.
  EXPECT_TRUE(Check(dir_ + "/nowhere/x.npy").ok());
}

// An output that is one input itself and lies beside another (compare's
// quantization [0] beside its source) is named as the input it is.
TEST_F(OutputIsNoInputTest, AnInputItselfIsNamedBeforeOneItLiesBeside) {
  const std::string quantization = dir_ + "/single/other.gguf";
  const absl::Status s = CheckOutputIsNoInput(
      "--html", quantization,
      {{Kind::kCheckpoint, dir_ + "/single/m.safetensors", "source checkpoint"},
       {Kind::kCheckpoint, quantization, "quantization [0]"}});
  EXPECT_THAT(s, HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(s,
              MessageNames("quantization [0] '" + quantization + "' itself"));
}

}  // namespace
}  // namespace tensormorph
