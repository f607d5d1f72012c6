// SliceChunkView reads a ReadSlice message as protobuf would, its data left
// in the message's own slices however gRPC cut them.
#include "server/http/slice_chunk_view.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/util/error_reason.h"
#include "tests/support/status_matchers.h"

namespace tensormorph {
namespace {

using ::tensormorph::testing::HasReason;

v1::SliceChunk AChunk() {
  v1::SliceChunk chunk;
  v1::SliceHeader* h = chunk.mutable_header();
  h->add_shape(3);
  h->add_shape(5);
  h->set_total_bytes(60);
  h->set_dtype("F32");
  chunk.set_element_offset(7);
  chunk.set_element_count(15);
  std::string data(60, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  chunk.set_data(data);
  return chunk;
}

// `bytes` as a ByteBuffer of slices of `piece` bytes each (the last shorter).
grpc::ByteBuffer Cut(const std::string& bytes, size_t piece) {
  std::vector<grpc::Slice> slices;
  for (size_t i = 0; i < bytes.size(); i += piece) {
    slices.emplace_back(bytes.data() + i, std::min(piece, bytes.size() - i));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Joined(const SliceChunkView& view) {
  std::string out;
  for (absl::string_view piece : view.data()) {
    out.append(piece.data(), piece.size());
  }
  return out;
}

TEST(SliceChunkViewTest, ReadsWhatProtobufReadsHoweverTheMessageIsCut) {
  const v1::SliceChunk chunk = AChunk();
  const std::string wire = chunk.SerializeAsString();
  for (size_t piece : {size_t{1}, size_t{3}, size_t{16}, wire.size()}) {
    SCOPED_TRACE(piece);
    grpc::ByteBuffer message = Cut(wire, piece);
    SliceChunkView view;
    ASSERT_TRUE(view.Parse(message).ok());
    EXPECT_EQ(view.data_size(), chunk.data().size());
    EXPECT_EQ(Joined(view), chunk.data());
    v1::SliceChunk fields = chunk;
    fields.clear_data();
    EXPECT_EQ(view.fields().SerializeAsString(), fields.SerializeAsString());
  }
}

// The data is read where it lies, not copied: a span points into the
// message's slice.
TEST(SliceChunkViewTest, TheDataIsAViewOfTheMessagesOwnSlice) {
  const v1::SliceChunk chunk = AChunk();
  v1::SliceChunk head = chunk;
  head.clear_data();
  std::string prefix = head.SerializeAsString();
  // Field 4's tag and length, then the data as its own slice (as the
  // service sends it).
  prefix.push_back(static_cast<char>((4 << 3) | 2));
  prefix.push_back(static_cast<char>(chunk.data().size()));
  grpc::Slice slices[2] = {grpc::Slice(prefix), grpc::Slice(chunk.data())};
  grpc::ByteBuffer message(slices, 2);
  std::vector<grpc::Slice> held;
  ASSERT_TRUE(message.Dump(&held).ok());
  SliceChunkView view;
  ASSERT_TRUE(view.Parse(message).ok());
  ASSERT_EQ(view.data().size(), 1u);
  EXPECT_EQ(view.data()[0].data(),
            reinterpret_cast<const char*>(held.back().begin()));
  EXPECT_EQ(view.fields().element_offset(), 7);
}

TEST(SliceChunkViewTest, AMessageCutShortIsRefused) {
  const std::string wire = AChunk().SerializeAsString();
  for (size_t keep : {size_t{1}, wire.size() / 2, wire.size() - 1}) {
    SCOPED_TRACE(keep);
    grpc::ByteBuffer message = Cut(wire.substr(0, keep), 4);
    SliceChunkView view;
    EXPECT_THAT(view.Parse(message), HasReason(ErrorReason::kInternal));
  }
}

TEST(SliceChunkViewTest, AnEmptyMessageIsTheEmptyChunk) {
  grpc::ByteBuffer message;
  SliceChunkView view;
  ASSERT_TRUE(view.Parse(message).ok());
  EXPECT_EQ(view.data_size(), 0u);
  EXPECT_FALSE(view.fields().has_header());
}

}  // namespace
}  // namespace tensormorph
