// CheckRequestUtf8: a request whose strings are not UTF-8 is refused before
// it is sent, naming the field, instead of failing in protobuf's parser on
// the other side with no word of which.
#include "client/request_utf8.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensormorph/v1/tensormorph.pb.h"
#include "tests/support/status_matchers.h"

namespace tensormorph::request_utf8_test {
namespace {

using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::testing::AllOf;

TEST(RequestUtf8Test, EveryStringOfValidUtf8Passes) {
  v1::InspectScalarsRequest req;
  req.set_checkpoint("models/caf\xC3\xA9.gguf");
  req.set_tensor("blk.0.attn_q.weight");
  for (int i = 0; i < 1000; ++i) req.add_coords(i);
  EXPECT_TRUE(CheckRequestUtf8(req).ok());
  EXPECT_TRUE(CheckRequestUtf8(v1::GetServerInfoRequest()).ok());
}

TEST(RequestUtf8Test, AStringThatIsNotUtf8IsRequestInvalidNamingItsField) {
  v1::GetCheckpointRequest req;
  req.set_checkpoint("models/caf\xE9.gguf");
  EXPECT_THAT(CheckRequestUtf8(req),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    HasMetadata("field", "checkpoint")));
}

TEST(RequestUtf8Test, RepeatedAndNestedStringsAreNamedByTheirPath) {
  v1::CompareQuantizationsRequest compare;
  compare.set_source("src");
  compare.add_quantizations("q8.gguf");
  compare.add_quantizations("q4\xFF.gguf");
  EXPECT_THAT(CheckRequestUtf8(compare), HasMetadata("field", "quantizations"));
  v1::GetCheckpointResponse nested;
  nested.add_files()->set_path("a.safetensors");
  nested.add_files()->set_path("b\xC0\x80.safetensors");  // overlong NUL
  EXPECT_THAT(CheckRequestUtf8(nested), HasMetadata("field", "files.path"));
}

}  // namespace
}  // namespace tensormorph::request_utf8_test
