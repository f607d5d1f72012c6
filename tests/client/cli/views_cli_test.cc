// stats, heatmap, arch and ls --compat through the CLI, remote and embedded.
#include <png.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/cli_error.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/process.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph::views_cli_test {
namespace {

using ::tensormorph::testing::CliErrorOf;
using ::tensormorph::testing::CliModes;
using ::tensormorph::testing::CliPath;
using ::tensormorph::testing::CommandResult;
using ::tensormorph::testing::Fixture;
using ::tensormorph::testing::FixturesDir;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::RunCommand;
using ::tensormorph::testing::ServerProcess;
using ::testing::AllOf;
using ::testing::HasSubstr;

struct Png {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  std::array<uint8_t, 3> At(int x, int y) const {
    const uint8_t* p = &rgb[(static_cast<size_t>(y) * width + x) * 3];
    return {p[0], p[1], p[2]};
  }
};

// Reads an 8-bit RGB PNG with libpng, independently of the writer.
Png ReadPng(const std::string& path) {
  Png out;
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"),
                                             &std::fclose);
  FILE* f = file.get();
  if (f == nullptr) return out;
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return Png();
  }
  png_init_io(png, f);
  png_read_info(png, info);
  out.width = static_cast<int>(png_get_image_width(png, info));
  out.height = static_cast<int>(png_get_image_height(png, info));
  out.rgb.resize(static_cast<size_t>(out.width) * out.height * 3);
  for (int y = 0; y < out.height; ++y) {
    png_read_row(png, &out.rgb[static_cast<size_t>(y) * out.width * 3],
                 nullptr);
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return out;
}

CliModes* cli = nullptr;
const std::string* demo = nullptr;

class ViewsCliTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    demo = &::tensormorph::testing::DemoDir();
    cli = new CliModes({FixturesDir(), *demo});
  }
  static void TearDownTestSuite() {
    delete cli;
    cli = nullptr;
  }
  CommandResult Run(std::vector<std::string> args) {
    return cli->Run(GetParam(), std::move(args));
  }
};

