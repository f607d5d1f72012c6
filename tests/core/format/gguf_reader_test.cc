// One test per GGUF validation rule, including the published attack
// classes: a valid file with exactly one field broken is refused with
// DATA_LOSS HEADER_INVALID whose metadata names the rule (header_rule.h), the
// key or tensor, and expected vs actual where the rule compares two numbers.
#include "core/format/gguf_reader.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/format/checkpoint.h"
#include "core/quant/encoding.h"
#include "core/quant/scalar_info.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph::gguf_reader_test {
namespace {

using ::tensormorph::testing::BuildGguf;
using ::tensormorph::testing::GgufArray;
using ::tensormorph::testing::GgufLayout;
using ::tensormorph::testing::GgufSpec;
using ::tensormorph::testing::GgufString;
using ::tensormorph::testing::GgufU32;
using ::tensormorph::testing::GgufU64;
using ::tensormorph::testing::GgufValueBytes;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr uint32_t kF32 = 0, kQ8_0 = 8;

// A valid file: an F32 [2, 8] tensor and a Q8_0 [2, 32] tensor.
GgufSpec ValidSpec() {
  GgufSpec s;
  s.kv.push_back({"general.architecture", GgufString("llama")});
  s.kv.push_back({"general.name", GgufString("test")});
  s.tensors.push_back({"a", {8, 2}, kF32, std::string(64, '\0')});
  s.tensors.push_back({"b", {32, 2}, kQ8_0, std::string(68, '\0')});
  return s;
}

absl::Status OpenBytes(const std::string& bytes) {
  const std::string path = MakeTempDir() + "/model.gguf";
  WriteFile(path, bytes);
  return Checkpoint::Open(path).status();
}
absl::Status OpenSpec(const GgufSpec& spec) {
  return OpenBytes(BuildGguf(spec));
}

// HEADER_INVALID; the matchers, on the status, say which rule it broke
// (HasMetadata("rule", ...)) and which key or tensor.
#define EXPECT_DATA_LOSS(status, ...) \
  EXPECT_THAT((status),               \
              AllOf(HasReason(ErrorReason::kHeaderInvalid), __VA_ARGS__))

TEST(GgufReaderTest, OpensAValidFileWithDimensionsReversed) {
  const std::string path = MakeTempDir() + "/ok.gguf";
  WriteFile(path, BuildGguf(ValidSpec()));
  auto ckpt = Checkpoint::Open(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->format(), CheckpointFormat::kGguf);
  const StoredTensor* b = (*ckpt)->FindStored("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(b->dtype, DType::kQ8_0);
  EXPECT_EQ(b->nbytes, 68u);
  EXPECT_EQ(b->offset % 32, 0u);
  ASSERT_EQ((*ckpt)->metadata().size(), 2u);
  EXPECT_EQ((*ckpt)->metadata()[0].value, "\"llama\"");
}

TEST(GgufReaderTest, HonoursACustomAlignment) {
  GgufSpec spec = ValidSpec();
  spec.kv.push_back({"general.alignment", GgufU32(64)});
  spec.alignment = 64;
  EXPECT_TRUE(OpenSpec(spec).ok());
}

TEST(GgufReaderTest, RejectsBadMagic) {
  GgufSpec spec = ValidSpec();
  spec.magic = "GGUX";
  // A file named .gguf is held to GGUF's rules: its magic is the rule it
  // breaks, not safetensors' header-limit.
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "magic"));
  std::string bytes = BuildGguf(spec);
  auto g = ParseGguf(
      {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "m");
  EXPECT_DATA_LOSS(g.status(), HasMetadata("rule", "magic"),
                   HasMetadata("file", "m"));
}

TEST(GgufReaderTest, Version1AndFutureVersionsAreUnimplemented) {
  for (uint32_t v : {1u, 4u}) {
    GgufSpec spec = ValidSpec();
    spec.version = v;
    const absl::Status s = OpenSpec(spec);
    EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kUnimplemented),
                         MessageNames("version " + std::to_string(v))));
  }
}

TEST(GgufReaderTest, Version2Opens) {
  GgufSpec spec = ValidSpec();
  spec.version = 2;
  EXPECT_TRUE(OpenSpec(spec).ok());
}

