// MLX and bitsandbytes LLM.int8 checkpoints (from the numpy writers in
// tests/python/writers) through a live server: ListTensors, InspectScalars
// and ReadSlice give the writers' reference values bit for bit; hostile
// configs are refused with DATA_LOSS naming the key (a weight_format other
// than row with UNIMPLEMENTED naming it) while a bystander streams from a
// good file without a failure; the CLI answers ls, info, scalar and diff the
// same remote and embedded.
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/loopback_server.h"
#include "tests/support/npy_reader.h"
#include "tests/support/process.h"
#include "tests/support/python_writer.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ReadFileBytes;
using ::tensormorph::testing::ReadNpy;
using ::tensormorph::testing::WriteFile;
using ::tensormorph::testing::WriterOutput;
using ::testing::AllOf;
using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr char kQ[] = "model.layers.0.self_attn.v_proj.weight";  // int3 F16

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Copies the regular files of `from` into `to` (created).
void CopyInto(const std::string& from, const std::string& to) {
  std::filesystem::create_directories(to);
  for (const auto& e : std::filesystem::directory_iterator(from)) {
    std::filesystem::copy_file(e.path(),
                               to + "/" + e.path().filename().string());
  }
}

class QuantFormatsLiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir();
    WriteFile(dir_ + "/good.safetensors",
              BuildSafetensors(
                  {{"w", "F32", {1024, 1024}, std::string(4 << 20, '\x3f')}}));
    CopyInto(Mlx() + "/model", dir_ + "/mlx");
    CopyInto(Bnb() + "/model", dir_ + "/bnb_int8");
    CopyInto(Bnb() + "/col32", dir_ + "/bnb_col32");
    loopback_ = testing::StartLoopbackServer({dir_});
    client_ = loopback_.client.get();
    bystander_ = std::thread([this] { StreamUntilStopped(); });
  }
  void TearDown() override {
    first_stream_.WaitForNotificationWithTimeout(absl::Seconds(60));
    stop_ = true;
    if (bystander_.joinable()) bystander_.join();
    EXPECT_GT(streams_ok_.load(), 0) << "the bystander never finished a stream";
    EXPECT_EQ(streams_failed_.load(), 0) << last_failure_;
  }

  static std::string Mlx() { return WriterOutput("mlx_writer.py"); }
  static std::string Bnb() { return WriterOutput("bnb_int8_writer.py"); }

  void StreamUntilStopped() {
    auto client = *Client::Connect(loopback_.address);
    v1::ReadSliceRequest r;
    r.set_checkpoint("good.safetensors");
    r.set_tensor("w");
    r.set_max_chunk_bytes(256 << 10);
    while (!stop_) {
      auto data = client->ReadSliceAll(r);
      if (data.ok() && data->bytes.size() == (4u << 20)) {
        ++streams_ok_;
      } else {
        ++streams_failed_;
        last_failure_ = data.ok() ? "short read" : data.status().ToString();
      }
      if (!first_stream_.HasBeenNotified()) first_stream_.Notify();
    }
  }

  // A copy of the MLX model as `name` with `edit` applied to its config.
  std::string MlxWith(const std::string& name, void (*edit)(Json&)) {
    CopyInto(Mlx() + "/model", dir_ + "/" + name);
    Json c = Json::parse(ReadFileBytes(dir_ + "/" + name + "/config.json"));
    edit(c);
    std::ofstream(dir_ + "/" + name + "/config.json") << c.dump();
    return name;
  }

  // Refused with `reason`, the message naming `key` (the config key or the
  // stored tensor at fault).
  void ExpectRefused(const std::string& name, ErrorReason reason,
                     const std::string& key) {
    SCOPED_TRACE(name);
    auto info = client_->GetCheckpoint(name);
    ASSERT_FALSE(info.ok()) << "opened a hostile checkpoint";
    EXPECT_THAT(info, AllOf(HasReason(reason), MessageNames(key)));
    EXPECT_THAT(client_->ListTensors(name), HasReason(reason));
    ASSERT_TRUE(client_->GetCheckpoint("good.safetensors").ok())
        << "the server stopped serving after " << name;
  }

  // Every expected tensor of a writer's output: listed with `convention`,
  // read and inspected to the reference's bits.
  void ExpectServed(const std::string& checkpoint, const std::string& writer,
                    const std::string& convention) {
    std::ifstream index(writer + "/expected/index.txt");
    int n = 0;
    for (std::string line; std::getline(index, line); ++n) {
      const std::string name = line.substr(0, line.find(' '));
      SCOPED_TRACE(name);
      const auto want = ReadNpy(writer + "/expected/" + name + ".npy");
      const std::vector<float> ref = want.floats();
      auto t = client_->GetTensor(checkpoint, name);
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_EQ(t->encoding().convention(), convention);
      EXPECT_EQ(std::vector<int64_t>(t->shape().begin(), t->shape().end()),
                want.shape);
      EXPECT_FALSE(t->compat().empty());
      v1::ReadSliceRequest r;
      r.set_checkpoint(checkpoint);
      r.set_tensor(name);
      auto data = client_->ReadSliceAll(r);
      ASSERT_TRUE(data.ok()) << data.status();
      ASSERT_EQ(data->floats().size(), ref.size());
      for (size_t i = 0; i < ref.size(); ++i) {
        ASSERT_EQ(Bits(data->floats()[i]), Bits(ref[i])) << "element " << i;
      }
      v1::InspectScalarsRequest q;
      q.set_checkpoint(checkpoint);
      q.set_tensor(name);
      for (size_t i = 0; i < ref.size(); i += 7) q.add_flat_indices(i);
      auto s = client_->InspectScalars(q);
      ASSERT_TRUE(s.ok()) << s.status();
      ASSERT_EQ(s->scalars_size(), q.flat_indices_size());
      for (const auto& x : s->scalars()) {
        ASSERT_EQ(Bits(x.value()), Bits(ref[x.flat_index()]))
            << "inspect " << x.flat_index();
        EXPECT_GE(x.group(), 0);
      }
    }
    EXPECT_GT(n, 0);
  }

  std::string dir_;
  testing::LoopbackServer loopback_;
  Client* client_ = nullptr;
  std::thread bystander_;
  std::atomic<bool> stop_{false};
  std::atomic<int> streams_ok_{0}, streams_failed_{0};
  absl::Notification first_stream_;
  std::string last_failure_;
};

