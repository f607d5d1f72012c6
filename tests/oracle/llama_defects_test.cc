// Copies of llama.cpp's own files with one defect planted each, judged as
// the defect deserves (issue 29): in blk.0.attn_q.weight of the test model
// quantized by llama.cpp into Q8_0, Q4_0, Q4_K_M and IQ4_NL,
//  (a) one code moved one level away from its source: one element not
//      nearest, beyond the bound, in that group of that tensor alone;
//      check --source reports one error, source-err-steps on that tensor;
//  (b) one group's stored scale times 1.1: elements not nearest, beyond
//      the bound, in that group alone; the same one error;
//  (c) one group's stored scale zeroed: one zeroed group (its error in
//      steps finite), plain check's zero-scale warning counts it, and
//      check --source's source-err-steps names it where the format's
//      quantizer never stores a zero scale (Q8_0, Q4_0, IQ4_NL);
//  (d) the tensor's blocks replaced by blk.0.attn_output.weight's (same
//      type and shape): its SQNR falls below 0 dB, and source-err-steps and
//      source-sqnr are errors.
// The findings point at the planted group, not at a designed clip.
// Every other tensor of each copy stays within its bound. A defect is
// planted at the bytes the independent lister (gguf_listing.h) locates, in
// the block layouts of ggml-common.h; "away from its source" is decided by
// ggml's own to_float of the patched block. "In that group alone" compares
// every group's errors in steps with those of llama.cpp's file.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/check/check.h"
#include "core/check/finding.h"
#include "core/diff/pairing.h"
#include "core/diff/tensor_diff.h"
#include "core/format/checkpoint.h"
#include "gtest/gtest.h"
#include "tests/oracle/gguf_listing.h"
#include "tests/oracle/llama_oracle_support.h"
#include "tests/oracle/llama_quantizer.h"
#include "tests/oracle/llama_test_model.h"
#include "tests/support/quantize.h"
#include "tests/support/test_paths.h"

