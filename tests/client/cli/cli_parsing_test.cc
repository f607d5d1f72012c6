// What the CLI accepts on its command line, remote and embedded: indices of
// exactly the tensor's rank, numbers within the limits the server enforces,
// output paths that are not the input, and usage errors that exit 1 with a
// message whatever the command.
#include <png.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/request_limits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/cli_error.h"
#include "tests/support/loopback_server.h"
#include "tests/support/npy_reader.h"
#include "tests/support/process.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph::cli_parsing_test {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::Bytes;
using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::FixturesDir;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::ReadFileBytes;
using ::tensormorph::testing::ReadNpy;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// cube.safetensors: t.weight F32 [2, 3, 4] (values 0..23), s F32 [] (7.5),
// e.weight F32 [0, 4]; one.safetensors: a single tensor.
std::string WriteRoot() {
  const std::string dir = MakeTempDir();
  std::vector<float> cube(24);
  for (int i = 0; i < 24; ++i) cube[i] = static_cast<float>(i);
  WriteFile(dir + "/cube.safetensors",
            BuildSafetensors({{"t.weight", "F32", {2, 3, 4}, Bytes(cube)},
                              {"s", "F32", {}, Bytes(std::vector<float>{7.5f})},
                              {"e.weight", "F32", {0, 4}, ""}}));
  WriteFile(dir + "/one.safetensors",
            BuildSafetensors(
                {{"w", "F32", {2}, Bytes(std::vector<float>{1.0f, 2.0f})}}));
  return dir;
}

class CliParsingTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    root = new std::string(WriteRoot());
    cli = new CliModes({*root, FixturesDir()});
  }
  static void TearDownTestSuite() {
    delete cli;
    delete root;
  }
  CommandResult Run(std::vector<std::string> args) {
    return cli->Run(GetParam(), std::move(args));
  }
  // A usage error: exit 1, nothing on stdout, and on stderr the error line
  // with `reason`, its message naming each of `named` (the argument, the
  // rank or range it broke).
  void ExpectUsageError(std::vector<std::string> args, ErrorReason reason,
                        const std::vector<std::string>& named = {}) {
    SCOPED_TRACE(::testing::PrintToString(args));
    CommandResult r = Run(std::move(args));
    EXPECT_EQ(r.exit_code, 1) << r.err << r.out;
    EXPECT_THAT(CliErrorOf(r.err), HasReason(reason));
    for (const std::string& value : named) {
      EXPECT_THAT(CliErrorOf(r.err), MessageNames(value));
    }
    EXPECT_EQ(r.out, "");
  }
  static std::string Cube() { return *root + "/cube.safetensors"; }
  static std::string Q4K() { return Fixture("gguf/Q4_K.gguf"); }

  static std::string* root;
  static CliModes* cli;
};
std::string* CliParsingTest::root = nullptr;
CliModes* CliParsingTest::cli = nullptr;