TEST(GgufReaderTest, HintsAtByteSwappedVersion) {
  GgufSpec spec = ValidSpec();
  spec.version = 0x03000000;
  // The message is the hint a person needs: the file is big-endian.
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "byte-order"),
                   MessageNames("big-endian"));
}

TEST(GgufReaderTest, RejectsTensorCountNear2To64) {
  GgufSpec spec = ValidSpec();
  spec.tensor_count = std::numeric_limits<uint64_t>::max();
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "tensor-count"));
}

TEST(GgufReaderTest, RejectsKeyCountNear2To64) {
  GgufSpec spec = ValidSpec();
  spec.kv_count = std::numeric_limits<uint64_t>::max() - 1;
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "kv-count"));
}

TEST(GgufReaderTest, RejectsStringLengthNear2To64) {
  GgufSpec spec = ValidSpec();
  GgufValueBytes v = GgufString("x");
  const uint64_t huge = std::numeric_limits<uint64_t>::max() - 7;
  v.payload.replace(0, 8, reinterpret_cast<const char*>(&huge), 8);
  spec.kv.push_back({"evil", v});
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "string-length"));
}

TEST(GgufReaderTest, RejectsArrayLengthNear2To64AndPastTheEnd) {
  for (uint64_t n : {std::numeric_limits<uint64_t>::max(), uint64_t{1000000}}) {
    GgufSpec spec = ValidSpec();
    GgufValueBytes v = GgufArray(4, {GgufU32(1)});
    v.payload.replace(4, 8, reinterpret_cast<const char*>(&n), 8);
    spec.kv.push_back({"evil", v});
    EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "array-length"),
                     HasMetadata("key", "evil"));
  }
}

TEST(GgufReaderTest, RejectsEmptyKey) {
  GgufSpec spec = ValidSpec();
  spec.kv.push_back({"", GgufU32(1)});
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "key-empty"));
}

TEST(GgufReaderTest, RejectsDuplicateKey) {
  GgufSpec spec = ValidSpec();
  spec.kv.push_back({"general.name", GgufString("again")});
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "duplicate-key"),
                   HasMetadata("key", "general.name"));
}

TEST(GgufReaderTest, RejectsUnknownValueType) {
  GgufSpec spec = ValidSpec();
  spec.kv.push_back({"odd", {13, "x"}});
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "value-type"),
                   HasMetadata("key", "odd"));
}

TEST(GgufReaderTest, RejectsUnknownArrayElementType) {
  GgufSpec spec = ValidSpec();
  GgufValueBytes v = GgufArray(4, {});
  const uint32_t bad = 77;
  v.payload.replace(0, 4, reinterpret_cast<const char*>(&bad), 4);
  spec.kv.push_back({"arr", v});
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "array-type"),
                   HasMetadata("key", "arr"));
}

TEST(GgufReaderTest, ReadsNestedArraysAndBoundsTheirDepth) {
  GgufSpec spec = ValidSpec();
  GgufValueBytes inner = GgufArray(4, {GgufU32(1), GgufU32(2)});
  spec.kv.push_back({"nested", GgufArray(9, {inner, inner})});
  const std::string path = MakeTempDir() + "/nested.gguf";
  WriteFile(path, BuildGguf(spec));
  auto ckpt = Checkpoint::Open(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->metadata().back().value, "[[1, 2], [1, 2]]");
  EXPECT_EQ((*ckpt)->metadata().back().type, "array<array>");

  GgufValueBytes deep = GgufArray(4, {GgufU32(1)});
  for (int i = 0; i < kGgufMaxArrayDepth + 1; ++i) deep = GgufArray(9, {deep});
  GgufSpec bomb = ValidSpec();
  bomb.kv.push_back({"deep", deep});
  EXPECT_DATA_LOSS(OpenSpec(bomb), HasMetadata("rule", "array-depth"),
                   HasMetadata("key", "deep"));
}

TEST(GgufReaderTest, RejectsAlignmentOfWrongType) {
  GgufSpec spec = ValidSpec();
  spec.kv.push_back({"general.alignment", GgufU64(32)});
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "alignment"),
                   HasMetadata("key", "general.alignment"));
}