namespace tensormorph::llama_defects_test {
namespace {

using ::tensormorph::testing::GgufListedTensor;
using ::tensormorph::testing::GgufListing;
using ::tensormorph::testing::LlamaFtype;
using ::tensormorph::testing::LlamaFtypes;
using ::tensormorph::testing::LlamaTestWeight;

constexpr char kTarget[] = "blk.0.attn_q.weight";
constexpr char kDonor[] = "blk.0.attn_output.weight";

double F16ToDouble(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(m | 1024, e - 25);
  return (h & 0x8000) ? -v : v;
}
uint16_t LoadU16(const uint8_t* p) { return p[0] | (p[1] << 8); }
void StoreU16(uint8_t* p, uint16_t v) {
  p[0] = v & 0xff;
  p[1] = v >> 8;
}

// A 4-bit code of a block whose element k < 16 is the low nibble of
// qs[k] and element k + 16 its high nibble (Q4_0, IQ4_NL: qs after d).
int NibbleOf32(const uint8_t* block, int k) {
  const uint8_t b = block[2 + k % 16];
  return k < 16 ? b & 15 : b >> 4;
}
void SetNibbleOf32(uint8_t* block, int k, int c) {
  uint8_t& b = block[2 + k % 16];
  b = k < 16 ? (b & 0xf0) | c : (b & 0x0f) | (c << 4);
}
// Q4_K: d, dmin, 12 bytes of 6-bit scales and mins, then 128 bytes of
// codes: element e of chunk e / 64 is the low nibble of qs[32 (e / 64) +
// e % 32] in its first 32, the high nibble in its last 32.
uint8_t& Q4KByte(uint8_t* block, int e) {
  return block[16 + 32 * (e / 64) + e % 32];
}
int Q4KCode(const uint8_t* block, int e) {
  const uint8_t b = Q4KByte(const_cast<uint8_t*>(block), e);
  return e % 64 < 32 ? b & 15 : b >> 4;
}
void SetQ4KCode(uint8_t* block, int e, int c) {
  uint8_t& b = Q4KByte(block, e);
  b = e % 64 < 32 ? (b & 0xf0) | c : (b & 0x0f) | (c << 4);
}

// What a defect needs to know of a ggml type's block (ggml-common.h).
struct Layout {
  uint32_t type = 0;
  int block_bytes = 0, block_elems = 0;
  int group_elems = 0;  // elements under one stored scale
  int code_min = 0, code_max = 0;
  std::function<int(const uint8_t*, int)> code;
  std::function<void(uint8_t*, int, int)> set_code;
  // The stored scale of group g of the block (f16 d; Q4_K's 6-bit
  // sub-block scale), written back rounded as the format stores it.
  std::function<double(const uint8_t*, int)> scale;
  std::function<void(uint8_t*, int, double)> set_scale;
  // Groups of a block whose scale set_scale can rewrite.
  int writable_groups = 1;
};

double F16Scale(const uint8_t* block, int) {
  return F16ToDouble(LoadU16(block));
}
void SetF16Scale(uint8_t* block, int, double s) {
  StoreU16(block, testing::F32ToF16Bits(static_cast<float>(s)));
}

Layout LayoutOf(const std::string& type) {
  Layout l;
  if (type == "Q8_0") {
    l = {8, 34, 32, 32, -127, 127};
    l.code = [](const uint8_t* b, int k) {
      return static_cast<int>(static_cast<int8_t>(b[2 + k]));
    };
    l.set_code = [](uint8_t* b, int k, int c) {
      b[2 + k] = static_cast<uint8_t>(static_cast<int8_t>(c));
    };
  } else if (type == "Q4_0" || type == "IQ4_NL") {
    l = {type == "Q4_0" ? 2u : 20u, 18, 32, 32, 0, 15};
    l.code = NibbleOf32;
    l.set_code = SetNibbleOf32;
  } else if (type == "Q4_K") {
    l = {12, 144, 256, 32, 0, 15};
    l.code = Q4KCode;
    l.set_code = SetQ4KCode;
    // Sub-blocks 0..3 keep their scale in the low 6 bits of scales[g]
    // (the top 2 bits belong to sub-block g + 4).
    l.scale = [](const uint8_t* b, int g) { return double(b[4 + g] & 63); };
    l.set_scale = [](uint8_t* b, int g, double s) {
      b[4 + g] = (b[4 + g] & 0xc0) | (static_cast<int>(std::lround(s)) & 63);
    };
    l.writable_groups = 4;
    return l;
  } else if (type == "IQ3_S") {
    // d, qs[64], qh[8], signs[32], scales[4]: a "code" here is element k's
    // sign bit (bit k % 8 of signs[k / 8]); its lattice point stays.
    l = {21, 110, 256, 32, 0, 1};
    l.code = [](const uint8_t* b, int k) {
      return (b[74 + k / 8] >> (k % 8)) & 1;
    };
    l.set_code = [](uint8_t* b, int k, int c) {
      b[74 + k / 8] = (b[74 + k / 8] & ~(1 << (k % 8))) | (c << (k % 8));
    };
  }
  l.scale = F16Scale;
  l.set_scale = SetF16Scale;
  return l;
}

struct DefectCase {
  std::string ftype;  // llama.cpp's file type
  std::string type;   // the ggml type of kTarget in it
  // Whether the format's quantizer itself stores zero scales for non-zero
  // groups (RoundingBound::zeroes_groups: K-quants' sub-block scales).
  bool zeroes_groups = false;
  // Whether a zeroed scale leaves the group a non-zero value (Q4_K's
  // sub-block min): constant-group instead of all-zero-group.
  bool min_survives_zero_scale = false;
  friend void PrintTo(const DefectCase& c, std::ostream* os) { *os << c.ftype; }
};

// A group of kTarget: where in the tensor and what its bytes hold.
struct Group {
  int64_t id = -1;     // Tensormorph's group id: first element / group size
  int64_t block = -1;  // the ggml block holding it
  int sub = 0;         // its index among the block's groups
};

struct Judged {
  std::vector<TensorDiff> diffs;
  CheckSummary plain, sourced;
  std::vector<Finding> plain_findings, source_findings;
  const TensorDiff* Diff(const std::string& name) const {
    for (const TensorDiff& d : diffs) {
      if (d.name == name) return &d;
    }
    return nullptr;
  }
};

std::string Describe(const Finding& f) {
  return absl::StrFormat("%s %s on '%s' (count %d, worst group %d): %s",
                         SeverityName(f.severity), f.rule, f.tensor, f.count,
                         f.worst_group, f.actual);
}

std::string Describe(const std::vector<Finding>& findings) {
  std::string out;
  for (const Finding& f : findings) absl::StrAppend(&out, "\n  ", Describe(f));
  return out;
}

// The copy's figures for kTarget, in the test's XML report (--gtest_output).
void RecordFigures(const TensorDiff& d) {
  ::testing::Test::RecordProperty(
      "figures",
      absl::StrFormat("sqnr_db %.2f, max_err_steps %.4g, max_excess_steps "
                      "%.4g, not_nearest %d, clipped %d, zeroed_groups %d",
                      d.sqnr_db, d.max_err_steps, d.max_excess_steps,
                      d.not_nearest, d.clipped, d.zeroed_groups));
}

class LlamaDefectTest : public ::testing::TestWithParam<DefectCase> {
 protected:
  void SetUp() override {
    std::optional<LlamaFtype> ftype;
    for (const LlamaFtype& f : LlamaFtypes()) {
      if (f.name == GetParam().ftype) ftype = f;
    }
    ASSERT_TRUE(ftype.has_value());
    auto files = testing::QuantizeTestModelCached(
        testing::SharedLlamaQuantizer(), *ftype);
    ASSERT_TRUE(files.ok()) << files.status();
    hf_dir_ = files->hf_dir;
    auto listing = testing::ListGguf(files->gguf, &testing::GgmlRowBytes);
    ASSERT_TRUE(listing.ok()) << listing.status();
    listing_ = *std::move(listing);
    layout_ = LayoutOf(GetParam().type);
    for (const GgufListedTensor& t : listing_.tensors) {
      if (t.name == kTarget) target_ = &t;
      if (t.name == kDonor) donor_ = &t;
    }
    ASSERT_NE(target_, nullptr);
    ASSERT_NE(donor_, nullptr);
    ASSERT_EQ(target_->type, layout_.type);
    ASSERT_EQ(donor_->type, layout_.type);
    ASSERT_EQ(target_->nbytes, donor_->nbytes);
    for (const LlamaTestWeight& w : testing::LlamaTestWeights()) {
      if (w.gguf_name == kTarget) source_ = testing::SourceInGgufOrder(w);
    }
    ASSERT_EQ(static_cast<int64_t>(source_.size()),
              static_cast<int64_t>(target_->nbytes) / layout_.block_bytes *
                  layout_.block_elems);
    // Judged once per file: its copies' tests compare against it.
    static auto* judged = new std::map<std::string, Judged>();
    if (!judged->contains(GetParam().ftype)) {
      (*judged)[GetParam().ftype] = JudgeCopy();
    }
    original_ = judged->at(GetParam().ftype);
    const TensorDiff* d = original_.Diff(kTarget);
    ASSERT_NE(d, nullptr);
    ASSERT_EQ(d->max_excess_steps, 0);
    if (d->nearest_codes) {
      ASSERT_EQ(d->not_nearest, 0);
    }
    ASSERT_EQ(d->zeroed_groups, 0);
    ASSERT_EQ(original_.sourced.errors, 0);
  }