TEST_P(CliParsingTest, EveryScalarIndexHasExactlyTheTensorsRank) {
  const std::string q = "blk.0.attn_q.weight";  // [4, 256]
  // An empty shell variable is not element [0, 0].
  ExpectUsageError({"scalar", Q4K(), q, ""}, ErrorReason::kRequestInvalid,
                   {"''"});
  // Separate arguments are separate indices, never one index's coordinates.
  ExpectUsageError({"scalar", Q4K(), q, "0", "1", "2", "3"},
                   ErrorReason::kRequestInvalid,
                   {"'0'", "'blk.0.attn_q.weight'", "rank 2", "[4, 256]"});
  ExpectUsageError({"scalar", Q4K(), q, "0,1,2"}, ErrorReason::kRequestInvalid,
                   {"'0,1,2'"});
  ExpectUsageError({"scalar", Q4K(), q, "1,,2"}, ErrorReason::kRequestInvalid,
                   {"'1,,2'"});
  ExpectUsageError({"scalar", Q4K(), q, "1,x"}, ErrorReason::kRequestInvalid,
                   {"'x'"});
  ExpectUsageError({"scalar", Q4K(), q, "1,+2"}, ErrorReason::kRequestInvalid,
                   {"'+2'"});
  ExpectUsageError({"scalar", Cube(), "s", "0"}, ErrorReason::kRequestInvalid,
                   {"rank 0"});

  CommandResult two = Run({"--json", "scalar", Q4K(), q, "0,1", "-1,-1"});
  ASSERT_EQ(two.exit_code, 0) << two.err;
  const auto j = nlohmann::json::parse(two.out);
  ASSERT_EQ(j["scalars"].size(), 2u);
  EXPECT_EQ(j["scalars"][0]["index"], nlohmann::json({"0", "1"}));
  EXPECT_EQ(j["scalars"][1]["index"], nlohmann::json({"3", "255"}));
  // A rank-0 tensor's one element is ().
  CommandResult s = Run({"--json", "scalar", Cube(), "s", "()"});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_EQ(nlohmann::json::parse(s.out)["scalars"][0]["value"], 7.5);
  // Past the end is the call's to find; refused as wrong, a usage error (1)
  // all the same.
  CommandResult oor = Run({"scalar", Q4K(), q, "4,0"});
  EXPECT_EQ(oor.exit_code, 1);
  EXPECT_THAT(CliErrorOf(oor.err), HasReason(ErrorReason::kIndexOutOfRange));
}

