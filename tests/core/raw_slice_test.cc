// Raw slices: the stored bytes of a selection, and whether they are one run
// of the mapping (which the server then sends without copying).
#include "core/raw_slice.h"

#include <cstring>
#include <numeric>
#include <vector>

#include "core/format/checkpoint.h"
#include "gtest/gtest.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::Bytes;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::WriteFile;

class RawSliceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<int16_t> v(4 * 5 * 6);
    std::iota(v.begin(), v.end(), 0);
    const std::string path = MakeTempDir() + "/m.safetensors";
    WriteFile(path, BuildSafetensors({{"t", "I16", {4, 5, 6}, Bytes(v)}}));
    ckpt_ = *Checkpoint::Open(path);
  }
  RawSliceReader Reader(const std::string& text) {
    const LogicalTensor* t = ckpt_->FindTensor("t");
    auto slice = ResolveSlice(*ParseSlice(text), t->shape);
    return *RawSliceReader::Create(*t, *std::move(slice));
  }
  // The result as values, read through the copying path.
  static std::vector<int16_t> Values(const RawSliceReader& r) {
    std::vector<int16_t> out(static_cast<size_t>(r.slice().num_elements));
    r.ReadInto(0, r.slice().num_elements, reinterpret_cast<char*>(out.data()));
    return out;
  }
  std::shared_ptr<const Checkpoint> ckpt_;
};

TEST_F(RawSliceTest, OneRunOfTheMappingIsOfferedWithoutACopy) {
  // Whole tensor, whole rows of one matrix, a row range, one index then
  // whole rows, and a single row of the last dimension.
  for (const char* text : {"", ":", "1", "1:3", "2, 1:4", "3, 4", "0:1, 2:3"}) {
    SCOPED_TRACE(text);
    const RawSliceReader r = Reader(text);
    const int64_t n = r.slice().num_elements;
    const absl::Span<const uint8_t> run = r.Contiguous(0, n);
    ASSERT_EQ(run.size(), static_cast<size_t>(n) * 2);
    std::vector<int16_t> got(static_cast<size_t>(n));
    std::memcpy(got.data(), run.data(), run.size());
    EXPECT_EQ(got, Values(r)) << "the run holds exactly the copied bytes";
    // Any piece of it is the matching piece of the run.
    if (n >= 3) {
      EXPECT_EQ(r.Contiguous(1, 2).data(), run.data() + 2);
    }
  }
}

TEST_F(RawSliceTest, StridedOrPartialInnerSelectionsAreNotOneRun) {
  for (const char* text :
       {"::2", ":, 1:3", "..., 0:3", ":, :, ::-1", "1:3, 2", "0:2, 0:2"}) {
    SCOPED_TRACE(text);
    EXPECT_TRUE(Reader(text).Contiguous(0, 1).empty());
  }
}

}  // namespace
}  // namespace tensormorph
