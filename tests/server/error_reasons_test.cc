// Every error a client sees carries a machine-readable reason: on the wire
// as gRPC status details (google.rpc.Status holding a google.rpc.ErrorInfo,
// read here with the raw stub), and through the C++ Client as
// ErrorReasonOf / ErrorMetadataOf. Which error happened is asserted by its
// reason, never by its English.
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "client/client.h"
#include "gmock/gmock.h"
#include "google/rpc/error_details.pb.h"
#include "google/rpc/status.pb.h"
#include "gtest/gtest.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/loopback_server.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::DemoDir;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::LoopbackServer;
using ::tensormorph::testing::StartLoopbackServer;
using ::testing::Contains;
using ::testing::Pair;

constexpr char kQ8[] = "model-q8_0.gguf";
constexpr char kQ8Tensor[] = "blk.0.attn_q.weight";

class ErrorReasonsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server = new LoopbackServer(StartLoopbackServer({DemoDir()}));
  }
  static void TearDownTestSuite() { delete server; }

  static Client& client() { return *server->client; }

  static absl::Status Read(const std::string& tensor,
                           const std::string& slice) {
    v1::ReadSliceRequest req;
    req.set_checkpoint(kQ8);
    req.set_tensor(tensor);
    req.set_slice(slice);
    return client().ReadSliceAll(req).status();
  }

  static LoopbackServer* server;
};
LoopbackServer* ErrorReasonsTest::server = nullptr;