TEST_P(CliParsingTest, MalformedSlicesAreUsageErrorsLikeMalformedIndices) {
  ExpectUsageError({"read", Cube(), "t.weight", "--slice", "x"},
                   ErrorReason::kSliceInvalid, {"'x'"});
  ExpectUsageError({"read", Cube(), "t.weight", "--slice", "0,0,0,0"},
                   ErrorReason::kSliceInvalid,
                   {"4 dimensions", "'t.weight'", "rank 3"});
  ExpectUsageError({"read", Cube(), "t.weight", "--slice", "::0"},
                   ErrorReason::kSliceInvalid);
  ExpectUsageError({"read", Cube(), "t.weight", "--slice", "0,,1"},
                   ErrorReason::kSliceInvalid, {"item 2"});
  ExpectUsageError({"read", Cube(), "t.weight", "--slice", "...,0,..."},
                   ErrorReason::kSliceInvalid, {"'...'"});
  ExpectUsageError({"read", Cube(), "t.weight", "--slice", "0:1:2:3"},
                   ErrorReason::kSliceInvalid);
  CommandResult ok = Run({"read", Cube(), "t.weight", "--slice", "-1, ::2"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  // Digits past 64 bits are an integer out of range, not "not an integer".
  ExpectUsageError(
      {"read", Cube(), "t.weight", "--slice", "99999999999999999999999"},
      ErrorReason::kSliceInvalid, {"is out of range"});
  ExpectUsageError(
      {"scalar", Cube(), "t.weight", "99999999999999999999999,0,0"},
      ErrorReason::kRequestInvalid, {"is out of range"});
}

TEST_P(CliParsingTest, NumericOptionsAreCheckedAgainstTheServersLimits) {
  const std::string q = "blk.0.attn_q.weight";
  const std::string bins_limit = "1 to " + std::to_string(kMaxHistogramBins);
  for (const char* bins : {"0", "-5", "100001", "10000000", "x"}) {
    ExpectUsageError({"stats", Q4K(), q, "--bins", bins},
                     ErrorReason::kRequestInvalid, {"--bins"});
  }
  ExpectUsageError({"stats", Q4K(), q, "--bins", "0"},
                   ErrorReason::kRequestInvalid, {bins_limit});
  CommandResult most = Run({"--json", "stats", Q4K(), q, "--bins",
                            std::to_string(kMaxHistogramBins)});
  ASSERT_EQ(most.exit_code, 0) << most.err;
  EXPECT_EQ(nlohmann::json::parse(most.out)["histogram"].size(),
            static_cast<size_t>(kMaxHistogramBins));
  CommandResult defaulted = Run({"--json", "stats", Q4K(), q});
  EXPECT_EQ(nlohmann::json::parse(defaulted.out)["histogram"].size(), 32u)
      << "the documented default";

  // A group id is checked before the call, not refused by it (exit 1
  // either way: a usage error).
  for (const char* group : {"-1", "1.5", "x"}) {
    ExpectUsageError({"stats", Q4K(), q, "--group", group},
                     ErrorReason::kRequestInvalid, {"--group", group});
  }

  for (const char* top : {"-1", "100001"}) {
    ExpectUsageError({"diff", Q4K(), Fixture("gguf/F32.gguf"), "--top", top},
                     ErrorReason::kRequestInvalid,
                     {"--top", top, absl::StrCat("0 to ", kMaxDiffTopK)});
  }

  const std::string side = std::to_string(kMaxHeatmapSide);
  ExpectUsageError({"heatmap", Q4K(), q, "--size", "4294967297x3"},
                   ErrorReason::kRequestInvalid,
                   {"width 4294967297", "1 to " + side});
  ExpectUsageError({"heatmap", Q4K(), q, "--size", "3x" + side + "1"},
                   ErrorReason::kRequestInvalid, {"height " + side + "1"});
  ExpectUsageError({"heatmap", Q4K(), q, "--size", "0x3"},
                   ErrorReason::kRequestInvalid, {"width 0"});
  for (const char* bad :
       {"5x4x3", "5x", "x4", "5", "-5x4", "+5x4", " 5x4", "5X4", "5x4 "}) {
    ExpectUsageError({"heatmap", Q4K(), q, "--size", bad},
                     ErrorReason::kRequestInvalid,
                     {absl::StrCat("'", bad, "'"), "WxH"});
  }
  CommandResult fits = Run({"--json", "heatmap", Q4K(), q, "--size", "16x2"});
  ASSERT_EQ(fits.exit_code, 0) << fits.err;
  const auto h = nlohmann::json::parse(fits.out);
  EXPECT_EQ(h["width"], 16);
  EXPECT_EQ(h["height"], 2);
}

TEST_P(CliParsingTest, DiffTopZeroReportsNoWorstElements) {
  CommandResult none = Run({"--json", "diff", Fixture("gguf/Q8_0.gguf"),
                            Fixture("gguf/F32.gguf"), "--top", "0"});
  ASSERT_EQ(none.exit_code, 0) << none.err;
  CommandResult three = Run({"--json", "diff", Fixture("gguf/Q8_0.gguf"),
                             Fixture("gguf/F32.gguf"), "--top", "3"});
  ASSERT_EQ(three.exit_code, 0) << three.err;
  int tensors = 0;
  for (const std::string& out : {none.out, three.out}) {
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      const auto e = nlohmann::json::parse(line);
      if (!e.contains("tensor")) continue;
      ++tensors;
      const size_t worst =
          e["tensor"].contains("worst") ? e["tensor"]["worst"].size() : 0;
      if (&out == &none.out) {
        EXPECT_EQ(worst, 0u) << line;
      } else {
        EXPECT_LE(worst, 3u) << line;
      }
    }
  }
  EXPECT_GT(tensors, 0);
  CommandResult text = Run({"diff", Fixture("gguf/Q8_0.gguf"),
                            Fixture("gguf/F32.gguf"), "--top", "0"});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, ::testing::Not(HasSubstr("worst elements")));
}

