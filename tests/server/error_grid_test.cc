// Error heatmaps' grids kept by the server: the first look at a tensor's
// error heatmap keeps every element's error, and its zooms and pans reduce
// their cells from it (no decode), with the bits a decode gives; a file of
// either side that changes drops the grid; a region asked first keeps
// nothing, but for plain floats, whose first look is the cheaper pass and
// whose first zoom makes the grid; --error-grids-bytes 0 keeps nothing. Through
// a real server on loopback, counted by the store the /metrics families read.
#include <fcntl.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "client/client.h"
#include "core/format/checkpoint.h"
#include "core/heatmap.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/support/loopback_server.h"
#include "tests/support/sharded_diff_checkpoint.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::LoopbackServer;
using ::tensormorph::testing::ShardedDiffCheckpoint;
using ::tensormorph::testing::StartLoopbackServer;

// An int8 down projection (64 x 128) against its BF16 source, in shards 1
// and 0 of the two checkpoints.
constexpr char kTensor[] = "model.layers.0.mlp.down_proj.weight";

class ErrorGridTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ckpt_ = ::tensormorph::testing::WriteShardedDiffCheckpoint();
    server_ = StartLoopbackServer({ckpt_.root}, 2);
  }

  v1::GetHeatmapRequest Request(int64_t row_begin = 0, int64_t row_end = 0,
                                int64_t col_begin = 0,
                                int64_t col_end = 0) const {
    v1::GetHeatmapRequest req;
    req.set_checkpoint(ckpt_.quant);
    req.set_tensor(kTensor);
    req.set_reference(ckpt_.reference);
    req.set_mode(v1::HEATMAP_MODE_ERROR);
    req.set_width(9);
    req.set_height(5);
    req.set_row_begin(row_begin);
    req.set_row_end(row_end);
    req.set_col_begin(col_begin);
    req.set_col_end(col_end);
    return req;
  }

  v1::GetHeatmapResponse Heatmap(const v1::GetHeatmapRequest& req) {
    auto h = server_.client->GetHeatmap(req);
    EXPECT_TRUE(h.ok()) << h.status();
    return h.ok() ? *h : v1::GetHeatmapResponse();
  }

  // The same region decoded by the core, with no grid.
  std::vector<double> Decoded(const v1::GetHeatmapRequest& req) const {
    auto q = Checkpoint::Open(ckpt_.root + "/" + ckpt_.quant);
    auto s = Checkpoint::Open(ckpt_.root + "/" + ckpt_.reference);
    EXPECT_TRUE(q.ok() && s.ok());
    if (!q.ok() || !s.ok()) return {};
    HeatmapOptions o;
    o.mode = HeatmapMode::kErrorSteps;
    o.width = req.width();
    o.height = req.height();
    o.row_begin = req.row_begin();
    o.row_end = req.row_end();
    o.col_begin = req.col_begin();
    o.col_end = req.col_end();
    auto h = ComputeHeatmap(*(*q)->FindTensor(kTensor),
                            (*s)->FindTensor(kTensor), o);
    EXPECT_TRUE(h.ok()) << h.status();
    return h.ok() ? h->values : std::vector<double>();
  }

  KeptResults<ErrorGrid>& grids() {
    return server_.server->state().error_grids;
  }

  ShardedDiffCheckpoint ckpt_;
  LoopbackServer server_;
};

TEST_F(ErrorGridTest, ZoomsAndPansAfterTheFirstLookReduceFromItsGrid) {
  const v1::GetHeatmapResponse whole = Heatmap(Request());
  EXPECT_EQ(grids().size(), 1u);
  EXPECT_EQ(grids().bytes(), 64 * 128 * 8);  // int8: doubles
  EXPECT_EQ(grids().hits(), 0);
  for (const v1::GetHeatmapRequest& zoom :
       {Request(3, 40, 17, 90), Request(4, 41, 18, 91), Request()}) {
    const v1::GetHeatmapResponse h = Heatmap(zoom);
    EXPECT_EQ(std::vector<double>(h.values().begin(), h.values().end()),
              Decoded(zoom));
  }
  EXPECT_EQ(grids().hits(), 3);
  // A located cell is the grid's too, and names the element of its value.
  v1::GetHeatmapRequest one = Request(3, 40, 17, 90);
  one.set_width(1);
  one.set_height(1);
  one.set_locate(true);
  const v1::GetHeatmapResponse located = Heatmap(one);
  ASSERT_EQ(located.cell_element_size(), 1);
  EXPECT_EQ(grids().hits(), 4);
  const int64_t at = located.cell_element(0);
  EXPECT_GE(at / 128, 3);
  EXPECT_LT(at / 128, 40);
  EXPECT_GE(at % 128, 17);
  EXPECT_LT(at % 128, 90);
}

// A new mtime on the source's shard: the grid no longer describes those
// bytes, so the next look decodes (and keeps a new grid).
TEST_F(ErrorGridTest, AChangedFileOfEitherSideDropsTheGrid) {
  Heatmap(Request());
  ASSERT_EQ(grids().size(), 1u);
  const std::string shard =
      ckpt_.root + "/source/model-00001-of-00002.safetensors";
  struct timespec times[2] = {{0, UTIME_OMIT}, {1'000'000'000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, shard.c_str(), times, 0), 0);
  const v1::GetHeatmapRequest zoom = Request(3, 40, 17, 90);
  const v1::GetHeatmapResponse h = Heatmap(zoom);
  EXPECT_EQ(std::vector<double>(h.values().begin(), h.values().end()),
            Decoded(zoom));
  EXPECT_EQ(grids().hits(), 0);
  EXPECT_EQ(grids().size(), 0u);  // dropped; a region keeps none
  Heatmap(Request());
  EXPECT_EQ(grids().size(), 1u);
}

// A BF16 tensor's first look is the cheaper direct pass; its first zoom
// makes the grid the next ones reduce from.
TEST_F(ErrorGridTest, APlainFloatsGridWaitsForItsFirstZoom) {
  v1::GetHeatmapRequest req = Request();
  req.set_tensor("model.embed_tokens.weight");
  Heatmap(req);
  EXPECT_EQ(grids().size(), 0u);
  req.set_row_begin(2);
  req.set_row_end(30);
  Heatmap(req);
  EXPECT_EQ(grids().size(), 1u);
  EXPECT_EQ(grids().hits(), 0);
  req.set_row_begin(3);
  Heatmap(req);
  EXPECT_EQ(grids().hits(), 1);
}

TEST_F(ErrorGridTest, ARegionAskedFirstDecodesOnlyItselfAndKeepsNothing) {
  Heatmap(Request(3, 40, 17, 90));
  EXPECT_EQ(grids().size(), 0u);
  // Other modes never make one.
  v1::GetHeatmapRequest absmax = Request();
  absmax.set_mode(v1::HEATMAP_MODE_ABSMAX);
  Heatmap(absmax);
  EXPECT_EQ(grids().size(), 0u);
}

TEST(ErrorGridBudgetTest, ABudgetOfZeroKeepsNoGrid) {
  ServiceLimits limits;
  limits.error_grids_bytes = 0;
  auto sandbox = PathSandbox::Create({::testing::TempDir()});
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  ServiceState state(*std::move(sandbox), 1, 1, limits);
  EXPECT_FALSE(state.error_grids.Fits(0));
  limits.error_grids_bytes = 100;
  ServiceState some(*PathSandbox::Create({::testing::TempDir()}), 1, 1, limits);
  EXPECT_TRUE(some.error_grids.Fits(100));
  EXPECT_FALSE(some.error_grids.Fits(101));
}

}  // namespace
}  // namespace tensormorph