TEST_F(QuantFormatsLiveTest, MlxAndInt8WeightsServeTheWritersValues) {
  auto info = client_->GetCheckpoint("mlx");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_THAT(info->conventions(), ::testing::ElementsAre("mlx"));
  // The config as parsed and the file it came from travel with the info.
  ASSERT_GE(info->quant_config_size(), 4);
  EXPECT_EQ(info->quant_config(0).key(), "quant_method");
  EXPECT_EQ(info->quant_config(0).value(), "mlx");
  EXPECT_EQ(info->quant_config(1).key(), "mode");
  EXPECT_EQ(info->quant_config(1).value(), "affine");
  ASSERT_EQ(info->config_files_size(), 1);
  EXPECT_EQ(info->config_files(0).name(), "config.json");
  EXPECT_FALSE(info->config_files(0).truncated());
  EXPECT_TRUE(
      Json::parse(info->config_files(0).json()).contains("quantization"));
  ExpectServed("mlx", Mlx(), "mlx");
  ExpectServed("bnb_int8", Bnb(), "bitsandbytes");
}

TEST_F(QuantFormatsLiveTest, HostileConfigsAreRefusedByKeyWhileServing) {
  ExpectRefused(
      MlxWith("bits7", [](Json& c) { c["quantization"]["bits"] = 7; }),
      ErrorReason::kHeaderInvalid, "config.json: quantization.bits:");
  ExpectRefused(
      MlxWith("group_string",
              [](Json& c) { c["quantization"]["group_size"] = "64"; }),
      ErrorReason::kHeaderInvalid, "quantization.group_size:");
  ExpectRefused(
      MlxWith("group_absurd",
              [](Json& c) { c["quantization"]["group_size"] = 1000; }),
      ErrorReason::kHeaderInvalid, "quantization.group_size:");
  ExpectRefused(MlxWith("mode_unknown",
                        [](Json& c) { c["quantization"]["mode"] = "int4"; }),
                ErrorReason::kHeaderInvalid, "quantization.mode:");
  ExpectRefused(
      MlxWith("module_bits",
              [](Json& c) {
                c["quantization"]["model.layers.0.mlp.up_proj"]["bits"] = 9;
              }),
      ErrorReason::kHeaderInvalid,
      "quantization.model.layers.0.mlp.up_proj.bits:");
  ExpectRefused("bnb_col32", ErrorReason::kUnsupportedConvention,
                "weight_format");
  // The good ones still serve.
  ASSERT_TRUE(client_->GetCheckpoint("mlx").ok());
  ASSERT_TRUE(client_->GetCheckpoint("bnb_int8").ok());
}