TEST_P(CliParsingTest, HeatmapIndexHasOneEntryPerLeadingDimension) {
  // t.weight is [2, 3, 4]: one leading dimension.
  ExpectUsageError({"heatmap", Cube(), "t.weight"},
                   ErrorReason::kRequestInvalid,
                   {"rank 3", "[2, 3, 4]", "--index", "1 index"});
  ExpectUsageError({"heatmap", Cube(), "t.weight", "--index", "0,1"},
                   ErrorReason::kRequestInvalid, {"1 index", "2 given"});
  ExpectUsageError(
      {"heatmap", Cube(), "t.weight", "--index", "0", "--index", "1"},
      ErrorReason::kRequestInvalid, {"1 index", "2 given"});
  ExpectUsageError({"heatmap", Q4K(), "blk.0.attn_q.weight", "--index", "0"},
                   ErrorReason::kRequestInvalid, {"0 indices"});
  ExpectUsageError({"heatmap", Cube(), "t.weight", "--index", "x"},
                   ErrorReason::kRequestInvalid, {"--index"});
  // Negative indices count from the end, as read and scalar count them.
  auto values = [&](const std::string& index) {
    CommandResult r = Run({"--json", "heatmap", Cube(), "t.weight", "--index",
                           index, "--size", "4x3"});
    EXPECT_EQ(r.exit_code, 0) << index << ": " << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out)["values"]
                            : nlohmann::json();
  };
  const nlohmann::json last = values("1");
  ASSERT_EQ(last.size(), 12u);
  EXPECT_EQ(last[0], 12.0);  // element [1, 0, 0]
  EXPECT_EQ(values("-1"), last);
  EXPECT_EQ(values("-2"), values("0"));
  CommandResult past = Run({"heatmap", Cube(), "t.weight", "--index", "-3"});
  EXPECT_EQ(past.exit_code, 1);  // past the end: the call's to find, as scalar
  EXPECT_THAT(CliErrorOf(past.err),
              AllOf(HasReason(ErrorReason::kIndexOutOfRange),
                    MessageNames("index -3")));
}

TEST_P(CliParsingTest, OutputOntoTheInputCheckpointIsRefused) {
  const std::string dir = MakeTempDir();
  const std::string ckpt = *root + "/victim.safetensors";
  std::filesystem::copy_file(Cube(), ckpt,
                             std::filesystem::copy_options::overwrite_existing);
  const std::string before = ReadFileBytes(ckpt);
  std::filesystem::create_hard_link(ckpt, dir + "/hard");
  std::filesystem::create_symlink(ckpt, dir + "/soft");
  for (const std::string& out : {ckpt, dir + "/hard", dir + "/soft"}) {
    ExpectUsageError({"read", ckpt, "t.weight", "-o", out},
                     ErrorReason::kRequestInvalid, {out});
    ExpectUsageError({"heatmap", ckpt, "t.weight", "--index", "0", "-o", out},
                     ErrorReason::kRequestInvalid, {out});
  }
  // A file inside a directory checkpoint is as much the input.
  const std::string shard = Fixture("safetensors/plain") + "/model.safetensors";
  std::filesystem::create_symlink(shard, dir + "/shard");
  ExpectUsageError(
      {"read", Fixture("safetensors/plain"), "bf16", "-o", dir + "/shard"},
      ErrorReason::kRequestInvalid, {dir + "/shard"});
  EXPECT_EQ(ReadFileBytes(ckpt), before);
  std::filesystem::remove(ckpt);
}

TEST_P(CliParsingTest, AnEmptyOutputPathIsAUsageError) {
  ExpectUsageError({"read", Cube(), "t.weight", "-o", ""},
                   ErrorReason::kRequestInvalid, {"-o"});
  ExpectUsageError({"heatmap", Cube(), "t.weight", "--index", "0", "-o", ""},
                   ErrorReason::kRequestInvalid, {"-o"});
  // An empty --html wrote no report and said nothing.
  ExpectUsageError({"compare", Cube(), Cube(), Cube(), "--html", ""},
                   ErrorReason::kRequestInvalid, {"--html"});
}

