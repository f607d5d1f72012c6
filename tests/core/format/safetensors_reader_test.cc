// One test per safetensors validation rule: a valid file with exactly one
// rule broken is refused with DATA_LOSS naming the rule, the tensor or key,
// and expected vs actual.
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
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::StTensor;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Writes `bytes` as a real file and opens it as a checkpoint.
absl::Status OpenBytes(const std::string& bytes) {
  const std::string path = MakeTempDir() + "/model.safetensors";
  WriteFile(path, bytes);
  return Checkpoint::Open(path).status();
}

std::string F32Data(int n) { return std::string(4 * n, '\x01'); }

// HEADER_INVALID; the matchers say which of the format's rules, which its
// `rule` metadata (one per format) does not.
#define EXPECT_DATA_LOSS(status, ...)                                 \
  do {                                                                \
    const absl::Status s_ = (status);                                 \
    EXPECT_THAT(s_, ::tensormorph::testing::HasReason(                \
                        ::tensormorph::ErrorReason::kHeaderInvalid)); \
    EXPECT_THAT(std::string(s_.message()), AllOf(__VA_ARGS__));       \
  } while (0)

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
                   HasSubstr("model.safetensors"),
                   HasSubstr("shorter than the 8-byte"));
}

TEST(SafetensorsReaderTest, RejectsHeaderLengthAboveLimit) {
  std::string bytes = BuildSafetensorsRaw("{}", "");
  const uint64_t n = kMaxSafetensorsHeaderBytes + 1;
  bytes.replace(0, 8, reinterpret_cast<const char*>(&n), 8);
  EXPECT_DATA_LOSS(OpenBytes(bytes), HasSubstr("header length 100000001"),
                   HasSubstr("exceeds the limit of 100000000"));
}

TEST(SafetensorsReaderTest, RejectsHeaderLengthPastEndOfFile) {
  std::string bytes = BuildSafetensorsRaw("{}", "");
  const uint64_t n = 1000;
  bytes.replace(0, 8, reinterpret_cast<const char*>(&n), 8);
  EXPECT_DATA_LOSS(OpenBytes(bytes), HasSubstr("header length 1000"),
                   HasSubstr("only 2 bytes follow"));
}

TEST(SafetensorsReaderTest, RejectsZeroAndTinyHeaderLengths) {
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw("", "")),
                   HasSubstr("JSON object starting with '{'"));
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw("{\"a\":1", "")),
                   HasSubstr("invalid JSON"));
}

TEST(SafetensorsReaderTest, RejectsHeaderThatIsNotAnObject) {
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw("[1, 2, 3]", "")),
                   HasSubstr("JSON object"));
}

TEST(SafetensorsReaderTest, RejectsInvalidUtf8) {
  const std::string header =
      "{\"a\xff\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "x")),
                   HasSubstr("invalid JSON"), HasSubstr("UTF-8"));
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
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
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
                   HasSubstr("duplicate key 'w'"));
}

TEST(SafetensorsReaderTest, RejectsNestingBombs) {
  std::string header = "{\"__metadata__\":";
  for (int i = 0; i < 100000; ++i) header += "[";
  for (int i = 0; i < 100000; ++i) header += "]";
  header += "}";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "")),
                   HasSubstr("nesting deeper than 64"));
}

TEST(SafetensorsReaderTest, RejectsMetadataThatIsNotStringToString) {
  const std::string header = R"({"__metadata__":{"format":1}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "")),
                   HasSubstr("__metadata__['format'] must be a string"),
                   HasSubstr("number"));
}

TEST(SafetensorsReaderTest, RejectsTensorEntryMissingAField) {
  const std::string header = R"({"w":{"shape":[1],"data_offsets":[0,1]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "x")),
                   HasSubstr("tensor 'w'"), HasSubstr("missing 'dtype'"));
}

TEST(SafetensorsReaderTest, UnknownDtypeIsUnimplementedByName) {
  const absl::Status s =
      OpenBytes(BuildSafetensors({{"w", "C64", {1}, "12345678"}}));
  EXPECT_THAT(
      s,
      AllOf(::tensormorph::testing::HasReason(ErrorReason::kUnsupportedDtype),
            ::tensormorph::testing::HasMetadata("dtype", "C64"),
            ::tensormorph::testing::MessageNames("'w'")));
}

TEST(SafetensorsReaderTest, RejectsNegativeShape) {
  const std::string header =
      R"({"w":{"dtype":"I8","shape":[-1],"data_offsets":[0,0]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "")),
                   HasSubstr("tensor 'w'"), HasSubstr("shape[0] = -1"));
}

TEST(SafetensorsReaderTest, RejectsFloatShape) {
  const std::string header =
      R"({"w":{"dtype":"I8","shape":[1.5],"data_offsets":[0,1]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "x")),
                   HasSubstr("shape[0] = 1.5"), HasSubstr("not an integer"));
}

