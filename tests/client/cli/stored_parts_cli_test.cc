// Stored parts through the CLI, remote and embedded: every stored tensor
// `ls` names under STORED AS of every convention fixture reads raw, by its
// own name, as exactly the bytes at the offset `ls` gives; `info` and
// `scalar` take the same names; --part reaches a part that shares its
// logical tensor's name; and the raw-read refusal of an assembled tensor
// names the parts to read instead.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/cli_error.h"
#include "tests/support/loopback_server.h"
#include "tests/support/npy_reader.h"
#include "tests/support/process.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph::stored_parts_cli_test {
namespace {

using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::FixturesDir;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ReadFileBytes;
using ::tensormorph::testing::ReadNpy;
using ::testing::AllOf;

const char* const kFixtures[] = {
    "gptq_4bit_g32",     "gptq_4bit_g32_actorder", "awq_4bit_g32",
    "ct_int8_channel",   "ct_int8_tensor_asym",    "ct_w4a16_group",
    "fp8_block_sharded", "mxfp4_gptoss",           "bnb_nf4",
};

int64_t Int(const nlohmann::json& j) {
  return j.is_string() ? std::stoll(j.get<std::string>()) : j.get<int64_t>();
}

CliModes* cli = nullptr;

class StoredPartsCliTest
    : public ::testing::TestWithParam<std::tuple<const char*, bool>> {
 protected:
  static void SetUpTestSuite() { cli = new CliModes({FixturesDir()}); }
  static void TearDownTestSuite() {
    delete cli;
    cli = nullptr;
  }
  CommandResult Run(std::vector<std::string> args) {
    return cli->Run(std::get<1>(GetParam()), std::move(args));
  }
};

TEST_P(StoredPartsCliTest, EveryPartReadsRawAsTheFileStoresIt) {
  const std::string dir =
      Fixture(std::string("safetensors/") + std::get<0>(GetParam()));
  CommandResult ls = Run({"ls", dir, "--json"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  std::set<std::string> logical;
  std::map<std::string, nlohmann::json> parts;  // of quantized tensors
  std::map<std::string, std::string> owner;     // part -> logical tensor
  std::istringstream lines(ls.out);
  for (std::string line; std::getline(lines, line);) {
    const auto t = nlohmann::json::parse(line);
    logical.insert(t["name"]);
    if (!t["encoding"].value("quantized", false)) continue;
    for (const auto& p : t["parts"]) {
      parts[p["name"]] = p;
      owner[p["name"]] = t["name"];
    }
  }
  ASSERT_FALSE(parts.empty());
  const std::string tmp = MakeTempDir();
  std::set<std::string> assembled;
  for (const auto& [name, p] : parts) {
    SCOPED_TRACE(name);
    const bool shared = logical.count(name) > 0;  // the tensor's own name
    // The bytes the file holds at the offset ls gives.
    const std::string file =
        ReadFileBytes(dir + "/" + p["file"].get<std::string>());
    const std::string want = file.substr(Int(p["offset"]), Int(p["sizeBytes"]));
    const std::string out = tmp + "/raw.npy";
    CommandResult read = Run({"read", dir, name, "--raw", "--part", "-o", out});
    ASSERT_EQ(read.exit_code, 0) << read.err;
    const auto npy = ReadNpy(out);
    EXPECT_EQ(npy.data, want);
    std::vector<int64_t> shape;
    for (const auto& d : p["shape"]) shape.push_back(Int(d));
    // Stored dtypes numpy lacks (F8_E4M3...) are written as their bytes,
    // one row of bytes per row: the last dimension counts bytes then.
    if (npy.descr == "|u1" && p["dtype"] != "U8" && p["dtype"] != "BOOL" &&
        !shape.empty()) {
      int64_t elements = 1;
      for (int64_t d : shape) elements *= d;
      shape.back() *= Int(p["sizeBytes"]) / std::max<int64_t>(elements, 1);
    }
    EXPECT_EQ(npy.shape, shape);
    if (!shared) {
      // Without --part: no logical tensor has the name, so it is the part.
      const std::string out2 = tmp + "/fallback.npy";
      CommandResult fb = Run({"read", dir, name, "--raw", "-o", out2});
      ASSERT_EQ(fb.exit_code, 0) << fb.err;
      EXPECT_EQ(ReadNpy(out2).data, want);
    }
    std::vector<std::string> part_flag;
    if (shared) part_flag = {"--part"};
    // info: a plain tensor of the stored dtype, stored as itself.
    std::vector<std::string> info_args = {"--json", "info", dir, name};
    info_args.insert(info_args.end(), part_flag.begin(), part_flag.end());
    CommandResult info = Run(info_args);
    ASSERT_EQ(info.exit_code, 0) << info.err;
    const auto t = nlohmann::json::parse(info.out);
    EXPECT_EQ(t["encoding"]["scheme"], p["dtype"]);
    EXPECT_FALSE(t["encoding"].value("quantized", true));
    ASSERT_EQ(t["parts"].size(), 1u);
    EXPECT_EQ(Int(t["parts"][0]["offset"]), Int(p["offset"]));
    // scalar: the first element, as read decodes it.
    CommandResult f32 =
        Run({"read", dir, name, "--part", "-o", tmp + "/f32.npy"});
    ASSERT_EQ(f32.exit_code, 0) << f32.err;
    const std::vector<float> values = ReadNpy(tmp + "/f32.npy").floats();
    ASSERT_FALSE(values.empty());
    std::vector<std::string> sc_args = {"--json", "scalar", dir, name,
                                        std::string(shape.size() * 2 - 1, ',')};
    for (size_t i = 0; i < shape.size(); ++i) sc_args.back()[2 * i] = '0';
    sc_args.insert(sc_args.end(), part_flag.begin(), part_flag.end());
    CommandResult sc = Run(sc_args);
    ASSERT_EQ(sc.exit_code, 0) << sc.err;
    const auto s = nlohmann::json::parse(sc.out)["scalars"][0];
    if (std::isnan(values[0])) {
      EXPECT_TRUE(s["value"].is_string());  // "NaN"
    } else {
      EXPECT_EQ(s["value"].get<float>(), values[0]);
    }
    assembled.insert(owner[name]);
  }
  // The refusal to read an assembled tensor raw names its parts, and --part
  // where one shares the tensor's name: the advice the loop above followed.
  for (const std::string& name : assembled) {
    SCOPED_TRACE(name);
    CommandResult raw = Run({"read", dir, name, "--raw"});
    EXPECT_EQ(raw.exit_code, 2);
    EXPECT_THAT(CliErrorOf(raw.err), HasReason(ErrorReason::kUnimplemented));
    for (const auto& [part, of] : owner) {
      if (of == name) {
        EXPECT_THAT(CliErrorOf(raw.err), MessageNames("'" + part + "'"));
      }
    }
    if (parts.count(name)) {
      EXPECT_THAT(CliErrorOf(raw.err), MessageNames("--part"));
    }
  }
}

TEST_P(StoredPartsCliTest, PartNamesNoStoredTensorHasAreNotFound) {
  const std::string dir =
      Fixture(std::string("safetensors/") + std::get<0>(GetParam()));
  CommandResult r = Run({"read", dir, "no.such.part", "--part"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(CliErrorOf(r.err), AllOf(HasReason(ErrorReason::kTensorNotFound),
                                       MessageNames("'no.such.part'")));
}

INSTANTIATE_TEST_SUITE_P(EveryConventionFixtureBothModes, StoredPartsCliTest,
                         ::testing::Combine(::testing::ValuesIn(kFixtures),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_Remote"
                                                           : "_Embedded");
                         });

// The proto contract under the CLI: ListTensors with parts lists every
// stored tensor, sorted, as a plain tensor; ReadSlice and InspectScalars
// with part reach the codes that share the logical tensor's name, which
// the same calls without it never do.
TEST(StoredPartsApiTest, PartRequestsReachStoredTensorsByName) {
  auto server = testing::StartLoopbackServer({FixturesDir()});
  Client& client = *server.client;
  const std::string dir = Fixture("safetensors/ct_int8_tensor_asym");
  const std::string name = "model.layers.0.mlp.down_proj.weight";

  v1::ListTensorsRequest list;
  list.set_checkpoint(dir);
  list.set_parts(true);
  std::vector<std::string> names;
  ASSERT_TRUE(client
                  .ListTensors(list,
                               [&](const v1::TensorInfo& t) {
                                 names.push_back(t.name());
                                 EXPECT_FALSE(t.encoding().quantized());
                                 ASSERT_EQ(t.parts_size(), 1);
                                 EXPECT_EQ(t.parts(0).name(), t.name());
                               })
                  .ok());
  EXPECT_EQ(names, (std::vector<std::string>{name, name + "_scale",
                                             name + "_zero_point"}));

  v1::ReadSliceRequest read;
  read.set_checkpoint(dir);
  read.set_tensor(name);
  read.set_mode(v1::OUTPUT_MODE_RAW);
  EXPECT_EQ(client.ReadSliceAll(read).status().code(),
            absl::StatusCode::kUnimplemented);
  read.set_part(true);
  auto raw = client.ReadSliceAll(read);
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(raw->dtype, "I8");
  EXPECT_EQ(raw->shape, (std::vector<int64_t>{32, 64}));

  v1::InspectScalarsRequest sc;
  sc.set_checkpoint(dir);
  sc.set_tensor(name);
  sc.add_flat_indices(5);
  auto logical = client.InspectScalars(sc);
  sc.set_part(true);
  auto codes = client.InspectScalars(sc);
  ASSERT_TRUE(logical.ok() && codes.ok());
  // The logical element's raw code is the part's value.
  EXPECT_EQ(codes->scalars(0).value(),
            static_cast<float>(logical->scalars(0).raw_code()));
  EXPECT_EQ(codes->encoding().scheme(), "I8");
  EXPECT_EQ(codes->scalars(0).group(), -1);

  sc.set_tensor("no.such.part");
  EXPECT_EQ(client.InspectScalars(sc).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tensormorph::stored_parts_cli_test