  uint8_t* BlockOf(std::string& bytes, int64_t block) const {
    return reinterpret_cast<uint8_t*>(bytes.data()) + target_->offset +
           block * layout_.block_bytes;
  }
  const uint8_t* BlockOf(int64_t block) const {
    return reinterpret_cast<const uint8_t*>(listing_.bytes.data()) +
           target_->offset + block * layout_.block_bytes;
  }
  // ggml's to_float of one block.
  std::vector<float> Decode(const uint8_t* block) const {
    return testing::GgmlValues(layout_.type,
                               {block, size_t(layout_.block_bytes)});
  }

  // The first group from the middle of the tensor on whose source is not
  // all zero (the planted zero rows) and whose scale a tenth more changes
  // (a Q4_K 6-bit scale of 10..57).
  Group PickGroup() const {
    const int per_block = layout_.block_elems / layout_.group_elems;
    for (int64_t first = int64_t(source_.size()) / 2;
         first < int64_t(source_.size()); first += layout_.group_elems) {
      Group g;
      g.id = first / layout_.group_elems;
      g.block = first / layout_.block_elems;
      g.sub = static_cast<int>(g.id % per_block);
      if (g.sub >= layout_.writable_groups) continue;
      bool nonzero = false;
      for (int k = 0; k < layout_.group_elems; ++k) {
        nonzero |= source_[first + k] != 0;
      }
      const double s = layout_.scale(BlockOf(g.block), g.sub);
      if (!nonzero || s == 0) continue;
      if (layout_.writable_groups > 1 && (s < 10 || s > 57)) continue;
      return g;
    }
    ADD_FAILURE() << "no group to plant a defect in";
    return {};
  }

