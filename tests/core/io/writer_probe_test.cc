// CheckNoWriters: a file another descriptor holds open for writing is
// refused as a file changing under the read (the reason a client retries
// on), naming it; one nobody writes passes.
#include "core/io/writer_probe.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph::writer_probe_test {
namespace {

using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::testing::AllOf;

TEST(WriterProbeTest, AFileOpenForWritingIsAFileChangingUnderTheRead) {
  const std::string path = ::tensormorph::testing::MakeTempDir() + "/m.gguf";
  ::tensormorph::testing::WriteFile(path, "GGUF");
  const auto access = FileAccess::Anywhere();
  bool probed = false;
  ASSERT_TRUE(CheckNoWriters(*access, path, &probed).ok());
  if (!probed) GTEST_SKIP() << "the kernel gives this process no lease";
  const int writer = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(writer, 0);
  EXPECT_THAT(CheckNoWriters(*access, path),
              AllOf(HasReason(ErrorReason::kFileChangedDuringRead),
                    HasMetadata("file", path)));
  ::close(writer);
  EXPECT_TRUE(CheckNoWriters(*access, path).ok());
}

}  // namespace
}  // namespace tensormorph::writer_probe_test