TEST_P(ViewsCliTest, StatsJsonAndTable) {
  CommandResult j = Run(
      {"stats", Fixture("gguf/Q4_0.gguf"), "blk.0.attn_q.weight", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto s = nlohmann::json::parse(j.out);
  EXPECT_EQ(std::stoll(s["levelsUsed"].get<std::string>()), 16);
  int64_t total = 0;
  for (const auto& c : s["histogram"])
    total += std::stoll(c.get<std::string>());
  EXPECT_EQ(total, 1024);
  CommandResult t =
      Run({"stats", Fixture("gguf/Q4_0.gguf"), "blk.0.attn_q.weight"});
  EXPECT_THAT(t.out, HasSubstr("levels used                16 of 16"));
  EXPECT_THAT(t.out, HasSubstr("\u2588"));  // the bar histogram
}

TEST_P(ViewsCliTest, HeatmapPngHasItsSizeAndGroupLinesOnGroupEdges) {
  for (const std::string mode : {"value", "absmax"}) {
    SCOPED_TRACE(mode);
    const std::string out = MakeTempDir() + "/h.png";
    // 128 x 64 cells of a [64, 128] group-32 tensor: one cell per element,
    // 4 pixels a cell, cells from (4, 16).
    CommandResult r = Run({"heatmap", Fixture("safetensors/ct_w4a16_group"),
                           "model.layers.0.self_attn.q_proj.weight", "--mode",
                           mode, "--size", "128x64", "-o", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const Png png = ReadPng(out);
    ASSERT_GT(png.width, 4 + 128 * 4);
    EXPECT_EQ(png.height, 16 + 64 * 4 + 4);
    const std::array<uint8_t, 3> white = {255, 255, 255};
    // The last pixel column of cell 31 (element column 31) is a group line,
    // the one of cell 30 is not; likewise every cell's last row (per-row
    // groups).
    EXPECT_EQ(png.At(4 + 32 * 4 - 1, 16 + 1), white);
    EXPECT_NE(png.At(4 + 31 * 4 - 1, 16 + 1), white);
    EXPECT_EQ(png.At(4 + 1, 16 + 4 - 1), white);
  }
  for (const std::string mode : {"value", "absmax"}) {
    SCOPED_TRACE(mode);
    const std::string q4k = MakeTempDir() + "/k.png";
    CommandResult k =
        Run({"heatmap", Fixture("gguf/Q4_K.gguf"), "blk.0.attn_q.weight",
             "--mode", mode, "--size", "64x4", "-o", q4k});
    ASSERT_EQ(k.exit_code, 0) << k.err;
    const Png kp = ReadPng(q4k);
    EXPECT_EQ(kp.height, 16 + 64 + 4);  // 8 px cells, the colour bar is 64 tall
    // 64 cells of 4 elements: a sub-block (32) ends every 8 cells.
    EXPECT_EQ(kp.At(4 + 8 * 8 - 1, 16 + 2),
              (std::array<uint8_t, 3>{255, 255, 255}));
    EXPECT_NE(kp.At(4 + 7 * 8 - 1, 16 + 2),
              (std::array<uint8_t, 3>{255, 255, 255}));
  }
  CommandResult term = Run({"heatmap", Fixture("gguf/Q4_K.gguf"),
                            "blk.0.attn_q.weight", "--term", "--size", "16x4"});
  EXPECT_THAT(term.out, HasSubstr("\x1b[38;2;"));
  CommandResult err = Run({"heatmap", Fixture("gguf/Q4_K.gguf"),
                           "blk.0.attn_q.weight", "--mode", "error", "--ref",
                           Fixture("gguf/source_f32.gguf"), "--json"});
  ASSERT_EQ(err.exit_code, 0) << err.err;
  EXPECT_GT(nlohmann::json::parse(err.out)["max"].get<double>(), 0.4);
}

// f16_special holds [0, -0, 1, -2.5, 65504, two subnormals, +inf, -inf,
// NaN]: the text, JSON and PNG say which cells are not finite, and the
// range is the finite cells' (it was -inf and NaN, every cell one colour).
TEST_P(ViewsCliTest, HeatmapOfNaNAndInfinitiesKeepsThemAndAFiniteRange) {
  const std::string plain = Fixture("safetensors/plain");
  CommandResult text = Run({"heatmap", plain, "f16_special"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out,
              HasSubstr("min -2.5  max 65504\n3 cells not finite: 1 NaN "
                        "(magenta), 1 +inf (top colour), 1 -inf (bottom "
                        "colour)\n"));
  EXPECT_THAT(text.out, HasSubstr("\x1b[38;2;255;0;255m"));  // the NaN cell
  CommandResult absmax =
      Run({"heatmap", plain, "f16_special", "--mode", "absmax"});
  EXPECT_THAT(absmax.out, HasSubstr("min 0  max 65504\n3 cells not finite: 1 "
                                    "NaN (magenta), 2 +inf (top colour)\n"));

  for (const std::string mode : {"value", "absmax"}) {
    SCOPED_TRACE(mode);
    CommandResult j =
        Run({"--json", "heatmap", plain, "f16_special", "--mode", mode});
    ASSERT_EQ(j.exit_code, 0) << j.err;
    const auto h = nlohmann::json::parse(j.out);
    ASSERT_EQ(h["values"].size(), 10u);
    EXPECT_EQ(h["values"][7], "Infinity");
    EXPECT_EQ(h["values"][8], mode == "value" ? "-Infinity" : "Infinity");
    EXPECT_EQ(h["values"][9], "NaN");  // absmax said -Infinity
    EXPECT_EQ(h["min"], mode == "value" ? -2.5 : 0.0);
    EXPECT_EQ(h["max"], 65504.0);

    const std::string out = MakeTempDir() + "/s.png";
    CommandResult png =
        Run({"heatmap", plain, "f16_special", "--mode", mode, "-o", out});
    ASSERT_EQ(png.exit_code, 0) << png.err;
    const Png p = ReadPng(out);
    // 10 cells of 16 pixels from (4, 16); the colour bar is 64 tall, the
    // legend's line under it begins with the NaN swatch.
    const std::array<uint8_t, 3> magenta = {255, 0, 255};
    EXPECT_EQ(p.At(4 + 9 * 16 + 8, 16 + 8), magenta);
    EXPECT_NE(p.At(4 + 7 * 16 + 8, 16 + 8), p.At(4 + 9 * 16 + 8, 16 + 8));
    EXPECT_NE(p.At(4 + 3 * 16 + 8, 16 + 8), p.At(4 + 7 * 16 + 8, 16 + 8));
    EXPECT_EQ(p.height, 16 + 64 + 4 + 12);
    EXPECT_EQ(p.At(4 + 3, 16 + 64 + 4 + 3), magenta);
  }
}

// Group mode: the palette's colours, no white lines; neighbouring groups
// apart by colour alone.
TEST_P(ViewsCliTest, HeatmapGroupModeColoursGroupsWithThePaletteAndNoLines) {
  const std::string out = MakeTempDir() + "/g.png";
  CommandResult r = Run({"heatmap", Fixture("safetensors/ct_w4a16_group"),
                         "model.layers.0.self_attn.q_proj.weight", "--mode",
                         "group", "--size", "128x64", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Png png = ReadPng(out);
  const std::set<std::array<uint8_t, 3>> palette = {
      {0x4e, 0x79, 0xa7}, {0xf2, 0x8e, 0x2b}, {0xe1, 0x57, 0x59},
      {0x76, 0xb7, 0xb2}, {0x59, 0xa1, 0x4f}, {0xed, 0xc9, 0x48},
      {0xb0, 0x7a, 0xa1}, {0xff, 0x9d, 0xa7}, {0x9c, 0x75, 0x5f},
      {0xba, 0xb0, 0xac}};
  // Every pixel of every cell (4 x 4 each) is a palette colour: no lines.
  for (int y = 16; y < 16 + 64 * 4; ++y) {
    for (int x = 4; x < 4 + 128 * 4; ++x) {
      ASSERT_TRUE(palette.count(png.At(x, y)) == 1) << x << "," << y;
    }
  }
  // Groups of 32 columns per row: cell 31 and cell 32 differ, 30 and 31
  // do not; a row and the next differ.
  EXPECT_NE(png.At(4 + 31 * 4, 16), png.At(4 + 32 * 4, 16));
  EXPECT_EQ(png.At(4 + 30 * 4, 16), png.At(4 + 31 * 4, 16));
  EXPECT_NE(png.At(4, 16), png.At(4, 16 + 4));
}

TEST_P(ViewsCliTest, HeatmapRegionZoomsAndAnOutsideRegionIsRefused) {
  // Q4_K attn_q is [4, 256]: rows 1:3, cols 64:192 at one cell each.
  CommandResult j =
      Run({"heatmap", Fixture("gguf/Q4_K.gguf"), "blk.0.attn_q.weight",
           "--rows", "1:3", "--cols", "64:", "--size", "512x8", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto h = nlohmann::json::parse(j.out);
  EXPECT_EQ(h["width"].get<int>(), 192);
  EXPECT_EQ(h["height"].get<int>(), 2);
  EXPECT_EQ(std::stoll(h["rowEdges"][0].get<std::string>()), 1);
  EXPECT_EQ(std::stoll(h["rowEdges"][2].get<std::string>()), 3);
  EXPECT_EQ(std::stoll(h["colEdges"][0].get<std::string>()), 64);
  EXPECT_EQ(std::stoll(h["colEdges"][192].get<std::string>()), 256);
  CommandResult term = Run({"heatmap", Fixture("gguf/Q4_K.gguf"),
                            "blk.0.attn_q.weight", "--rows", "0:2", "--term"});
  ASSERT_EQ(term.exit_code, 0) << term.err;
  EXPECT_THAT(term.out, HasSubstr("rows 0:2 cols 0:256"));
  CommandResult outside = Run({"heatmap", Fixture("gguf/Q4_K.gguf"),
                               "blk.0.attn_q.weight", "--rows", "2:9"});
  EXPECT_EQ(outside.exit_code, 1);  // refused as wrong by the service
  // The rows asked for and the tensor's.
  EXPECT_THAT(CliErrorOf(outside.err),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("[2, 9)"), MessageNames("4 rows")));
  CommandResult bad = Run({"heatmap", Fixture("gguf/Q4_K.gguf"),
                           "blk.0.attn_q.weight", "--cols", "5:5"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(
      CliErrorOf(bad.err),
      AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames("'5:5'")));
}

TEST_P(ViewsCliTest, HeatmapZerosModeAloneAndAgainstAReference) {
  CommandResult alone =
      Run({"heatmap", Fixture("gguf/Q4_0.gguf"), "blk.0.attn_q.weight",
           "--mode", "zeros", "--json"});
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  const auto a = nlohmann::json::parse(alone.out);
  EXPECT_TRUE(!a.contains("pruned") || a["pruned"].empty());
  for (const auto& v : a["values"]) {
    EXPECT_GE(v.get<double>(), 0);
    EXPECT_LE(v.get<double>(), 1);
  }
  const std::string out = MakeTempDir() + "/z.png";
  CommandResult ref = Run(
      {"heatmap", Fixture("gguf/Q4_K.gguf"), "blk.0.ffn_down.weight", "--mode",
       "zeros", "--ref", Fixture("gguf/source_f32.gguf"), "-o", out, "--term"});
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  EXPECT_THAT(ref.out, HasSubstr("red: induced zeros  blue: pruned zeros"));
  const Png png = ReadPng(out);
  EXPECT_GT(png.width, 0);
  // Green never rises above the dark background: only red and blue mix.
  for (int y = 16; y < 16 + 8; ++y) {
    for (int x = 4; x < 12; ++x) EXPECT_EQ(png.At(x, y)[1], 24);
  }
  CommandResult help = Run({"heatmap", "--help"});
  EXPECT_THAT(help.out, AllOf(HasSubstr("zeros"), HasSubstr("--rows"),
                              HasSubstr("--cols")));
}

TEST_P(ViewsCliTest, StatsOfOneGroupPrintsItsLevels) {
  CommandResult t = Run({"stats", Fixture("gguf/Q4_0.gguf"),
                         "blk.0.attn_q.weight", "--group", "3"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_THAT(
      t.out, AllOf(HasSubstr("group 3"), HasSubstr("representable levels (16)"),
                   HasSubstr("count                      32")));
  CommandResult j = Run({"stats", Fixture("gguf/Q4_0.gguf"),
                         "blk.0.attn_q.weight", "--group", "3", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto s = nlohmann::json::parse(j.out);
  ASSERT_EQ(s["levels"].size(), 16u);
  EXPECT_LT(s["levels"][0].get<double>(), s["levels"][15].get<double>());
  CommandResult past = Run({"stats", Fixture("gguf/Q4_0.gguf"),
                            "blk.0.attn_q.weight", "--group", "32"});
  EXPECT_EQ(past.exit_code, 1);  // as --group -1, found by the CLI
  EXPECT_THAT(CliErrorOf(past.err),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("group 32"), MessageNames("0..31")));
  CommandResult plain = Run({"stats", Fixture("gguf/F32.gguf"),
                             "blk.0.attn_q.weight", "--group", "0"});
  EXPECT_EQ(plain.exit_code, 1);
  EXPECT_THAT(CliErrorOf(plain.err), HasReason(ErrorReason::kRequestInvalid));
}

TEST_P(ViewsCliTest, ArchMarksBoundariesInTextJsonAndDot) {
  CommandResult t = Run({"arch", *demo + "/model-q4_k_m.gguf"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_THAT(t.out, HasSubstr("10 quantization boundaries"));
  EXPECT_THAT(t.out, HasSubstr("\u25c6 attn_v  [Q6_K]"));
  CommandResult j =
      Run({"arch", Fixture("safetensors/ct_int8_channel"), "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(
      std::stoll(nlohmann::json::parse(j.out)["boundaries"].get<std::string>()),
      2);
  CommandResult d = Run({"arch", *demo + "/model-q4_k_m.gguf", "--dot"});
  EXPECT_THAT(d.out, HasSubstr("digraph architecture"));
  EXPECT_THAT(d.out, HasSubstr("color=red"));
}

// Hugging Face names put everything under "model.", the same word the
// root used to be called: the graph must still be a tree of distinct nodes.
TEST_P(ViewsCliTest, ArchDotIsATreeWithOneNodePerModule) {
  CommandResult d =
      Run({"arch", Fixture("safetensors/ct_int8_channel"), "--dot"});
  ASSERT_EQ(d.exit_code, 0) << d.err;
  std::vector<std::string> nodes;
  std::vector<std::pair<std::string, std::string>> edges;
  std::istringstream lines(d.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string a, arrow, b;
    words >> a >> arrow >> b;
    if (arrow == "->") {
      edges.emplace_back(a, b.substr(0, b.find(';')));
    } else if (arrow.rfind("[label=", 0) == 0) {
      nodes.push_back(a);
    }
  }
  ASSERT_GT(nodes.size(), 2u) << d.out;
  std::set<std::string> unique(nodes.begin(), nodes.end());
  EXPECT_EQ(unique.size(), nodes.size()) << d.out;
  EXPECT_EQ(edges.size(), nodes.size() - 1) << d.out;  // a tree
  std::set<std::string> children;
  for (const auto& [from, to] : edges) {
    EXPECT_NE(from, to) << d.out;
    EXPECT_TRUE(unique.count(from) && unique.count(to)) << from << " " << to;
    EXPECT_TRUE(children.insert(to).second) << to << " has two parents";
  }
  EXPECT_EQ(children.count(nodes.front()), 0u);         // the root, first
  EXPECT_THAT(d.out, HasSubstr("label=\"model\\n"));    // the HF subtree
  EXPECT_THAT(d.out, HasSubstr("ct_int8_channel\\n"));  // the root
}

TEST_P(ViewsCliTest, HeatmapMisuseIsAUsageErrorAndAnUnwritablePngSaysWhy) {
  CommandResult noref = Run({"heatmap", Fixture("gguf/Q4_K.gguf"),
                             "blk.0.attn_q.weight", "--mode", "error"});
  EXPECT_EQ(noref.exit_code, 1);
  EXPECT_THAT(
      CliErrorOf(noref.err),
      AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames("--ref")));
  // An importance matrix weighs sq-error's squared errors: said in the
  // CLI's words.
  CommandResult weighed = Run({"heatmap", Fixture("gguf/Q4_K.gguf"),
                               "blk.0.attn_q.weight", "--imatrix", "x.dat"});
  EXPECT_EQ(weighed.exit_code, 1);
  EXPECT_THAT(CliErrorOf(weighed.err),
              AllOf(HasReason(ErrorReason::kRequestInvalid),
                    MessageNames("--mode sq-error, not --mode value")));
  CommandResult png =
      Run({"heatmap", Fixture("gguf/Q4_K.gguf"), "blk.0.attn_q.weight", "-o",
           "/nonexistent-dir/x.png"});
  EXPECT_EQ(png.exit_code, 2);
  EXPECT_THAT(CliErrorOf(png.err), AllOf(HasReason(ErrorReason::kNotFound),
                                         MessageNames("/nonexistent-dir")));
}

// Drawn in a terminal, a map is no wider than it (here $COLUMNS, stdout
// being a pipe): one character a cell, a wider map would wrap. --size is
// drawn as given.
TEST(HeatmapTerminalTest, AMapFitsTheTerminalUnlessSizeIsGiven) {
  // The widest line's cells (each one upper half block).
  auto cells = [](const std::string& out) {
    size_t most = 0;
    for (absl::string_view line : absl::StrSplit(out, '\n')) {
      size_t n = 0;
      for (size_t at = line.find("\u2580"); at != absl::string_view::npos;
           at = line.find("\u2580", at + 1)) {
        ++n;
      }
      most = std::max(most, n);
    }
    return most;
  };
  const std::vector<std::string> args = {CliPath(), "heatmap",
                                         Fixture("gguf/Q4_K.gguf"),
                                         "blk.0.attn_q.weight", "--term"};
  const CommandResult narrow = RunCommand(args, {"COLUMNS=80"});
  ASSERT_EQ(narrow.exit_code, 0) << narrow.err;
  EXPECT_EQ(cells(narrow.out), 80u);
  const CommandResult wide = RunCommand(args, {"COLUMNS=300"});
  ASSERT_EQ(wide.exit_code, 0) << wide.err;
  EXPECT_EQ(cells(wide.out), 128u);
  std::vector<std::string> sized = args;
  sized.insert(sized.end(), {"--size", "128x4"});
  const CommandResult given = RunCommand(sized, {"COLUMNS=80"});
  ASSERT_EQ(given.exit_code, 0) << given.err;
  EXPECT_EQ(cells(given.out), 128u);
  // A PNG asked for beside the terminal's drawing keeps its size.
  const std::string png = MakeTempDir() + "/h.png";
  std::vector<std::string> both = args;
  both.insert(both.end(), {"-o", png});
  const CommandResult drawn = RunCommand(both, {"COLUMNS=80"});
  ASSERT_EQ(drawn.exit_code, 0) << drawn.err;
  EXPECT_THAT(drawn.err, HasSubstr("128x4 cells"));
}

TEST_P(ViewsCliTest, CompatPerTensorAndPerCheckpoint) {
  CommandResult ls = Run({"ls", *demo + "/model-q4_k_m.gguf", "--compat"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_THAT(ls.out, HasSubstr("Q6_K (ggml)"));
  // Columns are as wide as the longest backend name, which grows as rows
  // are added.
  EXPECT_THAT(ls.out, ::testing::ContainsRegex("llama.cpp CUDA +supported"));
  EXPECT_THAT(ls.out, ::testing::ContainsRegex("TensorRT-LLM +not known"));
  CommandResult info = Run({"info", Fixture("safetensors/awq_4bit_g32"),
                            "model.layers.0.mlp.down_proj.weight"});
  EXPECT_THAT(info.out, HasSubstr("vLLM"));
}

INSTANTIATE_TEST_SUITE_P(BothModes, ViewsCliTest, ::testing::Bool(),
                         [](const auto& info) {
                           return info.param ? "Remote" : "Embedded";
                         });

}  // namespace
}  // namespace tensormorph::views_cli_test
