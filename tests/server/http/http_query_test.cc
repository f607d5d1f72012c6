// The GET endpoints' query strings become requests field for field.
#include "server/http/http_query.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MessageNames;
using ::testing::AllOf;

TEST(HttpQueryTest, HeatmapRegionsTakeEitherBoundOrBoth) {
  absl::StatusOr<v1::GetHeatmapRequest> r =
      HeatmapFromQuery({{"checkpoint", "m.gguf"},
                        {"tensor", "t"},
                        {"rows", "3:"},
                        {"cols", ":7"},
                        {"width", "640"},
                        {"height", "480"},
                        {"mode", "zeros"},
                        {"ref", "src"},
                        {"ref_tensor", "w"},
                        {"leading", "1,-2"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->row_begin(), 3);
  EXPECT_EQ(r->row_end(), 0);
  EXPECT_EQ(r->col_begin(), 0);
  EXPECT_EQ(r->col_end(), 7);
  EXPECT_EQ(r->width(), 640);
  EXPECT_EQ(r->height(), 480);
  EXPECT_EQ(r->mode(), v1::HEATMAP_MODE_ZEROS);
  EXPECT_EQ(r->reference(), "src");
  EXPECT_EQ(r->reference_tensor(), "w");
  EXPECT_THAT(r->leading(), ::testing::ElementsAre(1, -2));
}

TEST(HttpQueryTest, HeatmapImatrixIsTheRequestsPath) {
  absl::StatusOr<v1::GetHeatmapRequest> r =
      HeatmapFromQuery({{"checkpoint", "q.gguf"},
                        {"tensor", "t"},
                        {"mode", "sq-error"},
                        {"ref", "src.gguf"},
                        {"imatrix", "calib/imatrix.gguf"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->mode(), v1::HEATMAP_MODE_SQ_ERROR);
  EXPECT_EQ(r->imatrix(), "calib/imatrix.gguf");
  absl::StatusOr<v1::GetHeatmapRequest> none =
      HeatmapFromQuery({{"checkpoint", "q.gguf"}, {"tensor", "t"}});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->imatrix(), "");
}

TEST(HttpQueryTest, HeatmapModesAreTheCliNames) {
  for (const auto& [name, mode] :
       std::vector<std::pair<std::string, v1::HeatmapMode>>{
           {"value", v1::HEATMAP_MODE_MEAN},
           {"absmax", v1::HEATMAP_MODE_ABSMAX},
           {"error", v1::HEATMAP_MODE_ERROR},
           {"group", v1::HEATMAP_MODE_GROUP},
           {"zeros", v1::HEATMAP_MODE_ZEROS},
           {"sq-error", v1::HEATMAP_MODE_SQ_ERROR}}) {
    absl::StatusOr<v1::GetHeatmapRequest> r = HeatmapFromQuery(
        {{"checkpoint", "m"}, {"tensor", "t"}, {"mode", name}});
    ASSERT_TRUE(r.ok()) << name;
    EXPECT_EQ(r->mode(), mode) << name;
  }
}

TEST(HttpQueryTest, ValuesOutOfTheirTypeAreRefusedNamingTheParameter) {
  const QueryParams base = {{"checkpoint", "m"}, {"tensor", "t"}};
  for (const auto& [name, value, named] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"width", "0", "'width'"},
           {"width", "+5", "'width'"},
           {"width", " 5", "'width'"},
           {"height", "5 ", "'height'"},
           {"width", "2147483648", "'width'"},
           {"height", "-1", "'height'"},
           {"rows", "-1:4", "'rows'"},
           {"rows", "1:2:3", "BEGIN:END"},
           {"cols", "a:b", "'cols'"},
           {"leading", "1,,2", "'leading'"},
           {"tensor", std::string("\xc0\xaf"), "UTF-8"},
           {"ref", std::string(16 * 1024 + 1, 'x'), "16384"}}) {
    QueryParams q = base;
    q.erase(name);
    q.insert({name, value});
    EXPECT_THAT(
        HeatmapFromQuery(q).status(),
        AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames(named)))
        << name << "=" << value.substr(0, 20);
  }
}

TEST(HttpQueryTest, NpyFlagsAreZeroOneTrueOrFalse) {
  absl::StatusOr<v1::ReadSliceRequest> r =
      ReadSliceFromQuery({{"checkpoint", "m"},
                          {"tensor", "t"},
                          {"raw", "true"},
                          {"part", "0"},
                          {"slice", "0:4, ::2"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->mode(), v1::OUTPUT_MODE_RAW);
  EXPECT_FALSE(r->part());
  EXPECT_EQ(r->slice(), "0:4, ::2");
  EXPECT_THAT(
      ReadSliceFromQuery({{"checkpoint", "m"}, {"tensor", "t"}, {"raw", "2"}})
          .status(),
      AllOf(HasReason(ErrorReason::kRequestInvalid), MessageNames("'raw'")));
}

}  // namespace
}  // namespace tensormorph