TEST(GgufReaderTest, RejectsAlignmentZeroAndNonPowersOfTwo) {
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufSpec spec = ValidSpec();
    spec.kv.push_back({"general.alignment", GgufU32(a)});
    EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "alignment"),
                     HasMetadata("key", "general.alignment"));
  }
}

TEST(GgufReaderTest, AcceptsAlignmentOf2To31WhenOffsetsAgree) {
  GgufSpec spec = ValidSpec();
  spec.tensors.resize(1);
  spec.kv.push_back({"general.alignment", GgufU32(1u << 31)});
  // The data section would start at 2 GiB: far past this small file.
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "data-range"),
                   HasMetadata("tensor", "a"));
}

TEST(GgufReaderTest, RejectsDuplicateTensorNames) {
  GgufSpec spec = ValidSpec();
  spec.tensors[1].name = "a";
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "duplicate-name"),
                   HasMetadata("tensor", "a"));
}

TEST(GgufReaderTest, RejectsNamesOf64BytesOrMore) {
  GgufSpec spec = ValidSpec();
  spec.tensors[0].name = std::string(64, 'n');
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "name-length"));
  spec.tensors[0].name = std::string(63, 'n');
  EXPECT_TRUE(OpenSpec(spec).ok());
}

TEST(GgufReaderTest, RejectsMoreThanFourDimensions) {
  for (uint32_t n : {5u, 0xFFFFFFFFu}) {
    GgufSpec spec = ValidSpec();
    spec.tensors[0].n_dims = n;
    EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "rank"),
                     HasMetadata("tensor", "a"));
  }
}

TEST(GgufReaderTest, RejectsElementCountsThatOverflowInt64) {
  const std::vector<std::vector<int64_t>> cases = {
      {int64_t{1} << 62, 4}, {std::numeric_limits<int64_t>::max(), 2}};
  for (const auto& ne : cases) {
    GgufSpec spec = ValidSpec();
    spec.tensors[0].ne = ne;
    EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "size-overflow"),
                     HasMetadata("tensor", "a"));
  }
}

TEST(GgufReaderTest, RejectsNegativeDimensions) {
  for (int64_t d : {int64_t{-1}, int64_t{-3}}) {
    GgufSpec spec = ValidSpec();
    spec.tensors[0].ne = {8, d};
    EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "shape"),
                     HasMetadata("tensor", "a"));
  }
}

// An id not in the table (removed from ggml, or newer than Tensormorph)
// makes that one tensor undecodable: listed with its id, its extent bounded
// by the next tensor's offset, UNIMPLEMENTED when read; the rest reads.
TEST(GgufReaderTest, UnknownAndRemovedTypeIdsMakeOnlyThatTensorUndecodable) {
  for (uint32_t id : {4u, 5u, 31u, 33u, 36u, 38u, 43u, 200u, 1000u}) {
    SCOPED_TRACE(id);
    GgufSpec spec = ValidSpec();
    spec.tensors[0].type_id = id;
    const std::string path = MakeTempDir() + "/model.gguf";
    WriteFile(path, BuildGguf(spec));
    auto ckpt = Checkpoint::Open(path);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    const StoredTensor* a = (*ckpt)->FindStored("a");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->dtype, DType::kGgmlUnknown);
    EXPECT_EQ(a->ggml_type_id, id);
    EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 8}));
    EXPECT_EQ(a->nbytes, 64u);  // up to b's offset
    EXPECT_THAT(StoredDTypeName(*a),
                HasSubstr("ggml type " + std::to_string(id) + " ("));
    const LogicalTensor* la = (*ckpt)->FindTensor("a");
    ASSERT_NE(la, nullptr);
    EXPECT_THAT(la->encoding->info().scheme,
                HasSubstr("ggml type " + std::to_string(id)));
    float v[16];
    const absl::Status read = la->encoding->Decode(0, 16, v);
    EXPECT_THAT(
        read,
        AllOf(::tensormorph::testing::HasReason(ErrorReason::kUnsupportedDtype),
              ::tensormorph::testing::HasMetadata(
                  "dtype", absl::StrCat("ggml type ", id, " (",
                                        DescribeGgmlTypeId(id), ")"))));
    ScalarInfo si;
    EXPECT_EQ(la->encoding->Inspect(3, &si).code(),
              absl::StatusCode::kUnimplemented);
    const LogicalTensor* lb = (*ckpt)->FindTensor("b");
    ASSERT_NE(lb, nullptr);
    float w[64];
    EXPECT_TRUE(lb->encoding->Decode(0, 64, w).ok());
  }
}

