// ExitCodeOf: a request refused as wrong exits as a usage error whoever
// found it; every other failure as a failed call.
#include "absl/status/status.h"
#include "client/cli/commands.h"
#include "core/util/error_reason.h"
#include "gtest/gtest.h"

namespace tensormorph {
namespace {

TEST(ExitCodeTest, ARequestRefusedAsWrongIsAUsageError) {
  EXPECT_EQ(ExitCodeOf(WithReason(absl::OutOfRangeError("past the shape"),
                                  ErrorReason::kIndexOutOfRange)),
            kExitUsage);
  EXPECT_EQ(ExitCodeOf(WithReason(absl::InvalidArgumentError("--group 32"),
                                  ErrorReason::kRequestInvalid)),
            kExitUsage);
  EXPECT_EQ(ExitCodeOf(WithReason(absl::InvalidArgumentError("'x'"),
                                  ErrorReason::kSliceInvalid)),
            kExitUsage);
}

TEST(ExitCodeTest, EveryOtherFailureIsAFailedCall) {
  EXPECT_EQ(ExitCodeOf(WithReason(absl::NotFoundError("no.such"),
                                  ErrorReason::kTensorNotFound)),
            kExitCallFailed);
  EXPECT_EQ(ExitCodeOf(WithReason(absl::DataLossError("cut"),
                                  ErrorReason::kHeaderInvalid)),
            kExitCallFailed);
  // A full disk, or a file too large for its filesystem (OutputFile).
  EXPECT_EQ(ExitCodeOf(absl::ResourceExhaustedError("cannot write 'x'")),
            kExitCallFailed);
  EXPECT_EQ(ExitCodeOf(absl::UnavailableError("down")), kExitCallFailed);
}

}  // namespace
}  // namespace tensormorph
