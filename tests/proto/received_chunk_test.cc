// ReceivedChunk accepts and refuses exactly what v1::SliceChunk's own parser
// does, however the bytes are split into slices, and hands on the same data
// without copying it.
#include "proto/received_chunk.h"

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensormorph/v1/tensormorph.pb.h"

namespace tensormorph {
namespace {

// `bytes` as a ByteBuffer of slices cut at `cuts` (sorted offsets).
grpc::ByteBuffer Split(const std::string& bytes, std::vector<size_t> cuts) {
  std::vector<grpc::Slice> slices;
  size_t at = 0;
  cuts.push_back(bytes.size());
  for (size_t cut : cuts) {
    slices.emplace_back(bytes.data() + at, cut - at);
    at = cut;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::vector<size_t> RandomCuts(size_t size, std::mt19937& rng) {
  std::vector<size_t> cuts;
  if (size == 0) return cuts;
  const int n = static_cast<int>(rng() % 6);
  for (int i = 0; i < n; ++i) cuts.push_back(rng() % (size + 1));
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

std::string Joined(const ReceivedChunk& chunk) {
  std::vector<absl::string_view> pieces;
  chunk.DataPieces(&pieces);
  std::string out;
  for (absl::string_view p : pieces) {
    EXPECT_FALSE(p.empty()) << "an empty piece";
    out.append(p.data(), p.size());
  }
  return out;
}

// Parses `bytes` both ways and expects the same verdict and, when parsed,
// the same fields and data.
void ExpectParsedAsProtobufDoes(const std::string& bytes,
                                const std::vector<size_t>& cuts) {
  v1::SliceChunk want;
  const bool want_ok = want.ParseFromString(bytes);
  grpc::ByteBuffer buffer = Split(bytes, cuts);
  ReceivedChunk got;
  const bool got_ok = got.Parse(&buffer);
  ASSERT_EQ(got_ok, want_ok) << ::testing::PrintToString(cuts);
  if (!got_ok) return;
  EXPECT_EQ(Joined(got), want.data());
  EXPECT_EQ(got.data_size(), want.data().size());
  want.clear_data();
  EXPECT_EQ(got.fields().SerializeAsString(), want.SerializeAsString());
}

v1::SliceChunk HeaderChunk(size_t data_bytes) {
  v1::SliceChunk c;
  c.mutable_header()->add_shape(3);
  c.mutable_header()->add_shape(5);
  c.mutable_header()->set_dtype("F32");
  c.mutable_header()->set_num_elements(15);
  c.mutable_header()->set_total_bytes(60);
  c.set_element_offset(7);
  c.set_element_count(static_cast<int64_t>(data_bytes / 4));
  std::string data(data_bytes, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  c.set_data(data);
  return c;
}

TEST(ReceivedChunkTest, AChunkSplitAnywhereParsesToItsFieldsAndData) {
  std::mt19937 rng(1);
  for (size_t data_bytes : {0, 1, 60, 4096, 100000}) {
    const std::string bytes = HeaderChunk(data_bytes).SerializeAsString();
    ExpectParsedAsProtobufDoes(bytes, {});
    // Every single cut for the small ones, random ones for all.
    if (bytes.size() < 200) {
      for (size_t cut = 0; cut <= bytes.size(); ++cut) {
        ExpectParsedAsProtobufDoes(bytes, {cut});
      }
    }
    for (int i = 0; i < 200; ++i) {
      ExpectParsedAsProtobufDoes(bytes, RandomCuts(bytes.size(), rng));
    }
  }
}

TEST(ReceivedChunkTest, TheDataIsHandedOnWithoutACopy) {
  const std::string bytes = HeaderChunk(100000).SerializeAsString();
  grpc::ByteBuffer buffer = Split(bytes, {bytes.size() / 2});
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(buffer.Dump(&slices).ok());
  ReceivedChunk chunk;
  ASSERT_TRUE(chunk.Parse(&buffer));
  std::vector<absl::string_view> pieces;
  chunk.DataPieces(&pieces);
  ASSERT_EQ(pieces.size(), 2u);  // one per slice it spans
  EXPECT_EQ(pieces[1].data(), reinterpret_cast<const char*>(slices[1].begin()));
}

// A ByteBuffer never filled (how an empty message may be handed over) is
// the empty chunk: no fields, no data.
TEST(ReceivedChunkTest, ABufferNeverFilledIsTheEmptyChunk) {
  grpc::ByteBuffer buffer;
  ReceivedChunk chunk;
  ASSERT_TRUE(chunk.Parse(&buffer));
  EXPECT_EQ(chunk.data_size(), 0u);
  EXPECT_FALSE(chunk.fields().has_header());
  std::vector<absl::string_view> pieces;
  chunk.DataPieces(&pieces);
  EXPECT_TRUE(pieces.empty());
}

TEST(ReceivedChunkTest, FieldsInAnyOrderAndARepeatedDataFieldParseAsProtobuf) {
  v1::SliceChunk data_first;
  data_first.set_data("abc");
  v1::SliceChunk rest = HeaderChunk(0);
  rest.clear_data();
  v1::SliceChunk again;
  again.set_data("the last one wins");
  // Concatenated messages merge; a bytes field repeated keeps the last.
  const std::string bytes = data_first.SerializeAsString() +
                            rest.SerializeAsString() +
                            again.SerializeAsString();
  ExpectParsedAsProtobufDoes(bytes, {});
  ExpectParsedAsProtobufDoes(bytes, {5, 9});
}

TEST(ReceivedChunkTest, UnknownFieldsGroupsAndBrokenBytesAreJudgedAsProtobuf) {
  const std::string good = HeaderChunk(64).SerializeAsString();
  // An unknown varint field 9, fixed64 field 10 and fixed32 field 11.
  std::string unknown = good;
  unknown += std::string("\x48\x05", 2) + std::string("\x51", 1) +
             std::string(8, 'x') + std::string("\x5d", 1) + std::string(4, 'y');
  ExpectParsedAsProtobufDoes(unknown, {});
  ExpectParsedAsProtobufDoes(unknown, {good.size() + 1});
  // A group (field 12, start and end): parsed whole.
  ExpectParsedAsProtobufDoes(good + std::string("\x63\x64", 2), {3});
  // Cut short anywhere, a bad field number 0, an overlong varint, a
  // dtype that is not UTF-8.
  for (size_t n = 0; n < good.size(); n += 7) {
    ExpectParsedAsProtobufDoes(good.substr(0, n), {n / 2});
  }
  ExpectParsedAsProtobufDoes(std::string("\x02\x01x", 3), {});
  // The data field's tag or length written longer than needed, or a length
  // past 2 GiB.
  ExpectParsedAsProtobufDoes(good + std::string("\xa2\x00\x03"
                                                "abc",
                                                6),
                             {});
  ExpectParsedAsProtobufDoes(good + std::string("\x22\x83\x00"
                                                "abc",
                                                6),
                             {});
  ExpectParsedAsProtobufDoes(good + std::string("\x22\x83\x80\x80\x80\x00"
                                                "abc",
                                                9),
                             {});
  ExpectParsedAsProtobufDoes(good + std::string("\x22\xff\xff\xff\xff\x0f", 6),
                             {});
  ExpectParsedAsProtobufDoes(good + std::string(11, '\xff'), {});
  v1::SliceChunk bad_utf8 = HeaderChunk(4);
  bad_utf8.mutable_header()->set_dtype("\xff\xfe");
  std::string bad;
  bad_utf8.SerializePartialToString(&bad);
  ExpectParsedAsProtobufDoes(bad, {});
}

TEST(ReceivedChunkTest, RandomlyCorruptedChunksAreJudgedAsProtobuf) {
  std::mt19937 rng(2);
  const std::string good = HeaderChunk(200).SerializeAsString();
  for (int i = 0; i < 5000; ++i) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      // Mostly in the small fields before the data, where tags are.
      const size_t at = rng() % (rng() % 2 ? 40 : bytes.size());
      bytes[at] = static_cast<char>(rng());
    }
    ExpectParsedAsProtobufDoes(bytes, RandomCuts(bytes.size(), rng));
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace tensormorph
