// `tensormorph read -o` embedded (chunks handed straight from the in-process
// service, client/embedded/local_slice_reader.h) and against a tensormorphd
// (chunks over gRPC, received in pieces) write the same file, byte for
// byte, for every kind of tensor and slice; and fail the same way.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/npy_reader.h"
#include "tests/support/process.h"
#include "tests/support/quantize.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph::read_local_cli_test {
namespace {

using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::DemoDir;
using ::tensormorph::testing::FixturesDir;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::ReadFileBytes;

// Files long enough for many chunks (and for the client's second receiving
// thread, which starts past 4 MiB): F32 [1100, 2048] is 8.6 MiB stored and
// decoded; Q8_0 [2048, 2048] is 4.25 MiB stored, 16 MiB decoded.
const std::string& LongDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(MakeTempDir());
    const std::vector<float> f32 = testing::Gaussian(1100 * 2048, 7);
    testing::WriteFile(
        *d + "/long.safetensors",
        testing::BuildSafetensors(
            {{"w", "F32", {1100, 2048}, testing::ToF32Bytes(f32)},
             {"h", "BF16", {1100, 2048}, testing::ToBF16Bytes(f32)},
             {"empty", "F32", {0, 2048}, ""}}));
    testing::GgufSpec gguf;
    gguf.kv.push_back({"general.architecture", testing::GgufString("llama")});
    gguf.tensors.push_back(
        {"q",
         {2048, 2048},
         8,  // Q8_0
         testing::QuantizeQ8_0(testing::Gaussian(2048 * 2048, 8))});
    testing::WriteFile(*d + "/long.gguf", testing::BuildGguf(gguf));
    return d;
  }();
  return *dir;
}

CliModes* cli = nullptr;

class ReadLocalCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cli = new CliModes({LongDir(), DemoDir(), FixturesDir()});
  }
  static void TearDownTestSuite() {
    delete cli;
    cli = nullptr;
  }

  // Reads `args` (checkpoint, tensor, options) both ways into two files and
  // expects the same exit code, the same file bytes, and for a failure the
  // same message.
  static void ExpectSameBothWays(const std::vector<std::string>& args) {
    SCOPED_TRACE(::testing::PrintToString(args));
    const std::string dir = MakeTempDir();
    std::string bytes[2];
    CommandResult results[2];
    for (const bool remote : {false, true}) {
      const std::string out = dir + (remote ? "/remote.npy" : "/local.npy");
      std::vector<std::string> argv = {"read"};
      argv.insert(argv.end(), args.begin(), args.end());
      argv.insert(argv.end(), {"-o", out});
      results[remote] = cli->Run(remote, argv);
      if (results[remote].exit_code == 0) bytes[remote] = ReadFileBytes(out);
    }
    ASSERT_EQ(results[0].exit_code, results[1].exit_code)
        << "embedded: " << results[0].err << "\nremote: " << results[1].err;
    if (results[0].exit_code != 0) {
      EXPECT_EQ(results[0].err, results[1].err);
      return;
    }
    ASSERT_EQ(bytes[0].size(), bytes[1].size());
    EXPECT_TRUE(bytes[0] == bytes[1]) << "the files differ";
    EXPECT_GT(bytes[0].size(), 0u);
  }
};

TEST_F(ReadLocalCliTest, LongTensorsAreTheSameFileBothWays) {
  const std::string st = LongDir() + "/long.safetensors";
  const std::string gguf = LongDir() + "/long.gguf";
  for (const char* name : {"w", "h"}) {
    ExpectSameBothWays({st, name});
    ExpectSameBothWays({st, name, "--raw"});
    ExpectSameBothWays({st, name, "--slice", "3:1000:7, ::-3"});
    ExpectSameBothWays({st, name, "--slice", "-1"});
  }
  ExpectSameBothWays({st, "empty"});
  ExpectSameBothWays({gguf, "q"});
  ExpectSameBothWays({gguf, "q", "--raw"});
  ExpectSameBothWays({gguf, "q", "--raw", "--slice", "100:1500"});
  ExpectSameBothWays({gguf, "q", "--slice", "::5, 1:2000:3"});
}

TEST_F(ReadLocalCliTest, TheDemoCheckpointsAreTheSameFileBothWays) {
  const std::string demo = DemoDir();
  // A quantized GGUF (K-quants and Q6_K), a BF16 source and a convention
  // (compressed-tensors int8, built from several stored tensors).
  ExpectSameBothWays({demo + "/model-q4_k_m.gguf", "blk.0.ffn_down.weight"});
  ExpectSameBothWays(
      {demo + "/model-q4_k_m.gguf", "blk.0.attn_v.weight", "--raw"});
  ExpectSameBothWays({demo + "/model-q8_0.gguf", "token_embd.weight"});
  ExpectSameBothWays({demo + "/source", "model.layers.0.mlp.up_proj.weight",
                      "--slice", "::2, 1::3"});
  ExpectSameBothWays({demo + "/int8", "model.layers.0.mlp.up_proj.weight"});
}

TEST_F(ReadLocalCliTest, RefusalsAreTheSameBothWays) {
  const std::string st = LongDir() + "/long.safetensors";
  // Raw of a convention, a slice splitting blocks, outside the shape, a
  // missing tensor.
  ExpectSameBothWays(
      {DemoDir() + "/int8", "model.layers.0.mlp.up_proj.weight", "--raw"});
  ExpectSameBothWays(
      {LongDir() + "/long.gguf", "q", "--raw", "--slice", ":, 0:100"});
  ExpectSameBothWays({st, "w", "--slice", "5000"});
  ExpectSameBothWays({st, "nope"});
}

}  // namespace
}  // namespace tensormorph::read_local_cli_test