TEST_P(CliParsingTest, VersionPrintsTheProjectVersion) {
  CommandResult r = Run({"--version"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(
      std::regex_match(r.out, std::regex("tensormorph \\d+\\.\\d+\\.\\d+\n")))
      << r.out;
}

TEST_P(CliParsingTest, ReadOutputJsonWritesInt64AsStringsLikeEveryOtherReply) {
  const std::string out = MakeTempDir() + "/t.npy";
  CommandResult r = Run({"--json", "read", Cube(), "t.weight", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["path"], out);
  EXPECT_EQ(j["dtype"], "F32");
  EXPECT_EQ(j["shape"], nlohmann::json({"2", "3", "4"}));
  EXPECT_EQ(j["bytes"], "96");
}

TEST_P(CliParsingTest, ArchJsonIsTheSameOnEveryRun) {
  // Its modules mix up to ten dtypes (a map in the reply).
  const std::string ckpt = Fixture("safetensors/plain");
  CommandResult first = Run({"--json", "arch", ckpt});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(Run({"--json", "arch", ckpt}).out, first.out);
  }
  // Map entries (scheme_params) come sorted by key.
  std::function<void(const nlohmann::json&)> sorted =
      [&](const nlohmann::json& n) {
        if (n.contains("schemeParams")) {
          std::string previous;
          for (const auto& [k, v] : n["schemeParams"].items()) {
            EXPECT_LT(previous, k);
            previous = k;
          }
        }
        if (n.contains("children")) {
          for (const auto& c : n["children"]) sorted(c);
        }
      };
  sorted(nlohmann::json::parse(first.out)["root"]);
  // nlohmann sorts keys itself: check the text's own order too.
  const std::regex map("\"schemeParams\":\\{([^}]*)\\}");
  const std::regex key("\"([^\"]+)\":\"");
  int maps = 0;
  for (auto m = std::sregex_iterator(first.out.begin(), first.out.end(), map);
       m != std::sregex_iterator(); ++m) {
    const std::string params = (*m)[1];
    std::vector<std::string> keys;
    for (auto k = std::sregex_iterator(params.begin(), params.end(), key);
         k != std::sregex_iterator(); ++k) {
      keys.push_back((*k)[1]);
    }
    maps += keys.size() > 1;
    EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end())) << params;
  }
  EXPECT_GT(maps, 0) << "no map of several entries to check";
}