  // The element of group `g` furthest from its source (but well inside
  // its range) and the code one level further away from it, so that its
  // error grows by the whole move (by ggml's to_float of the moved block).
  struct Move {
    int k = -1;  // in the block
    int code = 0;
  };
  Move CodeMovedAway(const Group& g) const {
    const uint8_t* block = BlockOf(g.block);
    const std::vector<float> decoded = Decode(block);
    const int base = g.sub * layout_.group_elems;
    const double* x = source_.data() + g.block * layout_.block_elems;
    double amax = 0;
    for (int k = base; k < base + layout_.group_elems; ++k) {
      amax = std::max(amax, std::fabs(x[k]));
    }
    Move best;
    double best_err = -1;
    for (int k = base; k < base + layout_.group_elems; ++k) {
      const int c = layout_.code(block, k);
      if (std::fabs(x[k]) > amax / 2) continue;
      for (const int to : {c - 1, c + 1}) {
        if (to < layout_.code_min || to > layout_.code_max) continue;
        std::vector<uint8_t> moved(block, block + layout_.block_bytes);
        layout_.set_code(moved.data(), k, to);
        const double h = decoded[k], h2 = Decode(moved.data())[k];
        if (h2 == h) continue;
        if (std::fabs(x[k] - h2) <
            std::fabs(x[k] - h) + 0.99 * std::fabs(h2 - h)) {
          continue;
        }
        if (std::fabs(x[k] - h) > best_err) {
          best_err = std::fabs(x[k] - h);
          best = {k, to};
        }
      }
    }
    return best;
  }

  // Writes listing's file with `patch` applied to a copy of its bytes into
  // a fresh directory, and judges it: every tensor diffed against the HF
  // source, plain check and check --source.
  Judged JudgeCopy(const std::function<void(std::string&)>& patch =
                       [](std::string&) {}) const {
    std::string bytes = listing_.bytes;
    patch(bytes);
    const std::string path = testing::MakeTempDir() + "/planted.gguf";
    {
      std::ofstream out(path, std::ios::binary);
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      EXPECT_TRUE(out.good());
    }
    Judged j;
    auto quant = Checkpoint::Open(path);
    auto source = Checkpoint::Open(hf_dir_);
    EXPECT_TRUE(quant.ok()) << quant.status();
    EXPECT_TRUE(source.ok()) << source.status();
    if (!quant.ok() || !source.ok()) return j;
    auto pairing = PairTensors(**quant, **source);
    EXPECT_TRUE(pairing.ok()) << pairing.status();
    if (!pairing.ok()) return j;
    DiffWorkspace workspace;
    DiffOptions every_group;  // so that a defect's group can be told apart
    every_group.worst_groups = 1 << 16;
    for (const TensorPair& p : pairing->pairs) {
      auto d = DiffTensor(*p.quant, *p.ref, every_group, p.row_map, nullptr, {},
                          &workspace);
      EXPECT_TRUE(d.ok()) << d.status();
      if (d.ok()) j.diffs.push_back(*std::move(d));
    }
    for (const bool with_source : {false, true}) {
      CheckOptions options;
      if (with_source) options.source = source->get();
      std::vector<Finding>& found =
          with_source ? j.source_findings : j.plain_findings;
      auto summary =
          CheckCheckpoint(**quant, options, nullptr, {},
                          [&](const Finding& f) { found.push_back(f); });
      EXPECT_TRUE(summary.ok()) << summary.status();
      if (summary.ok()) (with_source ? j.sourced : j.plain) = *summary;
    }
    return j;
  }

  // Every tensor but kTarget within its bound, as in llama.cpp's own file.
  static void ExpectOthersWithinBound(const Judged& j) {
    EXPECT_EQ(j.diffs.size(), testing::LlamaTestWeights().size());
    for (const TensorDiff& d : j.diffs) {
      if (d.name == kTarget) continue;
      EXPECT_EQ(d.max_excess_steps, 0) << d.name;
    }
  }

