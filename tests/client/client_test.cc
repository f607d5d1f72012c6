// The client library against the real service, remote (a tensormorphd
// process on a loopback port) and embedded (in-process), with the same cases.
#include "client/client.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>

#include "client/embedded/embedded_client.h"
#include "core/format/checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/same_bits.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::SameBits;
using ::testing::AllOf;

using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::FixturesDir;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::ReadF32File;
using ::tensormorph::testing::ServerProcess;
using ::tensormorph::testing::WriteFile;

namespace fs = std::filesystem;

enum class Mode { kRemote, kEmbedded };

class ClientTest : public ::testing::TestWithParam<Mode> {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new std::string(MakeTempDir());
    // A corrupt checkpoint: a valid GGUF cut short in its tensor data.
    std::string q4k =
        ::tensormorph::testing::ReadFileBytes(Fixture("gguf/Q4_K.gguf"));
    WriteFile(*scratch_ + "/corrupt.gguf", q4k.substr(0, q4k.size() - 100));
    fs::create_directory(*scratch_ + "/inner");
    fs::create_directory_symlink("/etc", *scratch_ + "/inner/escape");
    server_ = new ServerProcess({FixturesDir(), *scratch_});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  void SetUp() override {
    auto c = GetParam() == Mode::kRemote ? Client::Connect(server_->address())
                                         : EmbeddedClient();
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }

  // Absolute paths inside the server's roots work in both modes.
  static std::string Gguf(const std::string& type) {
    return Fixture("gguf/" + type + ".gguf");
  }

  v1::ReadSliceRequest Read(const std::string& ckpt, const std::string& tensor,
                            const std::string& slice = "") {
    v1::ReadSliceRequest r;
    r.set_checkpoint(ckpt);
    r.set_tensor(tensor);
    r.set_slice(slice);
    return r;
  }

  static std::string* scratch_;
  static ServerProcess* server_;
  std::unique_ptr<Client> client_;
};
std::string* ClientTest::scratch_ = nullptr;
ServerProcess* ClientTest::server_ = nullptr;

TEST_P(ClientTest, ReadsAQ4KTensorBitExactly) {
  auto data =
      client_->ReadSliceAll(Read(Gguf("Q4_K"), "blk.0.ffn_down.weight"));
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->shape, (std::vector<int64_t>{4, 256}));
  EXPECT_EQ(data->dtype, "F32");
  EXPECT_TRUE(SameBits(
      data->floats(),
      ReadF32File(Fixture("gguf/Q4_K.blk.0.ffn_down.weight.deq.f32"))));
}

TEST_P(ClientTest, SteppedSliceEqualsTheSameSliceOfTheExpectedArray) {
  const auto want =
      ReadF32File(Fixture("gguf/Q6_K.blk.0.attn_q.weight.deq.f32"));
  auto data = client_->ReadSliceAll(
      Read(Gguf("Q6_K"), "blk.0.attn_q.weight", "::-2, 5:250:9"));
  ASSERT_TRUE(data.ok()) << data.status();
  std::vector<float> expected;
  for (int r = 3; r >= 0; r -= 2) {
    for (int c = 5; c < 250; c += 9) expected.push_back(want[r * 256 + c]);
  }
  EXPECT_EQ(data->shape, (std::vector<int64_t>{2, 28}));
  EXPECT_TRUE(SameBits(data->floats(), expected));
}

TEST_P(ClientTest, SmallChunksArriveInOrderWithOffsets) {
  v1::ReadSliceRequest r = Read(Gguf("F32"), "blk.0.attn_q.weight");
  r.set_max_chunk_bytes(1000);
  int chunks = 0;
  int64_t next = 0;
  absl::Status s = client_->ReadSlice(r, [&](const v1::SliceChunk& c) {
    EXPECT_EQ(c.has_header(), chunks == 0);
    EXPECT_EQ(c.element_offset(), next);
    EXPECT_LE(c.data().size(), 1000u);
    next += c.element_count();
    ++chunks;
    return true;
  });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(next, 1024);
  EXPECT_EQ(chunks, 5);  // 250 floats per chunk
}