// ls, info, scalar and diff through the CLI, against a tensormorphd and
// embedded.
TEST(QuantFormatsCliTest, LsInfoScalarAndDiffRemoteAndEmbedded) {
  const std::string root = testing::MakeTempDir();
  CopyInto(WriterOutput("mlx_writer.py") + "/model", root + "/mlx");
  CopyInto(WriterOutput("mlx_writer.py") + "/source", root + "/mlx_source");
  CopyInto(WriterOutput("bnb_int8_writer.py") + "/model", root + "/bnb");
  testing::CliModes cli({root});
  const auto ref = ReadNpy(WriterOutput("mlx_writer.py") + "/expected/" +
                           std::string(kQ) + ".npy")
                       .floats();
  const int64_t cols = 96;  // the int3 v_proj is [5, 96]
  for (bool remote : {true, false}) {
    SCOPED_TRACE(remote ? "remote" : "embedded");
    const std::string m = remote ? "mlx" : root + "/mlx";
    const std::string b = remote ? "bnb" : root + "/bnb";
    const testing::CommandResult ls = cli.Run(remote, {"--json", "ls", m});
    ASSERT_EQ(ls.exit_code, 0) << ls.err;
    EXPECT_THAT(ls.out, HasSubstr("int3 affine (scale, bias)"));
    EXPECT_THAT(ls.out, HasSubstr("nvfp4 (fp4 e2m1, e4m3 scales)"));
    const testing::CommandResult info = cli.Run(remote, {"info", m, kQ});
    ASSERT_EQ(info.exit_code, 0) << info.err;
    EXPECT_THAT(info.out, HasSubstr("group 32 along in"));
    EXPECT_THAT(info.out, HasSubstr("MLX (Apple silicon)"));
    const testing::CommandResult scalar =
        cli.Run(remote, {"--json", "scalar", m, kQ, "3,17"});
    ASSERT_EQ(scalar.exit_code, 0) << scalar.err;
    const Json j = Json::parse(scalar.out);
    const Json& s = j.contains("scalars") ? j["scalars"][0] : j;
    EXPECT_EQ(Bits(s["value"].get<float>()), Bits(ref[3 * cols + 17]))
        << scalar.out;
    const testing::CommandResult int8 =
        cli.Run(remote, {"info", b, "model.layers.0.mlp.down_proj.weight"});
    ASSERT_EQ(int8.exit_code, 0) << int8.err;
    EXPECT_THAT(int8.out, HasSubstr("int8 (LLM.int8, row absmax)"));
    // The diff against the float32 source: a report per quantized weight.
    const testing::CommandResult diff = cli.Run(
        remote,
        {"--json", "diff", m, remote ? "mlx_source" : root + "/mlx_source"});
    ASSERT_EQ(diff.exit_code, 0) << diff.err;
    int reports = 0;
    for (size_t at = 0;
         (at = diff.out.find("{\"tensor\":", at)) != std::string::npos; ++at) {
      ++reports;
    }
    EXPECT_EQ(reports, 11) << diff.out.substr(0, 2000);
  }
}

}  // namespace
}  // namespace tensormorph