  // The groups of kTarget whose errors in steps (count, mean, maximum)
  // differ between llama.cpp's file and the copy.
  std::vector<int64_t> ChangedGroups(const Judged& copy) const {
    const TensorDiff* before = original_.Diff(kTarget);
    const TensorDiff* after = copy.Diff(kTarget);
    EXPECT_NE(before, nullptr);
    EXPECT_NE(after, nullptr);
    if (before == nullptr || after == nullptr) return {};
    EXPECT_TRUE(before->groups_tracked && after->groups_tracked);
    std::map<int64_t, std::tuple<int64_t, double, double>> was, is;
    for (const WorstGroup& g : before->worst_groups) {
      was[g.group] = {g.count, g.mean_err_steps, g.max_err_steps};
    }
    for (const WorstGroup& g : after->worst_groups) {
      is[g.group] = {g.count, g.mean_err_steps, g.max_err_steps};
    }
    std::vector<int64_t> changed;
    for (const auto& [id, v] : is) {
      if (!was.contains(id) || was.at(id) != v) changed.push_back(id);
    }
    for (const auto& [id, v] : was) {
      if (!is.contains(id)) changed.push_back(id);
    }
    return changed;
  }

  // check --source's errors on the copy: exactly one, source-err-steps on
  // kTarget (llama.cpp's own file has none); returns it.
  // The error findings of check --source: exactly `rules`, each on
  // kTarget; returns the one of `rules[0]`.
  static const Finding* ExpectErrors(const Judged& j,
                                     const std::vector<std::string>& rules) {
    std::vector<std::string> got;
    const Finding* first = nullptr;
    for (const Finding& f : j.source_findings) {
      if (f.severity != Severity::kError) continue;
      got.push_back(f.rule);
      EXPECT_EQ(f.tensor, kTarget) << f.rule;
      if (f.rule == rules[0]) first = &f;
    }
    std::vector<std::string> want = rules;
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(got, want);
    EXPECT_EQ(j.sourced.errors, static_cast<int64_t>(got.size()));
    EXPECT_TRUE(j.sourced.failed);
    return first;
  }
  static const Finding* ExpectOneErrSteps(const Judged& j) {
    return ExpectErrors(j, {"source-err-steps"});
  }

  // The finding of `rule` on kTarget, or null.
  static const Finding* On(const std::vector<Finding>& findings,
                           const std::string& rule) {
    for (const Finding& f : findings) {
      if (f.rule == rule && f.tensor == kTarget) return &f;
    }
    return nullptr;
  }