// The wire format any gRPC client reads: grpc-status-details-bin is a
// google.rpc.Status with the call's code and message and one ErrorInfo.
TEST_F(ErrorReasonsTest, TheStatusDetailsAreGoogleRpcErrorInfo) {
  auto channel =
      grpc::CreateChannel(server->address, grpc::InsecureChannelCredentials());
  auto stub = v1::Tensormorph::NewStub(channel);
  grpc::ClientContext ctx;
  v1::GetTensorRequest req;
  req.set_checkpoint(kQ8);
  req.set_tensor("blk.0.nope");
  v1::GetTensorResponse resp;
  const grpc::Status s = stub->GetTensor(&ctx, req, &resp);
  ASSERT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  google::rpc::Status details;
  ASSERT_TRUE(details.ParseFromString(s.error_details()));
  EXPECT_EQ(details.code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_EQ(details.message(), s.error_message());
  ASSERT_EQ(details.details_size(), 1);
  google::rpc::ErrorInfo info;
  ASSERT_TRUE(details.details(0).UnpackTo(&info));
  EXPECT_EQ(info.reason(), "TENSOR_NOT_FOUND");
  EXPECT_EQ(info.domain(), "tensormorph.dev");
  EXPECT_EQ(info.metadata().at("checkpoint"), kQ8);
  EXPECT_EQ(info.metadata().at("tensor"), "blk.0.nope");
}

TEST_F(ErrorReasonsTest, TheClientKeepsTheReasonAndItsMetadata) {
  const absl::StatusOr<v1::TensorInfo> t =
      client().GetTensor(kQ8, "blk.0.nope");
  EXPECT_THAT(t, HasReason(ErrorReason::kTensorNotFound));
  EXPECT_EQ(ErrorReasonOf(t.status()), "TENSOR_NOT_FOUND");
  EXPECT_EQ(ErrorMetadataOf(t.status()),
            (std::map<std::string, std::string>{{"checkpoint", kQ8},
                                                {"tensor", "blk.0.nope"}}));
  EXPECT_EQ(ErrorReasonOf(absl::OkStatus()), "");
}

TEST_F(ErrorReasonsTest, AMissingCheckpointIsCheckpointNotFound) {
  EXPECT_THAT(client().GetCheckpoint("nope.gguf"),
              HasReason(ErrorReason::kCheckpointNotFound));
  EXPECT_THAT(client().ListTensors("nope/"),
              HasReason(ErrorReason::kCheckpointNotFound));
}

TEST_F(ErrorReasonsTest, APathOutOfTheRootsIsOutsideRoots) {
  const auto r = client().GetCheckpoint("../../../../etc/passwd");
  EXPECT_THAT(r, HasReason(ErrorReason::kOutsideRoots));
  EXPECT_THAT(ErrorMetadataOf(r.status()),
              Contains(Pair("path", "../../../../etc/passwd")));
}

TEST_F(ErrorReasonsTest, SlicesSayWhetherTheExpressionOrTheRangeIsWrong) {
  EXPECT_THAT(Read(kQ8Tensor, "0:1, 0:1, 0:1"),
              HasReason(ErrorReason::kSliceInvalid));
  EXPECT_THAT(Read(kQ8Tensor, "0:1, x"), HasReason(ErrorReason::kSliceInvalid));
  const absl::Status out = Read(kQ8Tensor, "0:1, 99999");
  EXPECT_THAT(out, HasReason(ErrorReason::kSliceOutOfRange));
  EXPECT_THAT(ErrorMetadataOf(out), Contains(Pair("dimension", "1")));
}

TEST_F(ErrorReasonsTest, AScalarIndexOutsideItsDimensionIsIndexOutOfRange) {
  v1::InspectScalarsRequest req;
  req.set_checkpoint(kQ8);
  req.set_tensor(kQ8Tensor);
  req.add_coords(0);
  req.add_coords(1 << 20);
  const auto r = client().InspectScalars(req);
  EXPECT_THAT(r, HasReason(ErrorReason::kIndexOutOfRange));
  EXPECT_THAT(ErrorMetadataOf(r.status()), Contains(Pair("dimension", "1")));
}

TEST_F(ErrorReasonsTest, ALimitNamesItselfItsValueAndWhatWasAsked) {
  v1::GetHeatmapRequest req;
  req.set_checkpoint(kQ8);
  req.set_tensor(kQ8Tensor);
  req.set_width(5000);
  const auto r = client().GetHeatmap(req);
  EXPECT_THAT(r, HasReason(ErrorReason::kLimitExceeded));
  const auto metadata = ErrorMetadataOf(r.status());
  EXPECT_THAT(metadata, Contains(Pair("limit", "max_heatmap_side")));
  EXPECT_THAT(metadata, Contains(Pair("asked", "5000")));
  EXPECT_TRUE(metadata.contains("limit_value"));
}

// GetHeatmapRequest.leading: an index for a dimension the tensor does not
// have was ignored, and the rank-2 view drawn.
TEST_F(ErrorReasonsTest, LeadingIndicesATensorDoesNotHaveAreRequestInvalid) {
  for (const std::vector<int64_t>& leading :
       {std::vector<int64_t>{99}, std::vector<int64_t>(100000, 0)}) {
    v1::GetHeatmapRequest req;
    req.set_checkpoint(kQ8);
    req.set_tensor(kQ8Tensor);  // rank 2: no leading dimension
    for (int64_t i : leading) req.add_leading(i);
    const auto r = client().GetHeatmap(req);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << r.status();
    EXPECT_THAT(r, HasReason(ErrorReason::kRequestInvalid));
    EXPECT_THAT(ErrorMetadataOf(r.status()),
                Contains(Pair("field", "leading")));
  }
}

TEST_F(ErrorReasonsTest, ARequestEnumNumberThatIsNoValueIsEnumValueInvalid) {
  v1::GetHeatmapRequest req;
  req.set_checkpoint(kQ8);
  req.set_tensor(kQ8Tensor);
  req.set_mode(static_cast<v1::HeatmapMode>(99));
  const auto r = client().GetHeatmap(req);
  EXPECT_THAT(r, HasReason(ErrorReason::kEnumValueInvalid));
  EXPECT_THAT(ErrorMetadataOf(r.status()), Contains(Pair("field", "mode")));
}

TEST_F(ErrorReasonsTest, AFileThatBreaksItsFormatIsHeaderInvalid) {
  const std::string dir = ::tensormorph::testing::MakeTempDir();
  {
    std::ofstream f(dir + "/bad.gguf", std::ios::binary);
    // Version 3, then 3 bytes where the 8-byte tensor count should be.
    f << "GGUF" << std::string("\x03\0\0\0", 4) << std::string(3, '\xff');
  }
  LoopbackServer other = StartLoopbackServer({dir});
  const auto r = other.client->GetCheckpoint("bad.gguf");
  EXPECT_THAT(r, HasReason(ErrorReason::kHeaderInvalid));
  const auto metadata = ErrorMetadataOf(r.status());
  EXPECT_TRUE(metadata.contains("file")) << r.status();
  EXPECT_THAT(metadata, Contains(Pair("rule", "truncated")));
}

// A status with no reason attached still reaches the client with its
// code's generic one: there is always a reason to branch on.
TEST_F(ErrorReasonsTest, AnErrorWithoutAReasonGetsItsCodesGenericOne) {
  EXPECT_THAT(client().GetTensor(kQ8, ""),
              HasReason(ErrorReason::kRequestInvalid));
}

}  // namespace
}  // namespace tensormorph
