// The CLI's printers held to their specifications: the streamed --json of
// `scalar` prints what protobuf's JSON mapping prints for the whole reply;
// a preview of the shown items prints what a preview of the whole array
// prints.
#include "client/cli/format.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tensormorph {
namespace {

v1::InspectScalarsResponse Reply(int scalars) {
  v1::InspectScalarsResponse r;
  r.add_shape(3);
  r.add_shape(1000);
  r.mutable_encoding()->set_scheme("Q4_K");
  r.mutable_encoding()->set_granularity("per-block 256 (8 sub-blocks of 32)");
  r.set_reference_tensor("model.layers.0.self_attn.q_proj.weight");
  r.set_reference_rows_mapped(true);
  for (int i = 0; i < scalars; ++i) {
    v1::ScalarInspection* s = r.add_scalars();
    s->add_index(i / 1000);
    s->add_index(i % 1000);
    s->set_flat_index(i);
    s->set_value(i * 0.1 - 3);
    s->set_scale(i % 7 == 0 ? std::numeric_limits<double>::quiet_NaN()
                            : 1.0 / (i + 1));
    s->set_step(i % 11 == 0 ? -std::numeric_limits<double>::infinity() : 0.5);
    s->set_group(i / 32);
    if (i % 3 == 0) {
      s->mutable_source()->set_value(1e-300 * i);
      s->mutable_source()->set_error(-0.25);
    }
  }
  return r;
}

TEST(ScalarsJsonTest, StreamedEqualsProtobufsMappingOfTheWholeReply) {
  for (int n : {0, 1, 2, 3000}) {
    SCOPED_TRACE(n);
    const v1::InspectScalarsResponse r = Reply(n);
    std::ostringstream out;
    ScalarsJsonWriter json(out);
    json.Add(r);
    json.Finish();
    EXPECT_EQ(out.str(), ToJson(r) + "\n");
  }
}

TEST(ScalarsJsonTest, RepliesInBatchesPrintAsTheOneReplyOfAllTheirScalars) {
  const v1::InspectScalarsResponse whole = Reply(2500);
  std::ostringstream out;
  ScalarsJsonWriter json(out);
  for (int from : {0, 1000, 2000}) {
    v1::InspectScalarsResponse batch = whole;
    batch.clear_scalars();
    for (int i = from; i < std::min(from + 1000, 2500); ++i) {
      *batch.add_scalars() = whole.scalars(i);
    }
    json.Add(std::move(batch));
  }
  json.Finish();
  EXPECT_EQ(out.str(), ToJson(whole) + "\n");
}

TEST(PreviewTest, ThePreviewOfShownItemsIsThePreviewOfTheWholeArray) {
  const std::vector<int64_t> shape = {9, 2, 12};
  std::vector<float> whole(9 * 2 * 12);
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = i * 0.25f - 3;
  const PreviewPlan plan = PlanPreview(shape);
  EXPECT_EQ(plan.shown_shape, (std::vector<int64_t>{6, 2, 6}));
  EXPECT_EQ(plan.elided, (std::vector<bool>{true, false, true}));
  std::vector<float> shown;
  for (int64_t a : {0, 1, 2, 6, 7, 8}) {
    for (int64_t b : {0, 1}) {
      for (int64_t c : {0, 1, 2, 9, 10, 11}) {
        shown.push_back(whole[(a * 2 + b) * 12 + c]);
      }
    }
  }
  EXPECT_EQ(ShownArrayPreview(shown, plan), ArrayPreview(whole, shape));
  EXPECT_THAT(ArrayPreview(whole, shape), ::testing::HasSubstr("..."));
}

// The trial's "22.2 s s": a bar line shorter than the one before left the
// old characters. Each line starts at the column 0 and erases what is left
// of the line after it.
// A name from a file holding ESC shows as \x1B, four columns, and one
// holding é as one: the next column starts where the others' does.
TEST(TableTest, ColumnsLineUpAsTheTerminalShowsTheCells) {
  const std::string table = Table({{"NAME", "SIZE"},
                                   {"a\x1B[31mred", "1"},
                                   {"caf\xC3\xA9", "2"},
                                   {"plain", "3"}});
  EXPECT_EQ(table,
            "NAME          SIZE\n"
            "a\\x1B[31mred  1\n"
            "caf\xC3\xA9          2\n"
            "plain         3\n");
}

TEST(ProgressBarTest, EachLineErasesTheRestOfTheLine) {
  const std::string long_line =
      ProgressBarLine(100, 1000, 1 << 30, int64_t{1} << 40, 123.4);
  const std::string short_line = ProgressBarLine(1, 2, 3, 4, 5);
  for (const std::string& line : {long_line, short_line}) {
    EXPECT_EQ(line.front(), '\r') << line;
    EXPECT_THAT(line, ::testing::EndsWith("\x1b[K")) << line;
  }
  EXPECT_LT(short_line.size(), long_line.size());
}

}  // namespace
}  // namespace tensormorph