  std::string hf_dir_;
  GgufListing listing_;
  Layout layout_;
  const GgufListedTensor* target_ = nullptr;
  const GgufListedTensor* donor_ = nullptr;
  std::vector<double> source_;
  Judged original_;  // llama.cpp's file itself, judged the same way
};

TEST_P(LlamaDefectTest, CodeOffByOneLevelIsNotNearestThere) {
  const Group g = PickGroup();
  ASSERT_GE(g.id, 0);
  const Move move = CodeMovedAway(g);
  ASSERT_GE(move.k, 0);
  const Judged j = JudgeCopy([&](std::string& bytes) {
    layout_.set_code(BlockOf(bytes, g.block), move.k, move.code);
  });
  SCOPED_TRACE(Describe(j.source_findings));
  const TensorDiff* d = j.Diff(kTarget);
  ASSERT_NE(d, nullptr);
  RecordFigures(*d);
  EXPECT_EQ(d->not_nearest, 1);
  EXPECT_GT(d->max_excess_steps, 0);
  EXPECT_EQ(ChangedGroups(j), std::vector<int64_t>{g.id});
  ExpectOthersWithinBound(j);
  EXPECT_EQ(j.plain.errors, 0) << Describe(j.plain_findings);
  // The finding points at the element beyond its bound, not at a designed
  // clip that errs more.
  const Finding* f = ExpectOneErrSteps(j);
  if (f != nullptr) {
    EXPECT_EQ(f->worst_group, g.id);
  }
}

TEST_P(LlamaDefectTest, GroupScaleTimesOnePointOneIsBeyondTheBoundThere) {
  const Group g = PickGroup();
  ASSERT_GE(g.id, 0);
  const double s = layout_.scale(BlockOf(g.block), g.sub);
  const Judged j = JudgeCopy([&](std::string& bytes) {
    layout_.set_scale(BlockOf(bytes, g.block), g.sub, s * 1.1);
  });
  SCOPED_TRACE(Describe(j.source_findings));
  const TensorDiff* d = j.Diff(kTarget);
  ASSERT_NE(d, nullptr);
  RecordFigures(*d);
  EXPECT_GT(d->not_nearest, 0);
  EXPECT_GT(d->max_excess_steps, 0);
  EXPECT_EQ(ChangedGroups(j), std::vector<int64_t>{g.id});
  ExpectOthersWithinBound(j);
  EXPECT_EQ(j.plain.errors, 0) << Describe(j.plain_findings);
  // The finding points at the element beyond its bound, not at a designed
  // clip that errs more.
  const Finding* f = ExpectOneErrSteps(j);
  if (f != nullptr) {
    EXPECT_EQ(f->worst_group, g.id);
  }
}

// A zeroed group is out of every metric in steps (its error in steps reads
// 0, never inf) and counted as such; plain check reports the zero scale
// beside the groups llama.cpp itself writes with d = 0 (the planted zero
// rows, whose source is all zero).
TEST_P(LlamaDefectTest, GroupScaleZeroedIsOneZeroedGroup) {
  const Group g = PickGroup();
  ASSERT_GE(g.id, 0);
  const Judged j = JudgeCopy([&](std::string& bytes) {
    layout_.set_scale(BlockOf(bytes, g.block), g.sub, 0);
  });
  SCOPED_TRACE(absl::StrCat("plain:", Describe(j.plain_findings),
                            "\nsource:", Describe(j.source_findings)));
  const TensorDiff* before = original_.Diff(kTarget);
  const TensorDiff* d = j.Diff(kTarget);
  ASSERT_NE(d, nullptr);
  RecordFigures(*d);
  EXPECT_EQ(d->zeroed_groups, 1);
  EXPECT_EQ(d->zeroed_elements, before->zeroed_elements + layout_.group_elems);
  EXPECT_TRUE(std::isfinite(d->max_err_steps));
  EXPECT_EQ(d->max_excess_steps, 0);
  EXPECT_EQ(ChangedGroups(j), std::vector<int64_t>{g.id});
  ExpectOthersWithinBound(j);

  EXPECT_EQ(j.plain.errors, 0);
  const Finding* zero = On(j.plain_findings, "zero-scale");
  const Finding* zero_before = On(original_.plain_findings, "zero-scale");
  ASSERT_NE(zero, nullptr);
  EXPECT_EQ(zero->severity, Severity::kWarning);
  EXPECT_EQ(zero->count, (zero_before ? zero_before->count : 0) + 1);
  if (GetParam().min_survives_zero_scale) {
    const Finding* constant = On(j.plain_findings, "constant-group");
    ASSERT_NE(constant, nullptr);
    EXPECT_EQ(On(original_.plain_findings, "constant-group"), nullptr);
    EXPECT_EQ(constant->severity, Severity::kWarning);
    EXPECT_EQ(constant->count, 1);
    EXPECT_EQ(constant->worst_group, g.id);
  } else {
    const Finding* all_zero = On(j.plain_findings, "all-zero-group");
    const Finding* all_zero_before =
        On(original_.plain_findings, "all-zero-group");
    ASSERT_NE(all_zero, nullptr);
    EXPECT_EQ(all_zero->count,
              (all_zero_before ? all_zero_before->count : 0) + 1);
  }
  // check --source: a zero scale for a non-zero group is an error where
  // the format's quantizer never stores one, pointing at that group; where
  // it does (K-quants' sub-block scales), it is the format's own doing.
  if (GetParam().zeroes_groups) {
    EXPECT_EQ(j.sourced.errors, 0) << Describe(j.source_findings);
  } else {
    const Finding* f = ExpectOneErrSteps(j);
    if (f != nullptr) {
      EXPECT_EQ(f->worst_group, g.id);
    }
  }
}

TEST_P(LlamaDefectTest, CodesOfAnotherTensorCollapseItsSqnr) {
  const Judged j = JudgeCopy([&](std::string& bytes) {
    std::memcpy(bytes.data() + target_->offset,
                listing_.bytes.data() + donor_->offset, target_->nbytes);
  });
  SCOPED_TRACE(Describe(j.source_findings));
  const TensorDiff* before = original_.Diff(kTarget);
  const TensorDiff* d = j.Diff(kTarget);
  ASSERT_NE(d, nullptr);
  RecordFigures(*d);
  EXPECT_GT(before->sqnr_db, 10);
  EXPECT_LT(d->sqnr_db, 0);  // more error than signal
  EXPECT_GT(d->max_excess_steps, 0);
  ExpectOthersWithinBound(j);
  // Below 0 dB (worse than zeros) source-sqnr is an error too.
  ExpectErrors(j, {"source-err-steps", "source-sqnr"});
  EXPECT_EQ(On(original_.source_findings, "source-sqnr"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(
    LlamaFiles, LlamaDefectTest,
    ::testing::Values(DefectCase{.ftype = "Q8_0", .type = "Q8_0"},
                      DefectCase{.ftype = "Q4_0", .type = "Q4_0"},
                      DefectCase{.ftype = "Q4_K_M",
                                 .type = "Q4_K",
                                 .zeroes_groups = true,
                                 .min_survives_zero_scale = true},
                      DefectCase{.ftype = "IQ4_NL", .type = "IQ4_NL"}),
    [](const ::testing::TestParamInfo<DefectCase>& info) {
      return info.param.ftype;
    });

// A type whose quantizer chooses codes by a grid search (IQ3_S): what lies
// beyond the bound inside the range is information (source-err-steps at
// info, as on llama.cpp's own file), so a flipped sign is no error; another
// tensor's codes are, by SQNR below 0 dB (worse than zeros).
using LlamaChosenCodeDefectTest = LlamaDefectTest;

TEST_P(LlamaChosenCodeDefectTest, SignFlippedIsInformation) {
  const Group g = PickGroup();
  ASSERT_GE(g.id, 0);
  const Move move = CodeMovedAway(g);
  ASSERT_GE(move.k, 0);
  const Judged j = JudgeCopy([&](std::string& bytes) {
    layout_.set_code(BlockOf(bytes, g.block), move.k, move.code);
  });
  SCOPED_TRACE(Describe(j.source_findings));
  const TensorDiff* before = original_.Diff(kTarget);
  const TensorDiff* d = j.Diff(kTarget);
  ASSERT_NE(d, nullptr);
  RecordFigures(*d);
  EXPECT_FALSE(d->nearest_codes);
  EXPECT_EQ(d->not_nearest, before->not_nearest + 1);
  EXPECT_EQ(d->max_excess_steps, 0);
  EXPECT_EQ(ChangedGroups(j), std::vector<int64_t>{g.id});
  ExpectOthersWithinBound(j);
  EXPECT_EQ(j.sourced.errors, 0);
  const Finding* f = On(j.source_findings, "source-err-steps");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::kInfo);
  ASSERT_NE(On(original_.source_findings, "source-err-steps"), nullptr);
  EXPECT_EQ(On(original_.source_findings, "source-err-steps")->severity,
            Severity::kInfo);
}

TEST_P(LlamaChosenCodeDefectTest, CodesOfAnotherTensorAreAnSqnrError) {
  const Judged j = JudgeCopy([&](std::string& bytes) {
    std::memcpy(bytes.data() + target_->offset,
                listing_.bytes.data() + donor_->offset, target_->nbytes);
  });
  SCOPED_TRACE(Describe(j.source_findings));
  const TensorDiff* before = original_.Diff(kTarget);
  const TensorDiff* d = j.Diff(kTarget);
  ASSERT_NE(d, nullptr);
  RecordFigures(*d);
  EXPECT_GT(before->sqnr_db, 5);
  EXPECT_LT(d->sqnr_db, 0);
  EXPECT_EQ(d->max_excess_steps, 0);
  ExpectOthersWithinBound(j);
  ExpectErrors(j, {"source-sqnr"});
  EXPECT_EQ(On(original_.source_findings, "source-sqnr"), nullptr);
  const Finding* f = On(j.source_findings, "source-err-steps");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, Severity::kInfo);
}

INSTANTIATE_TEST_SUITE_P(LlamaFiles, LlamaChosenCodeDefectTest,
                         ::testing::Values(DefectCase{.ftype = "IQ3_S",
                                                      .type = "IQ3_S",
                                                      .zeroes_groups = true}),
                         [](const ::testing::TestParamInfo<DefectCase>& info) {
                           return info.param.ftype;
                         });

}  // namespace
}  // namespace tensormorph::llama_defects_test