// The last tensor of an unknown type runs to the end of the file, the
// only bound there is.
TEST(GgufReaderTest, AnUnknownTypeLastRunsToTheEndOfTheFile) {
  GgufSpec spec = ValidSpec();
  spec.tensors[1].type_id = 77;
  spec.tensors[1].data = std::string(50, '\x01');
  GgufLayout layout;
  const std::string bytes = BuildGguf(spec, &layout);
  const std::string path = MakeTempDir() + "/model.gguf";
  WriteFile(path, bytes);
  auto ckpt = Checkpoint::Open(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  const StoredTensor* b = (*ckpt)->FindStored("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->offset + b->nbytes, bytes.size());
  EXPECT_EQ(b->nbytes, 64u);  // 50, padded to 32 by the writer
}

TEST(GgufReaderTest, AnUnknownTypeNeedsTheNextOffsetAlignedAndAfterIt) {
  GgufSpec spec = ValidSpec();
  spec.tensors[0].type_id = 77;
  spec.tensors[1].offset = 40;  // not a multiple of 32
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "unknown-type-extent"),
                   HasMetadata("tensor", "a"));
  spec.tensors.push_back({"c", {32, 2}, kQ8_0, std::string(68, '\0')});
  spec.tensors[1].type_id = 77;
  spec.tensors[1].offset = 64;
  spec.tensors[2].offset = 32;  // before b
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "unknown-type-extent"),
                   HasMetadata("tensor", "b"));
}

TEST(GgufReaderTest, AnUnknownTypeStartingPastTheEndIsRefused) {
  // a ends inside the file; its padding, where b starts, does not.
  GgufSpec spec = ValidSpec();
  spec.tensors[0].ne = {4};
  spec.tensors[0].data = std::string(16, '\0');
  spec.tensors[1].type_id = 77;
  GgufLayout layout;
  std::string bytes = BuildGguf(spec, &layout);
  bytes.resize(layout.data_offset + 16);
  EXPECT_DATA_LOSS(OpenBytes(bytes), HasMetadata("rule", "unknown-type-extent"),
                   HasMetadata("tensor", "b"));
}

TEST(GgufReaderTest, RejectsRowsNotAMultipleOfTheBlockSize) {
  GgufSpec spec = ValidSpec();
  spec.tensors[1].ne = {16, 2};
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "block-size"),
                   HasMetadata("tensor", "b"));
}

TEST(GgufReaderTest, RejectsMisalignedOffset) {
  GgufSpec spec = ValidSpec();
  spec.tensors[0].offset = 1;
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "offset"),
                   HasMetadata("tensor", "a"), HasMetadata("expected", "0"),
                   HasMetadata("actual", "1"));
}

TEST(GgufReaderTest, RejectsOverlappingAndBackwardsOffsets) {
  GgufSpec spec = ValidSpec();
  spec.tensors[1].offset = 0;
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "offset"),
                   HasMetadata("tensor", "b"), HasMetadata("expected", "64"),
                   HasMetadata("actual", "0"));
  spec.tensors[1].offset = 128;
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "offset"),
                   HasMetadata("tensor", "b"), HasMetadata("expected", "64"),
                   HasMetadata("actual", "128"));
}

TEST(GgufReaderTest, RejectsDataPastTheEndOfTheFile) {
  std::string bytes = BuildGguf(ValidSpec());
  bytes.resize(bytes.size() - 40);
  // The message says what the tensor needs and what the file holds.
  EXPECT_DATA_LOSS(OpenBytes(bytes), HasMetadata("rule", "data-range"),
                   HasMetadata("tensor", "b"),
                   MessageNames("Q8_0[2,32] needs bytes"));
}

