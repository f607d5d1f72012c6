// llama.cpp's quantizer given an importance matrix (TestModelImatrix, as
// llama-quantize hands it to llama_model_quantize) and the same matrix
// written as an imatrix file in both of llama-imatrix's forms: Tensormorph
// reads from each file the very weights llama.cpp was given, every tensor
// of llama.cpp's output that the matrix covers is weighted by it, and the
// weighted error the diff reports is llama.cpp's objective computed here,
// in long double, from ggml's own to_float.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "core/diff/tensor_diff.h"
#include "core/format/checkpoint.h"
#include "core/imatrix/importance_matrix.h"
#include "tests/oracle/llama_oracle_support.h"
#include "tests/oracle/llama_quantizer.h"
#include "tests/support/safetensors_writer.h"

namespace tensormorph {
namespace {

using testing::Imatrix;

const testing::LlamaFtype& Q2KS() {
  for (const testing::LlamaFtype& f : testing::LlamaFtypes()) {
    if (f.name == "Q2_K_S") return f;
  }
  std::abort();
}

TEST(LlamaImatrixTest, WeightsAreLlamasAndTheWeightedErrorIsItsObjective) {
  const Imatrix given = testing::TestModelImatrix();
  auto q =
      testing::QuantizeTestModelCached(testing::SharedLlamaQuantizer(), Q2KS());
  ASSERT_TRUE(q.ok()) << q.status();
  auto quant = Checkpoint::Open(q->gguf);
  auto ref = Checkpoint::Open(q->f32_gguf);
  ASSERT_TRUE(quant.ok() && ref.ok());
  const std::string dir = ::testing::TempDir() + "/llama_imatrix";
  std::filesystem::create_directories(dir);
  testing::WriteFile(dir + "/imatrix.gguf", testing::GgufImatrixFile(given));
  testing::WriteFile(dir + "/imatrix.dat", testing::LegacyImatrixFile(given));
  for (const char* file : {"imatrix.gguf", "imatrix.dat"}) {
    SCOPED_TRACE(file);
    auto m = ImportanceMatrix::Open(dir + "/" + file, *FileAccess::Anywhere());
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_EQ((*m)->entries().size(), given.size());
    DiffOptions o;
    o.imatrix = *m;
    int weighted = 0;
    for (const auto& [name, w] : given) {
      SCOPED_TRACE(name);
      const ImatrixEntry* e = (*m)->Find(name);
      ASSERT_NE(e, nullptr);
      EXPECT_EQ(e->weights, w);  // what llama_model_quantize was given
      const LogicalTensor* qt = (*quant)->FindTensor(name);
      const LogicalTensor* rt = (*ref)->FindTensor(name);
      ASSERT_TRUE(qt != nullptr && rt != nullptr);
      auto d = DiffTensor(*qt, *rt, o);
      ASSERT_TRUE(d.ok()) << d.status();
      ASSERT_EQ(d->imatrix_use, ImatrixUse::kWeighted) << d->imatrix_note;
      // The objective from ggml's reading of both files' bytes.
      const StoredTensor* qs = (*quant)->FindStored(name);
      const StoredTensor* rs = (*ref)->FindStored(name);
      const std::vector<float> xq =
          testing::GgmlValues(qs->ggml_type_id, qs->data);
      const std::vector<float> x =
          testing::GgmlValues(rs->ggml_type_id, rs->data);
      ASSERT_EQ(x.size(), xq.size());
      long double se = 0, xx = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const long double wi = w[i % w.size()];
        const long double err = (long double)x[i] - xq[i];
        se += wi * err * err;
        xx += wi * (long double)x[i] * x[i];
      }
      EXPECT_NEAR(d->weighted.sum_w_sq_err, (double)se, 1e-12 * (double)se);
      EXPECT_NEAR(d->weighted.sum_w_xx, (double)xx, 1e-12 * (double)xx);
      ++weighted;
    }
    EXPECT_GT(weighted, 10);
  }
}

}  // namespace
}  // namespace tensormorph
