// ComputeSparsity through a real server on loopback: one call gives, for
// every tensor of a checkpoint, what ComputeStats of that tensor counts
// (zeros, sparsity, and pruned and induced zeros against a reference found
// as ComputeStats finds it, a GGUF's Hugging Face source included), in name
// order with its progress; refusals name their reason.
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/status_mapping.h"
#include "tensormorph/v1/tensormorph.grpc.pb.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/loopback_server.h"
#include "tests/support/status_matchers.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::DemoDir;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::LoopbackServer;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::StartLoopbackServer;
using ::testing::AllOf;
using ::testing::HasSubstr;

class ComputeSparsityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server = new LoopbackServer(StartLoopbackServer({DemoDir()}));
  }
  static void TearDownTestSuite() { delete server; }

  static absl::StatusOr<std::vector<v1::TensorSparsity>> Sparsity(
      const v1::ComputeSparsityRequest& req) {
    auto stub = v1::Tensormorph::NewStub(grpc::CreateChannel(
        server->address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    auto reader = stub->ComputeSparsity(&ctx, req);
    std::vector<v1::TensorSparsity> out;
    v1::TensorSparsity t;
    while (reader->Read(&t)) out.push_back(t);
    absl::Status s = FromGrpcStatus(reader->Finish());
    if (!s.ok()) return s;
    return out;
  }

  static v1::ComputeSparsityRequest Request(const std::string& checkpoint,
                                            const std::string& reference,
                                            const std::string& filter = "") {
    v1::ComputeSparsityRequest req;
    req.set_checkpoint(checkpoint);
    req.set_reference(reference);
    req.set_filter(filter);
    return req;
  }

  // Every streamed tensor equals ComputeStats of it, one by one.
  static void ExpectEqualsComputeStats(
      const std::vector<v1::TensorSparsity>& got, const std::string& checkpoint,
      const std::string& reference) {
    for (const v1::TensorSparsity& t : got) {
      SCOPED_TRACE(t.name());
      v1::ComputeStatsRequest req;
      req.set_checkpoint(checkpoint);
      req.set_tensor(t.name());
      req.set_bins(1);
      if (t.has_reference()) req.set_reference(reference);
      auto st = server->client->ComputeStats(req);
      ASSERT_TRUE(st.ok()) << st.status();
      EXPECT_EQ(t.count(), st->count());
      EXPECT_EQ(t.zeros(), st->zeros());
      EXPECT_EQ(t.sparsity(), st->sparsity());
      EXPECT_EQ(t.has_reference(), st->has_reference());
      EXPECT_EQ(t.pruned_zeros(), st->pruned_zeros());
      EXPECT_EQ(t.induced_zeros(), st->induced_zeros());
      EXPECT_EQ(t.scheme(), st->encoding().scheme());
    }
  }

  static LoopbackServer* server;
};
LoopbackServer* ComputeSparsityTest::server = nullptr;

TEST_F(ComputeSparsityTest, EveryTensorEqualsComputeStatsInNameOrder) {
  auto tensors = server->client->ListTensors("model-q4_k_m.gguf", "");
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  auto got = Sparsity(Request("model-q4_k_m.gguf", "model-f32.gguf"));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), tensors->size());
  for (size_t k = 0; k < got->size(); ++k) {
    EXPECT_EQ((*got)[k].name(), (*tensors)[k].name());
    EXPECT_EQ((*got)[k].tensors_done(), static_cast<int64_t>(k + 1));
    EXPECT_EQ((*got)[k].tensors_total(), static_cast<int64_t>(got->size()));
    EXPECT_TRUE((*got)[k].has_reference()) << (*got)[k].no_reference();
    EXPECT_EQ((*got)[k].reference_tensor(), (*got)[k].name());
  }
  ExpectEqualsComputeStats(*got, "model-q4_k_m.gguf", "model-f32.gguf");
}

// A GGUF against its Hugging Face source: names translated and Q/K rows
// lined up as ComputeStats does it.
TEST_F(ComputeSparsityTest, AGgufFindsItsHuggingFaceSource) {
  auto got = Sparsity(Request("model-q8_0.gguf", "source", "blk.0.*"));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_FALSE(got->empty());
  for (const v1::TensorSparsity& t : *got) {
    EXPECT_TRUE(t.has_reference()) << t.name() << ": " << t.no_reference();
    EXPECT_THAT(t.reference_tensor(), HasSubstr("model.layers.0."));
  }
  ExpectEqualsComputeStats(*got, "model-q8_0.gguf", "source");
}

TEST_F(ComputeSparsityTest, WithoutAReferenceDecodedZerosOnly) {
  auto got = Sparsity(Request("model-q8_0.gguf", ""));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_FALSE(got->empty());
  for (const v1::TensorSparsity& t : *got) {
    EXPECT_FALSE(t.has_reference());
    EXPECT_TRUE(t.no_reference().empty());
  }
  ExpectEqualsComputeStats(*got, "model-q8_0.gguf", "");
}

TEST_F(ComputeSparsityTest, RefusalsNameTheirReason) {
  EXPECT_THAT(Sparsity(Request("", "")),
              HasReason(ErrorReason::kRequestInvalid));
  EXPECT_THAT(Sparsity(Request("no-such.gguf", "")),
              AllOf(HasReason(ErrorReason::kCheckpointNotFound),
                    MessageNames("no-such.gguf")));
  EXPECT_THAT(Sparsity(Request("model-q8_0.gguf", "no-such-source")),
              AllOf(HasReason(ErrorReason::kCheckpointNotFound),
                    MessageNames("no-such-source")));
  EXPECT_THAT(Sparsity(Request("model-q8_0.gguf", "", "nothing.*")),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("'nothing.*'")));
}

}  // namespace
}  // namespace tensormorph
