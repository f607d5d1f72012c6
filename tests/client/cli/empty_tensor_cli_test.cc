// Empty tensors (a zero dimension) through a live server and the CLI, both
// remote and embedded: listed, read as an empty array (an .npy of shape
// (0, n)), refused by the Scalar Inspector with OUT_OF_RANGE, shown as
// empty by the views and skipped by the diff, while the server keeps
// serving.
#include <string>
#include <vector>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/cli_error.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/loopback_server.h"
#include "tests/support/npy_reader.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildGguf;
using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::GgufSpec;
using ::tensormorph::testing::GgufString;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ReadFileBytes;
using ::tensormorph::testing::ReadNpy;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint32_t kF32 = 0, kQ8_0 = 8;

// The directory: empty.gguf (F32 [0, 8], Q8_0 [0, 32] beside a full F32
// [2, 8]) and empty.safetensors (F32 [0, 4] beside a full [2, 2]).
std::string WriteRoot() {
  const std::string dir = MakeTempDir();
  GgufSpec s;
  s.kv.push_back({"general.architecture", GgufString("llama")});
  s.tensors.push_back({"blk.0.empty.weight", {8, 0}, kF32, ""});
  s.tensors.push_back({"blk.0.empty_q8.weight", {32, 0}, kQ8_0, ""});
  s.tensors.push_back(
      {"blk.0.full.weight", {8, 2}, kF32, std::string(64, '\0')});
  WriteFile(dir + "/empty.gguf", BuildGguf(s));
  WriteFile(
      dir + "/empty.safetensors",
      BuildSafetensors({{"e.weight", "F32", {0, 4}, ""},
                        {"f.weight", "F32", {2, 2}, std::string(16, '\0')}}));
  return dir;
}

class EmptyTensorCliTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    root = new std::string(WriteRoot());
    cli = new CliModes({*root});
  }
  static void TearDownTestSuite() {
    delete cli;
    delete root;
  }
  CommandResult Run(std::vector<std::string> args) {
    return cli->Run(GetParam(), std::move(args));
  }
  static std::string Path(const std::string& name) {
    return *root + "/" + name;
  }
  static std::string* root;
  static CliModes* cli;
};
std::string* EmptyTensorCliTest::root = nullptr;
CliModes* EmptyTensorCliTest::cli = nullptr;

TEST_P(EmptyTensorCliTest, LsListsEveryTensorOfAGgufWithAZeroDimension) {
  CommandResult r = Run({"ls", Path("empty.gguf")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, AllOf(HasSubstr("blk.0.empty.weight"),
                           HasSubstr("blk.0.empty_q8.weight"),
                           HasSubstr("blk.0.full.weight")));
}

TEST_P(EmptyTensorCliTest, ReadWritesAnEmptyNpyOfTheTensorsShape) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty.gguf", "blk.0.empty.weight"},
      {"empty.gguf", "blk.0.empty_q8.weight"},
      {"empty.safetensors", "e.weight"}};
  const std::vector<std::vector<int64_t>> shapes = {{0, 8}, {0, 32}, {0, 4}};
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].second);
    const std::string out = MakeTempDir() + "/x.npy";
    CommandResult r =
        Run({"read", Path(cases[i].first), cases[i].second, "-o", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto npy = ReadNpy(out);
    EXPECT_EQ(npy.descr, "<f4");
    EXPECT_EQ(npy.shape, shapes[i]);
    EXPECT_TRUE(npy.data.empty());
    // What numpy.load parses: the header dict, then no data at all.
    const std::string bytes = ReadFileBytes(out);
    EXPECT_THAT(bytes, HasSubstr(absl::StrCat("'shape': (", shapes[i][0], ", ",
                                              shapes[i][1], ")")));
    EXPECT_EQ(bytes.size() % 64, 0u);
    EXPECT_EQ(bytes.back(), '\n');
    // The preview prints an empty array too.
    CommandResult preview =
        Run({"read", Path(cases[i].first), cases[i].second});
    EXPECT_EQ(preview.exit_code, 0) << preview.err;
  }
}