TEST(SafetensorsReaderTest, RejectsShapeEntryAbove2To48) {
  const std::string header =
      R"({"w":{"dtype":"I8","shape":[281474976710657],"data_offsets":[0,1]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "x")),
                   HasSubstr("shape[0] = 281474976710657"), HasSubstr("2^48"));
}

TEST(SafetensorsReaderTest, RejectsRankAboveLimit) {
  const std::string header =
      R"({"w":{"dtype":"I8","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "x")),
                   HasSubstr("rank 17 exceeds the limit of 16"));
}

TEST(SafetensorsReaderTest, RejectsSizeOverflow) {
  const std::string header =
      R"({"w":{"dtype":"F64","shape":[281474976710656,281474976710656],"data_offsets":[0,8]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, std::string(8, 0))),
                   HasSubstr("tensor 'w'"), HasSubstr("overflows"));
}

TEST(SafetensorsReaderTest, RejectsOffsetsNotTwoIntegers) {
  const std::string header =
      R"({"w":{"dtype":"I8","shape":[1],"data_offsets":[0]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "x")),
                   HasSubstr("data_offsets = [0]"), HasSubstr("two integers"));
}

TEST(SafetensorsReaderTest, RejectsOffsetsNotStartingAtZero) {
  const std::string header =
      R"({"w":{"dtype":"I8","shape":[1],"data_offsets":[4,5]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "xxxxx")),
                   HasSubstr("tensor 'w'"),
                   HasSubstr("start at 4 but expected 0"), HasSubstr("gaps"));
}

TEST(SafetensorsReaderTest, RejectsGapBetweenTensors) {
  const std::string header =
      R"({"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},)"
      R"("b":{"dtype":"I8","shape":[1],"data_offsets":[2,3]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "xyz")),
                   HasSubstr("tensor 'b'"),
                   HasSubstr("start at 2 but expected 1"),
                   HasSubstr("tensor 'a'"), HasSubstr("gaps"));
}

TEST(SafetensorsReaderTest, RejectsOverlappingTensors) {
  const std::string header =
      R"({"a":{"dtype":"I16","shape":[2],"data_offsets":[0,4]},)"
      R"("b":{"dtype":"I16","shape":[1],"data_offsets":[2,4]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "wxyz")),
                   HasSubstr("overlaps"));
}

TEST(SafetensorsReaderTest, RejectsOffsetsEndingBeforeTheyBegin) {
  const std::string header =
      R"({"w":{"dtype":"I8","shape":[0],"data_offsets":[0,0]},)"
      R"("v":{"dtype":"I8","shape":[1],"data_offsets":[0,0]}})";
  // "v" sorts after "w" with the same start; its size is wrong.
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "")),
                   HasSubstr("tensor 'v'"),
                   HasSubstr("hold 0 bytes but I8[1] needs 1 bytes"));
  const std::string backwards =
      R"({"w":{"dtype":"I8","shape":[1],"data_offsets":[0,1]},)"
      R"("v":{"dtype":"I8","shape":[0],"data_offsets":[1,0]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(backwards, "x")),
                   HasSubstr("tensor 'v'"), HasSubstr("end before they begin"));
}

TEST(SafetensorsReaderTest, RejectsSizeThatDisagreesWithDtypeAndShape) {
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,15]}})";
  EXPECT_DATA_LOSS(
      OpenBytes(BuildSafetensorsRaw(header, std::string(15, 0))),
      HasSubstr("tensor 'w': data_offsets [0,15) hold 15 bytes but "
                "F32[2,2] needs 16 bytes"));
}

TEST(SafetensorsReaderTest, RejectsSubByteSizesNotEndingOnAByte) {
  const std::string header =
      R"({"w":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})";
  EXPECT_DATA_LOSS(OpenBytes(BuildSafetensorsRaw(header, "xy")),
                   HasSubstr("tensor 'w'"), HasSubstr("3 elements of 4 bits"),
                   HasSubstr("does not end on a byte"));
}

TEST(SafetensorsReaderTest, RejectsTrailingBytes) {
  std::string bytes = BuildSafetensors({{"w", "I8", {2}, "xy"}}) + "junk";
  EXPECT_DATA_LOSS(OpenBytes(bytes), HasSubstr("tensors end at data offset 2"),
                   HasSubstr("holds 6 data bytes"));
}

TEST(SafetensorsReaderTest, RejectsTruncatedData) {
  std::string bytes = BuildSafetensors({{"w", "F32", {4}, F32Data(4)}});
  bytes.resize(bytes.size() - 3);
  EXPECT_DATA_LOSS(OpenBytes(bytes), HasSubstr("tensors end at data offset 16"),
                   HasSubstr("holds 13 data bytes"));
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
