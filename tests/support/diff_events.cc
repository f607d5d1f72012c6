#include "tests/support/diff_events.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace tensormorph::testing {

using ::google::protobuf::util::MessageDifferencer;

DiffEvents ParseDiffJson(const std::string& out) {
  DiffEvents d;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    v1::QuantDiffEvent e;
    const auto st =
        google::protobuf::util::JsonStringToMessage(std::string(line), &e);
    EXPECT_TRUE(st.ok()) << st.ToString() << ": " << line;
    if (e.has_tensor()) d.reports.push_back(e.tensor());
    if (e.has_progress()) d.progress.push_back(e.progress());
    if (e.has_summary()) d.summaries.push_back(e.summary());
  }
  return d;
}

std::string PrintDiffJson(const DiffEvents& events) {
  std::string out;
  auto print = [&](const v1::QuantDiffEvent& event) {
    std::string line;
    (void)google::protobuf::util::MessageToJsonString(event, &line);
    absl::StrAppend(&out, line, "\n");
  };
  for (const auto& r : events.reports) {
    v1::QuantDiffEvent event;
    *event.mutable_tensor() = r;
    print(event);
  }
  for (const auto& s : events.summaries) {
    v1::QuantDiffEvent event;
    *event.mutable_summary() = s;
    print(event);
  }
  return out;
}

void ExpectSameDiff(const DiffEvents& got, const DiffEvents& want) {
  ASSERT_EQ(got.status, want.status);
  if (!want.status.ok()) return;
  ASSERT_EQ(got.summaries.size(), 1u);
  ASSERT_EQ(want.summaries.size(), 1u);
  std::map<std::string, v1::TensorDiffReport> by_name;
  for (const auto& r : want.reports) by_name[r.name()] = r;
  ASSERT_EQ(got.reports.size(), want.reports.size());
  for (const auto& r : got.reports) {
    std::string diff;
    MessageDifferencer d;
    d.ReportDifferencesToString(&diff);
    EXPECT_TRUE(d.Compare(r, by_name[r.name()])) << r.name() << ": " << diff;
  }
  v1::DiffSummary a = got.summaries[0], b = want.summaries[0];
  a.clear_wall_seconds();
  b.clear_wall_seconds();
  std::string diff;
  MessageDifferencer d;
  d.ReportDifferencesToString(&diff);
  EXPECT_TRUE(d.Compare(a, b)) << diff;
}

}  // namespace tensormorph::testing