TEST_P(EmptyTensorCliTest, ScalarOnAnEmptyTensorIsOutOfRangeSayingWhy) {
  CommandResult r =
      Run({"scalar", Path("empty.safetensors"), "e.weight", "0,0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(CliErrorOf(r.err),
              AllOf(HasReason(ErrorReason::kOutOfRange),
                    MessageNames("e.weight"), MessageNames("[0, 4]")));
}

TEST_P(EmptyTensorCliTest, ViewsShowAnEmptyTensorInsteadOfFailing) {
  CommandResult stats =
      Run({"stats", Path("empty.gguf"), "blk.0.empty_q8.weight"});
  EXPECT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_THAT(stats.out, HasSubstr("[0, 32]"));
  EXPECT_THAT(stats.out, HasSubstr("empty tensor (a zero dimension)"));
  // No value is made up: no NaN from a division by the zero count.
  CommandResult json =
      Run({"--json", "stats", Path("empty.safetensors"), "e.weight"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(json.out, Not(AnyOf(HasSubstr("NaN"), HasSubstr("Infinity"))))
      << json.out;
  CommandResult heat =
      Run({"heatmap", Path("empty.gguf"), "blk.0.empty_q8.weight", "-o",
           MakeTempDir() + "/h.png"});
  EXPECT_EQ(heat.exit_code, 0) << heat.err;
  EXPECT_THAT(heat.err, HasSubstr("0x0 cells"));
  EXPECT_THAT(heat.out, HasSubstr("empty tensor (a zero dimension): no cells"));
  CommandResult heat_json = Run({"--json", "heatmap", Path("empty.gguf"),
                                 "blk.0.empty.weight", "--mode", "absmax"});
  EXPECT_EQ(heat_json.exit_code, 0) << heat_json.err;
  EXPECT_THAT(heat_json.out, Not(HasSubstr("Infinity"))) << heat_json.out;
  CommandResult arch = Run({"arch", Path("empty.gguf")});
  EXPECT_EQ(arch.exit_code, 0) << arch.err;
}

TEST_P(EmptyTensorCliTest, DiffSkipsEmptyTensorsAndNamesThem) {
  CommandResult r =
      Run({"--json", "diff", Path("empty.gguf"), Path("empty.gguf")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out,
              AllOf(HasSubstr("skippedEmpty"), HasSubstr("blk.0.empty.weight"),
                    HasSubstr("blk.0.empty_q8.weight")));
  EXPECT_THAT(r.out, HasSubstr("\"tensorsCompared\":\"1\""));
  CommandResult text = Run({"diff", Path("empty.gguf"), Path("empty.gguf")});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("skipped, empty (a zero dimension"));
}

INSTANTIATE_TEST_SUITE_P(BothModes, EmptyTensorCliTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Remote" : "Embedded";
                         });

// The stream's shape for an empty result, through the client library: one
// message, the header (shape, no elements, no bytes), no data.
TEST(EmptyTensorServerTest, ReadSliceOfAnEmptyTensorIsTheHeaderAlone) {
  auto server = testing::StartLoopbackServer({WriteRoot()});
  for (const auto mode : {v1::OUTPUT_MODE_FLOAT32, v1::OUTPUT_MODE_RAW}) {
    v1::ReadSliceRequest req;
    req.set_checkpoint("empty.gguf");
    req.set_tensor("blk.0.empty_q8.weight");
    req.set_mode(mode);
    std::vector<v1::SliceChunk> chunks;
    absl::Status s = server.client->ReadSlice(req, [&](const auto& c) {
      chunks.push_back(c);
      return true;
    });
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_EQ(chunks.size(), 1u);
    EXPECT_TRUE(chunks[0].has_header());
    EXPECT_THAT(chunks[0].header().shape(), ::testing::ElementsAre(0, 32));
    EXPECT_EQ(chunks[0].header().num_elements(), 0);
    EXPECT_EQ(chunks[0].header().total_bytes(), 0);
    EXPECT_EQ(chunks[0].element_count(), 0);
    EXPECT_TRUE(chunks[0].data().empty());
  }
  v1::InspectScalarsRequest inspect;
  inspect.set_checkpoint("empty.gguf");
  inspect.set_tensor("blk.0.empty.weight");
  inspect.add_flat_indices(0);
  EXPECT_EQ(server.client->InspectScalars(inspect).status().code(),
            absl::StatusCode::kOutOfRange);
  // Still serving.
  EXPECT_TRUE(server.client->GetCheckpoint("empty.safetensors").ok());
}

}  // namespace
}  // namespace tensormorph