TEST_P(ClientTest, RawModeReturnsStoredBlocks) {
  auto ckpt = Checkpoint::Open(Gguf("Q4_K"));
  ASSERT_TRUE(ckpt.ok());
  const StoredTensor* st = (*ckpt)->FindStored("blk.0.attn_q.weight");
  v1::ReadSliceRequest r = Read(Gguf("Q4_K"), "blk.0.attn_q.weight", "1:3");
  r.set_mode(v1::OUTPUT_MODE_RAW);
  auto data = client_->ReadSliceAll(r);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->dtype, "Q4_K");
  EXPECT_EQ(
      data->bytes,
      std::string(reinterpret_cast<const char*>(st->data.data()) + 144, 288));
  r.set_slice(":, 0:100");
  auto split = client_->ReadSliceAll(r);
  EXPECT_THAT(split, AllOf(HasReason(ErrorReason::kRequestInvalid),
                           MessageNames("Q4_K"), MessageNames("256")));
}

TEST_P(ClientTest, InspectMatchesCoreForQ4KQ8AndBf16) {
  for (const std::string type : {"Q4_K", "Q8_0", "BF16"}) {
    SCOPED_TRACE(type);
    auto ckpt = Checkpoint::Open(Gguf(type));
    ASSERT_TRUE(ckpt.ok());
    const LogicalTensor* t = (*ckpt)->FindTensor("blk.0.ffn_down.weight");
    v1::InspectScalarsRequest req;
    req.set_checkpoint(Gguf(type));
    req.set_tensor("blk.0.ffn_down.weight");
    for (int64_t v : {3, 17, 0, 0, -1, -1}) req.add_coords(v);
    req.add_flat_indices(300);
    auto resp = client_->InspectScalars(req);
    ASSERT_TRUE(resp.ok()) << resp.status();
    ASSERT_EQ(resp->scalars_size(), 4);
    EXPECT_EQ(resp->encoding().scheme(), type);
    const int64_t flats[] = {3 * 256 + 17, 0, 1023, 300};
    for (int i = 0; i < 4; ++i) {
      ScalarInfo want;
      ASSERT_TRUE(t->encoding->Inspect(flats[i], &want).ok());
      const v1::ScalarInspection& got = resp->scalars(i);
      EXPECT_EQ(got.flat_index(), flats[i]);
      EXPECT_EQ(got.raw_code(), want.code);
      EXPECT_EQ(got.raw_bits(), want.code_bits_value);
      EXPECT_EQ(got.scale(), want.scale);
      EXPECT_EQ(got.zero_point(), want.zero_point);
      EXPECT_EQ(got.offset(), want.offset);
      EXPECT_EQ(got.block(), want.block);
      EXPECT_EQ(got.sub_block(), want.sub_block);
      EXPECT_EQ(got.step(), want.step);
      EXPECT_EQ(got.value(), want.value);
      EXPECT_EQ(got.params_size(), want.num_params);
    }
    EXPECT_EQ(resp->scalars(2).index(0), 3);
    EXPECT_EQ(resp->scalars(2).index(1), 255);
  }
}

TEST_P(ClientTest, BigBatchesOnAnArenaMatchCoreScalarForScalar) {
  // 5,000 indices: the server inspects them in two halves when two workers
  // are free; the reply keeps the request's order either way.
  auto ckpt = Checkpoint::Open(Gguf("Q4_K"));
  ASSERT_TRUE(ckpt.ok());
  const LogicalTensor* t = (*ckpt)->FindTensor("blk.0.ffn_down.weight");
  v1::InspectScalarsRequest req;
  req.set_checkpoint(Gguf("Q4_K"));
  req.set_tensor("blk.0.ffn_down.weight");
  for (int64_t i = 0; i < 5000; ++i) {
    req.add_flat_indices(i * 7919 % t->num_elements);
  }
  google::protobuf::Arena arena;
  auto* resp =
      google::protobuf::Arena::CreateMessage<v1::InspectScalarsResponse>(
          &arena);
  ASSERT_TRUE(client_->InspectScalars(req, resp).ok());
  ASSERT_EQ(resp->scalars_size(), 5000);
  for (int i = 0; i < 5000; ++i) {
    const v1::ScalarInspection& got = resp->scalars(i);
    ASSERT_EQ(got.flat_index(), req.flat_indices(i));
    ScalarInfo want;
    ASSERT_TRUE(t->encoding->Inspect(got.flat_index(), &want).ok());
    ASSERT_EQ(got.value(), want.value) << i;
    ASSERT_EQ(got.raw_code(), want.code) << i;
    ASSERT_EQ(got.index(0) * t->shape[1] + got.index(1), got.flat_index());
  }
  // The by-value call gives the same reply.
  auto by_value = client_->InspectScalars(req);
  ASSERT_TRUE(by_value.ok());
  EXPECT_EQ(by_value->SerializeAsString(), resp->SerializeAsString());
}

