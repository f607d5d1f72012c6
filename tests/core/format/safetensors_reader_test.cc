// One test per safetensors validation rule: a valid file with exactly one
// rule broken is refused with DATA_LOSS HEADER_INVALID whose metadata names
// the rule (header_rule.h), the tensor or key, and expected vs actual where
// the rule compares two numbers.
#include "core/format/safetensors_reader.h"

#include <string>

#include "core/format/checkpoint.h"
#include "core/util/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::BuildSafetensors;
using ::tensormorph::testing::BuildSafetensorsRaw;
using ::tensormorph::testing::Bytes;
using ::tensormorph::testing::HasMetadata;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::StTensor;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;

// Writes `bytes` as a real file and opens it as a checkpoint.
absl::Status OpenBytes(const std::string& bytes) {
  const std::string path = MakeTempDir() + "/model.safetensors";
  WriteFile(path, bytes);
  return Checkpoint::Open(path).status();
}

std::string F32Data(int n) { return std::string(4 * n, '\x01'); }

// HEADER_INVALID; the matchers, on the status, say which rule it broke
// (HasMetadata("rule", ...)) and which tensor or key.
#define EXPECT_DATA_LOSS(status, ...) \
  EXPECT_THAT((status),               \
              AllOf(HasReason(ErrorReason::kHeaderInvalid), __VA_ARGS__))

TEST(SafetensorsReaderTest, OpensAValidFileWithMetadata) {
  const std::string path = MakeTempDir() + "/ok.safetensors";
  WriteFile(path, BuildSafetensors({{"a", "F32", {2, 2}, F32Data(4)},
                                    {"b", "I8", {3}, "abc"}},
                                   {{"format", "pt"}}));
  auto ckpt = Checkpoint::Open(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ASSERT_EQ((*ckpt)->stored_tensors().size(), 2u);
  const StoredTensor* b = (*ckpt)->FindStored("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->nbytes, 3u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(b->data.data()), 3),
            "abc");
  ASSERT_EQ((*ckpt)->metadata().size(), 1u);
  EXPECT_EQ((*ckpt)->metadata()[0].value, "pt");
}

TEST(SafetensorsReaderTest, AcceptsLeadingWhitespaceBeforeTheHeader) {
  const std::string header =
      R"(   {"a":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}})";
  EXPECT_TRUE(OpenBytes(BuildSafetensorsRaw(header, "xy")).ok());
}

TEST(SafetensorsReaderTest, RejectsFileShorterThanLengthField) {
  EXPECT_DATA_LOSS(OpenBytes(std::string("\x02\x00\x00", 3)),
                   HasMetadata("rule", "header-length"));
}

TEST(SafetensorsReaderTest, RejectsHeaderLengthAboveLimit) {
  std::string bytes = BuildSafetensorsRaw("{}", "");
  const uint64_t n = kMaxSafetensorsHeaderBytes + 1;
  bytes.replace(0, 8, reinterpret_cast<const char*>(&n), 8);
  EXPECT_DATA_LOSS(OpenBytes(bytes), HasMetadata("rule", "header-limit"));
}

TEST(SafetensorsReaderTest, RejectsHeaderLengthPastEndOfFile) {
  std::string bytes = BuildSafetensorsRaw("{}", "");
  const uint64_t n = 1000;
  bytes.replace(0, 8, reinterpret_cast<const char*>(&n), 8);
  EXPECT_DATA_LOSS(OpenBytes(bytes), HasMetadata("rule", "header-length"));
}

TEST(SafetensorsReaderTest, RejectsZeroAndTinyHeaderLengths) {
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw("", "")),
                   HasMetadata("rule", "header-object"));
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw("{\"a\":1", "")),
                   HasMetadata("rule", "header-json"));
}

TEST(SafetensorsReaderTest, RejectsHeaderThatIsNotAnObject) {
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw("[1, 2, 3]", "")),
                   HasMetadata("rule", "header-object"));
}

TEST(SafetensorsReaderTest, RejectsInvalidUtf8) {
  const std::string header =
      "{\"a\xff\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "x")),
                   HasMetadata("rule", "header-utf8"));
}