TEST(GgufReaderTest, RejectsTruncationAtEverySectionBoundary) {
  GgufLayout layout;
  const std::string bytes = BuildGguf(ValidSpec(), &layout);
  std::vector<uint64_t> cuts = {0,
                                2,
                                layout.after_magic,
                                layout.after_version,
                                layout.after_counts - 4,
                                layout.after_counts};
  for (uint64_t c : layout.after_kv) cuts.insert(cuts.end(), {c - 3, c});
  for (uint64_t c : layout.after_tensor)
    cuts.insert(cuts.end(), {c - 9, c - 1, c});
  cuts.push_back(layout.data_offset + 10);
  for (uint64_t cut : cuts) {
    SCOPED_TRACE(cut);
    auto g = ParseGguf({reinterpret_cast<const uint8_t*>(bytes.data()), cut},
                       "t.gguf");
    // The rule is "truncated" where a field runs out, a count's or a
    // length's own rule where it cannot fit what remains: either way the
    // file is named.
    EXPECT_DATA_LOSS(g.status(), HasMetadata("file", "t.gguf"),
                     ::testing::AnyOf(HasMetadata("rule", "truncated"),
                                      HasMetadata("rule", "kv-count"),
                                      HasMetadata("rule", "tensor-count"),
                                      HasMetadata("rule", "string-length"),
                                      HasMetadata("rule", "data-range")));
  }
  // One representative message: the rule, the tensor and the bytes it
  // lacked.
  auto g = ParseGguf({reinterpret_cast<const uint8_t*>(bytes.data()),
                      layout.after_tensor[0] - 9},
                     "t.gguf");
  EXPECT_THAT(g, AllOf(HasMetadata("rule", "truncated"),
                       MessageNames("tensor 'a'"), MessageNames("4 bytes")));
}

TEST(GgufReaderTest, RejectsTruncationAtEveryByteOfTheHeader) {
  GgufLayout layout;
  const std::string bytes = BuildGguf(ValidSpec(), &layout);
  for (uint64_t cut = 0; cut < layout.data_offset; ++cut) {
    auto g =
        ParseGguf({reinterpret_cast<const uint8_t*>(bytes.data()), cut}, "t");
    ASSERT_EQ(g.status().code(), absl::StatusCode::kDataLoss)
        << cut << g.status();
  }
}

// ggml takes any bytes as a name or key: they are read under their
// EscapeUtf8 spelling (core/util/utf8.h), which is what a client names.
TEST(GgufReaderTest, NamesAndKeysThatAreNotUtf8AreReadEscaped) {
  GgufSpec spec = ValidSpec();
  spec.tensors[0].name = "a\xE3";
  spec.kv.push_back({"k\xFF", GgufString("v\xC0")});
  const std::string bytes = BuildGguf(spec);
  auto f = ParseGguf(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(bytes.data()),
                          bytes.size()),
      "model.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->tensors[0].name, "a\\xE3");
  ASSERT_NE(f->Find("k\\xFF"), nullptr);
  EXPECT_EQ(f->Find("k\\xFF")->str, "v\xC0") << "values stay raw";
  EXPECT_EQ(GgufValueToString(*f->Find("k\\xFF")), "\"v\\xC0\"");
}

TEST(GgufReaderTest, NameLimitAppliesToTheRawBytesNotTheEscapedSpelling) {
  GgufSpec spec = ValidSpec();
  spec.tensors[0].name = std::string(kGgufMaxNameBytes, '\xFF');  // 4x escaped
  EXPECT_TRUE(OpenSpec(spec).ok());
  spec.tensors[0].name += '\xFF';
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "name-length"));
}

TEST(GgufReaderTest, RejectsDuplicateRawNamesUnderTheirEscapedSpelling) {
  GgufSpec spec = ValidSpec();
  spec.tensors[0].name = spec.tensors[1].name = "d\xE3";
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "duplicate-name"),
                   HasMetadata("tensor", "d\\xE3"));
  spec = ValidSpec();
  spec.tensors[0].name = "d\xE3";   // listed as d\xE3
  spec.tensors[1].name = "d\\xE3";  // listed as d\\xE3: a different name
  EXPECT_TRUE(OpenSpec(spec).ok());
  spec = ValidSpec();
  spec.kv.push_back({"k\xE3", GgufU32(1)});
  spec.kv.push_back({"k\xE3", GgufU32(2)});
  EXPECT_DATA_LOSS(OpenSpec(spec), HasMetadata("rule", "duplicate-key"),
                   HasMetadata("key", "k\\xE3"));
}

}  // namespace
}  // namespace tensormorph::gguf_reader_test