TEST_P(CliParsingTest, RawBlockNpyKeepsOneRowOfBytesPerTensorRow) {
  const std::string out = MakeTempDir() + "/q.npy";
  // Q4_K [4, 256]: one 144-byte block per row.
  CommandResult r =
      Run({"read", Q4K(), "blk.0.attn_q.weight", "--raw", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto npy = ReadNpy(out);
  EXPECT_EQ(npy.descr, "|u1");
  EXPECT_THAT(npy.shape, ElementsAre(4, 144));
  EXPECT_EQ(npy.data.size(), 4u * 144);
  CommandResult rows = Run({"read", Q4K(), "blk.0.attn_q.weight", "--raw",
                            "--slice", "1:3", "-o", out});
  ASSERT_EQ(rows.exit_code, 0) << rows.err;
  EXPECT_THAT(ReadNpy(out).shape, ElementsAre(2, 144));
}

TEST_P(CliParsingTest, CountsAreInTheRightNumber) {
  CommandResult one = Run({"ls", *root + "/one.safetensors"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_THAT(one.out, HasSubstr("\n1 tensor, "));
  CommandResult three = Run({"ls", Cube()});
  EXPECT_THAT(three.out, HasSubstr("\n3 tensors, "));
  ExpectUsageError({"scalar", Q4K(), "blk.0.attn_q.weight", "1"},
                   ErrorReason::kRequestInvalid, {"'1'", "rank 2"});
  CommandResult scalar = Run({"info", Cube(), "s"});
  EXPECT_THAT(scalar.out, HasSubstr("(1 element)"));
  CommandResult diff =
      Run({"diff", Fixture("gguf/Q8_0.gguf"), Fixture("gguf/F32.gguf"),
           "--filter", "blk.0.attn_q.weight"});
  EXPECT_EQ(diff.exit_code, 0) << diff.err;
  EXPECT_THAT(diff.out, HasSubstr("\n1 tensor compared"));
}

TEST_P(CliParsingTest, AnEmptyTensorsHeatmapDrawsNoDataCells) {
  const std::string out = MakeTempDir() + "/e.png";
  CommandResult r = Run({"heatmap", Cube(), "e.weight", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("empty tensor (a zero dimension): no cells"));
  // The picture holds its title and that sentence: background and text
  // pixels only, no colour scale, no cells.
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(out.c_str(), "rb"),
                                          &std::fclose);
  ASSERT_NE(f, nullptr);
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_init_io(png, f.get());
  png_read_info(png, info);
  const int w = static_cast<int>(png_get_image_width(png, info));
  const int h = static_cast<int>(png_get_image_height(png, info));
  std::vector<uint8_t> row(static_cast<size_t>(w) * 3);
  int other = 0;
  for (int y = 0; y < h; ++y) {
    png_read_row(png, row.data(), nullptr);
    for (int x = 0; x < w; ++x) {
      const uint8_t* p = &row[static_cast<size_t>(x) * 3];
      const bool grey = p[0] == p[1] && p[1] == p[2];
      if (!grey) ++other;
    }
  }
  png_destroy_read_struct(&png, &info, nullptr);
  EXPECT_EQ(other, 0) << "coloured pixels in an empty tensor's heatmap";
  CommandResult term = Run({"heatmap", Cube(), "e.weight", "--term"});
  EXPECT_THAT(term.out, ::testing::Not(HasSubstr("\x1b[38;2;")));
}

TEST_P(CliParsingTest, InfoNamesTheShardOfPerFileMetadata) {
  CommandResult r = Run({"info", Fixture("safetensors/fp8_block_sharded")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  bool in_metadata = false;
  int entries = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line == "metadata") {
      in_metadata = true;
      continue;
    }
    if (!in_metadata) continue;
    ++entries;
    EXPECT_THAT(line, ::testing::MatchesRegex(
                          "  model-0000[12]-of-00002\\.safetensors: .*"));
  }
  EXPECT_EQ(entries, 2) << r.out;  // each shard's format = pt
  CommandResult j =
      Run({"--json", "info", Fixture("safetensors/fp8_block_sharded")});
  const nlohmann::json sharded = nlohmann::json::parse(j.out);
  for (const auto& m : sharded["metadata"]) {
    EXPECT_THAT(m["file"].get<std::string>(), HasSubstr(".safetensors"));
  }
  CommandResult single = Run({"--json", "info", Cube()});
  const nlohmann::json one_file = nlohmann::json::parse(single.out);
  for (const auto& m : one_file["metadata"]) {
    EXPECT_EQ(m["file"], "");
  }
}

INSTANTIATE_TEST_SUITE_P(BothModes, CliParsingTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Remote" : "Embedded";
                         });

// The server checks what it can of an index on its own: the coordinates come
// concatenated, so a count that does not divide into the rank is refused,
// naming the rank. (Numeric fields past their limits: reply_limits_test.)
TEST(RequestLimitsServerTest, CoordinatesThatDoNotFitTheRankAreRefused) {
  auto server = testing::StartLoopbackServer({FixturesDir()});
  v1::InspectScalarsRequest inspect;
  inspect.set_checkpoint("gguf/Q4_K.gguf");
  inspect.set_tensor("blk.0.attn_q.weight");
  for (int64_t c : {0, 1, 2}) inspect.add_coords(c);
  auto s = server.client->InspectScalars(inspect).status();
  // The rank and shape, and the count given.
  EXPECT_THAT(
      s, AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames("rank 2"),
               MessageNames("[4, 256]"), MessageNames("3 given")));
}

}  // namespace
}  // namespace tensormorph::cli_parsing_test