// Names and metadata reach protobuf as they are, so JSON's own rules must
// leave nothing that is not UTF-8: raw bytes, overlongs and surrogates
// written as escapes are all refused, and the refusal itself is UTF-8.
TEST(SafetensorsReaderTest, LeavesNoStringThatIsNotUtf8) {
  const std::string tensor =
      ":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}";
  for (const std::string& header :
       {"{\"a\xC0\x80\"" + tensor + "}", "{\"a\xED\xA0\x80\"" + tensor + "}",
        "{\"a\\ud800\"" + tensor + "}", "{\"a\\udc00x\"" + tensor + "}",
        "{\"__metadata__\":{\"k\":\"v\xE3\"},\"a\"" + tensor + "}"}) {
    SCOPED_TRACE(EscapeUtf8(header));
    const absl::Status s = OpenBytes(BuildSafetensorsRaw(header, "x"));
    // Raw bytes break header-utf8; escapes that decode to no character
    // (lone surrogates) are invalid JSON.
    EXPECT_DATA_LOSS(s, ::testing::AnyOf(HasMetadata("rule", "header-utf8"),
                                         HasMetadata("rule", "header-json")));
    EXPECT_TRUE(IsValidUtf8(s.message())) << EscapeUtf8(s.message());
  }
  // A valid non-ASCII name is kept as it is.
  const std::string ok = "{\"caf\xC3\xA9\"" + tensor + "}";
  auto ckpt = Checkpoint::Open([&] {
    const std::string path = MakeTempDir() + "/model.safetensors";
    WriteFile(path, BuildSafetensorsRaw(ok, "x"));
    return path;
  }());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_NE((*ckpt)->FindTensor("caf\xC3\xA9"), nullptr);
}

TEST(SafetensorsReaderTest, RejectsDuplicateKeys) {
  const std::string header =
      R"({"w":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},)"
      R"("w":{"dtype":"I8","shape":[1],"data_offsets":[1,2]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "xy")),
                   HasMetadata("rule", "duplicate-key"),
                   HasMetadata("tensor", "w"));
  // A key twice in one tensor's entry names the tensor and the key; twice
  // in __metadata__, the key.
  EXPECT_DATA_LOSS(
      OpenBytes(BuildSafetensorsRaw(
          R"({"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},)"
          R"("w":{"dtype":"I8","shape":[1],"dtype":"I8","data_offsets":[1,2]}})",
          "xy")),
      HasMetadata("rule", "duplicate-key"), HasMetadata("tensor", "w"),
      HasMetadata("key", "dtype"));
  EXPECT_DATA_LOSS(
      OpenBytes(BuildSafetensorsRaw(
          R"({"__metadata__":{"format":"pt","format":"np"},)"
          R"("w":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}})",
          "xy")),
      HasMetadata("rule", "duplicate-key"), HasMetadata("key", "format"));
}

TEST(SafetensorsReaderTest, RejectsNestingBombs) {
  std::string header = "{\"__metadata__\":";
  for (int i = 0; i < 100000; ++i) header += "[";
  for (int i = 0; i < 100000; ++i) header += "]";
  header += "}";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "")),
                   HasMetadata("rule", "header-depth"));
}

TEST(SafetensorsReaderTest, RejectsMetadataThatIsNotStringToString) {
  const std::string header = R"({"__metadata__":{"format":1}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "")),
                   HasMetadata("rule", "metadata"),
                   HasMetadata("key", "format"));
}

TEST(SafetensorsReaderTest, RejectsTensorEntryMissingAField) {
  const std::string header = R"({"w":{"shape":[1],"data_offsets":[0,1]}})";
  // The message names the field that is missing.
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "x")),
                   HasMetadata("rule", "entry"), HasMetadata("tensor", "w"),
                   MessageNames("'dtype'"));
}

TEST(SafetensorsReaderTest, UnknownDtypeIsUnimplementedByName) {
  const absl::Status s =
      OpenBytes(BuildSafetensors({{"w", "C64", {1}, "12345678"}}));
  EXPECT_THAT(s, AllOf(HasReason(ErrorReason::kUnsupportedDtype),
                       HasMetadata("dtype", "C64"), MessageNames("'w'")));
}

TEST(SafetensorsReaderTest, RejectsNegativeShape) {
  const std::string header =
      R"({"w":{"dtype":"I8","shape":[-1],"data_offsets":[0,0]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "")),
                   HasMetadata("rule", "shape"), HasMetadata("tensor", "w"));
}

TEST(SafetensorsReaderTest, RejectsFloatShape) {
  const std::string header =
      R"({"w":{"dtype":"I8","shape":[1.5],"data_offsets":[0,1]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "x")),
                   HasMetadata("rule", "shape"), HasMetadata("tensor", "w"));
}

TEST(SafetensorsReaderTest, RejectsShapeEntryAbove2To48) {
  const std::string header =
      R"({"w":{"dtype":"I8","shape":[281474976710657],"data_offsets":[0,1]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "x")),
                   HasMetadata("rule", "shape"), HasMetadata("tensor", "w"));
}

TEST(SafetensorsReaderTest, RejectsRankAboveLimit) {
  const std::string header =
      R"({"w":{"dtype":"I8","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "x")),
                   HasMetadata("rule", "rank"), HasMetadata("tensor", "w"));
}

TEST(SafetensorsReaderTest, RejectsSizeOverflow) {
  const std::string header =
      R"({"w":{"dtype":"F64","shape":[281474976710656,281474976710656],"data_offsets":[0,8]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, std::string(8, 0))),
                   HasMetadata("rule", "size-overflow"),
                   HasMetadata("tensor", "w"));
}