TEST_P(ClientTest, ListsAndDescribes) {
  auto tensors = client_->ListTensors(Gguf("Q4_K"), "blk.0.*.weight");
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 3u);
  const v1::TensorInfo& q = (*tensors)[1];
  EXPECT_EQ(q.name(), "blk.0.attn_q.weight");
  EXPECT_EQ(q.encoding().scheme(), "Q4_K");
  EXPECT_EQ(q.layout(), v1::LAYOUT_ROW_MAJOR);
  EXPECT_THAT(q.strides(), ::testing::ElementsAre(256, 1));
  EXPECT_EQ(q.stored_bytes(), 576);
  ASSERT_EQ(q.parts_size(), 1);
  EXPECT_EQ(q.parts(0).file(), "Q4_K.gguf");
  auto info = client_->GetCheckpoint(Gguf("Q4_K"));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->format(), v1::CHECKPOINT_FORMAT_GGUF);
  EXPECT_EQ(info->tensor_count(), 3);
}

TEST_P(ClientTest, BadRequestsGetPreciseStatusesAndServingContinues) {
  auto missing = client_->GetCheckpoint(Fixture("gguf/NOPE.gguf"));
  EXPECT_THAT(missing, HasReason(ErrorReason::kCheckpointNotFound));
  auto no_tensor = client_->ReadSliceAll(Read(Gguf("Q8_0"), "no.such.tensor"));
  EXPECT_THAT(no_tensor, AllOf(HasReason(ErrorReason::kTensorNotFound),
                               HasMetadata("tensor", "no.such.tensor")));
  auto oor =
      client_->ReadSliceAll(Read(Gguf("Q8_0"), "blk.0.attn_q.weight", "4"));
  EXPECT_THAT(oor, AllOf(HasReason(ErrorReason::kSliceOutOfRange),
                         HasMetadata("dimension", "0")));
  v1::InspectScalarsRequest req;
  req.set_checkpoint(Gguf("Q8_0"));
  req.set_tensor("blk.0.attn_q.weight");
  req.add_coords(0);
  req.add_coords(256);
  EXPECT_THAT(client_->InspectScalars(req),
              HasReason(ErrorReason::kIndexOutOfRange));
  auto corrupt = client_->GetCheckpoint(*scratch_ + "/corrupt.gguf");
  EXPECT_THAT(corrupt, AllOf(HasReason(ErrorReason::kHeaderInvalid),
                             MessageNames("corrupt.gguf")));
  // Everything else still works.
  EXPECT_TRUE(
      client_->ReadSliceAll(Read(Gguf("Q8_0"), "blk.0.attn_q.weight")).ok());
}

INSTANTIATE_TEST_SUITE_P(BothModes, ClientTest,
                         ::testing::Values(Mode::kRemote, Mode::kEmbedded),
                         [](const auto& info) {
                           return info.param == Mode::kRemote ? "Remote"
                                                              : "Embedded";
                         });

// The sandbox applies to a server with roots, not to embedded local use.
class RemoteOnlyTest : public ClientTest {
 protected:
  void SetUp() override {}  // no mode parameter: the test connects itself
};

TEST_F(RemoteOnlyTest, PathsOutsideTheRootsArePermissionDenied) {
  auto c = Client::Connect(server_->address());
  ASSERT_TRUE(c.ok());
  for (const std::string& path :
       {std::string("/etc/passwd"), std::string("../../../../etc/passwd"),
        Fixture("gguf/../../../../../../etc/hostname"),
        *scratch_ + "/inner/escape/hostname"}) {
    SCOPED_TRACE(path);
    auto info = (*c)->GetCheckpoint(path);
    EXPECT_EQ(info.status().code(), absl::StatusCode::kPermissionDenied)
        << info.status();
  }
  // Relative paths resolve against the roots.
  auto ok = (*c)->GetCheckpoint("gguf/Q4_K.gguf");
  EXPECT_TRUE(ok.ok()) << ok.status();
}

}  // namespace
}  // namespace tensormorph
