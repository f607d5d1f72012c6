// Whole user-named inputs read into memory: what fits is read exactly, what
// does not is refused before it is held, and a directory or a failing read
// is an error naming the input, never an exception.
#include "core/util/read_whole.h"

#include <sstream>
#include <stdexcept>
#include <streambuf>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::StatusIs;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;

TEST(ReadWholeTest, ReadsAStreamUpToItsLimitExactly) {
  const std::string bytes(200'000, 'x');  // more than one block
  std::istringstream in(bytes);
  absl::StatusOr<std::string> text = ReadWhole(in, "the input", 200'000);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, bytes);
}

TEST(ReadWholeTest, AStreamPastItsLimitIsRefusedNamingTheLimit) {
  std::istringstream in(std::string(70'000, 'x'));
  EXPECT_THAT(ReadWhole(in, "--indices-file - (stdin)", 1 << 16).status(),
              AllOf(StatusIs(absl::StatusCode::kInvalidArgument, ""),
                    MessageNames("--indices-file - (stdin)"),
                    MessageNames("more than 64 KiB")));
  // A size known to be too big is refused before anything is read.
  std::istringstream small("x");
  EXPECT_THAT(ReadWhole(small, "f", 1 << 20, (1 << 20) + 1).status(),
              MessageNames("more than 1 MiB"));
}

// A stream buffer whose read fails as a file's does (libstdc++'s filebuf
// throws out of underflow for EISDIR and EIO).
class FailingBuffer : public std::streambuf {
 protected:
  int_type underflow() override { throw std::runtime_error("EIO"); }
};

TEST(ReadWholeTest, AFailingReadIsAnErrorNotAnException) {
  FailingBuffer buffer;
  std::istream in(&buffer);
  EXPECT_THAT(ReadWhole(in, "the input", 100).status(),
              AllOf(StatusIs(absl::StatusCode::kInvalidArgument, ""),
                    MessageNames("cannot read the input to its end")));
}

TEST(ReadWholeFileTest, ADirectoryOrAMissingFileIsNamed) {
  const std::string dir = MakeTempDir();
  EXPECT_THAT(ReadWholeFile(dir, "--tls-ca 'd'", 100).status(),
              MessageNames("--tls-ca 'd' is a directory"));
  EXPECT_THAT(ReadWholeFile(dir + "/none", "--verify 'n'", 100).status(),
              MessageNames("cannot read --verify 'n': No such file"));
  WriteFile(dir + "/f", "hello");
  EXPECT_EQ(*ReadWholeFile(dir + "/f", "f", 5), "hello");
  EXPECT_THAT(ReadWholeFile(dir + "/f", "f", 4).status(),
              MessageNames("more than 4 bytes"));
}

}  // namespace
}  // namespace tensormorph