TEST(SafetensorsReaderTest, RejectsOffsetsNotTwoIntegers) {
  const std::string header =
      R"({"w":{"dtype":"I8","shape":[1],"data_offsets":[0]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "x")),
                   HasMetadata("rule", "data-offsets"),
                   HasMetadata("tensor", "w"));
}

TEST(SafetensorsReaderTest, RejectsOffsetsNotStartingAtZero) {
  const std::string header =
      R"({"w":{"dtype":"I8","shape":[1],"data_offsets":[4,5]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "xxxxx")),
                   HasMetadata("rule", "offset"), HasMetadata("tensor", "w"),
                   HasMetadata("expected", "0"), HasMetadata("actual", "4"));
}

TEST(SafetensorsReaderTest, RejectsGapBetweenTensors) {
  const std::string header =
      R"({"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},)"
      R"("b":{"dtype":"I8","shape":[1],"data_offsets":[2,3]}})";
  // The message names the tensor before the gap, which the metadata does not.
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "xyz")),
                   HasMetadata("rule", "offset"), HasMetadata("tensor", "b"),
                   HasMetadata("expected", "1"), HasMetadata("actual", "2"),
                   MessageNames("tensor 'a'"));
}

TEST(SafetensorsReaderTest, RejectsOverlappingTensors) {
  const std::string header =
      R"({"a":{"dtype":"I16","shape":[2],"data_offsets":[0,4]},)"
      R"("b":{"dtype":"I16","shape":[1],"data_offsets":[2,4]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "wxyz")),
                   HasMetadata("rule", "offset"), HasMetadata("tensor", "b"),
                   HasMetadata("expected", "4"), HasMetadata("actual", "2"));
}

TEST(SafetensorsReaderTest, RejectsOffsetsEndingBeforeTheyBegin) {
  const std::string header =
      R"({"w":{"dtype":"I8","shape":[0],"data_offsets":[0,0]},)"
      R"("v":{"dtype":"I8","shape":[1],"data_offsets":[0,0]}})";
  // "v" sorts after "w" with the same start; its size is wrong.
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "")),
                   HasMetadata("rule", "data-size"), HasMetadata("tensor", "v"),
                   HasMetadata("expected", "1"), HasMetadata("actual", "0"));
  const std::string backwards =
      R"({"w":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},)"
      R"("v":{"dtype":"I8","shape":[0],"data_offsets":[1,0]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(backwards, "x")),
                   HasMetadata("rule", "offset-order"),
                   HasMetadata("tensor", "v"));
}

TEST(SafetensorsReaderTest, RejectsSizeThatDisagreesWithDtypeAndShape) {
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,15]}})";
  // The message says both sizes, and what the dtype and shape are.
  EXPECT_DATA_LOSS(
      OpenBytes(BuildSafetensorsRaw(header, std::string(15, 0))),
      HasMetadata("rule", "data-size"), HasMetadata("tensor", "w"),
      HasMetadata("expected", "16"), HasMetadata("actual", "15"),
      MessageNames("tensor 'w': data_offsets [0,15) hold 15 bytes but "
                   "F32[2,2] needs 16 bytes"));
}

TEST(SafetensorsReaderTest, RejectsSubByteSizesNotEndingOnAByte) {
  const std::string header =
      R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "xy")),
                   HasMetadata("rule", "block-size"),
                   HasMetadata("tensor", "w"));
}

TEST(SafetensorsReaderTest, RejectsTrailingBytes) {
  std::string bytes = BuildSafetensors({{"w", "I8", {2}, "xy"}}) + "junk";
  EXPECT_DATA_LOSS(OpenBytes(bytes), HasMetadata("rule", "data-end"),
                   HasMetadata("expected", "6"), HasMetadata("actual", "2"));
}

TEST(SafetensorsReaderTest, RejectsTruncatedData) {
  std::string bytes = BuildSafetensors({{"w", "F32", {4}, F32Data(4)}});
  bytes.resize(bytes.size() - 3);
  EXPECT_DATA_LOSS(OpenBytes(bytes), HasMetadata("rule", "data-end"),
                   HasMetadata("expected", "13"), HasMetadata("actual", "16"));
}

TEST(SafetensorsReaderTest, ParsesInMemoryForFuzzers) {
  const std::string bytes = BuildSafetensors({{"w", "BF16", {3}, "abcdef"}});
  auto h = ParseSafetensors(
      {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "mem");
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->tensors.size(), 1u);
  EXPECT_EQ(h->tensors[0].offset, h->data_start);
  EXPECT_EQ(h->tensors[0].num_elements, 3);
}

}  // namespace
}  // namespace tensormorph
