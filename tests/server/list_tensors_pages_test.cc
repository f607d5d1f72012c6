// ListTensors' pages (AIP-158) through a real server on loopback: pages of
// any size concatenate to the whole list, for filters and for parts; each
// page promises its own count; the token is the page's own last message, as
// ListCheckpoints gives it; a page_size past the server's cap is lowered,
// not refused; and a token that is no token, or belongs to another request,
// is refused with reason PAGE_TOKEN_INVALID.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/status_mapping.h"
#include "server/server.h"
#include "tensormorph/v1/tensormorph.grpc.pb.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/loopback_server.h"
#include "tests/support/status_matchers.h"

namespace tensormorph::list_tensors_pages_test {
namespace {

using ::tensormorph::testing::DemoDir;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::LoopbackServer;
using ::tensormorph::testing::StartLoopbackServer;
using ::testing::ElementsAreArray;

constexpr char kQ8[] = "model-q8_0.gguf";
constexpr char kInt8[] = "int8";  // compressed-tensors: a tensor of parts

// Every message of one call, the token's own message too, read with the
// generated stub: what any gRPC client gets.
absl::StatusOr<std::vector<v1::TensorInfo>> OnePage(
    v1::Tensormorph::Stub& stub, const v1::ListTensorsRequest& req) {
  grpc::ClientContext ctx;
  auto reader = stub.ListTensors(&ctx, req);
  std::vector<v1::TensorInfo> out;
  for (v1::TensorInfo t; reader->Read(&t);) out.push_back(t);
  if (absl::Status s = FromGrpcStatus(reader->Finish()); !s.ok()) return s;
  return out;
}

// The tensors of every page from `req` on, each page checked for the shape
// AIP-158 and TensorInfo give it; fails the test on a call's error.
std::vector<v1::TensorInfo> AllPages(v1::Tensormorph::Stub& stub,
                                     v1::ListTensorsRequest req, size_t cap) {
  std::vector<v1::TensorInfo> all;
  for (int pages = 1;; ++pages) {
    auto page = OnePage(stub, req);
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) return all;
    std::string next;
    if (!page->empty() && !page->back().next_page_token().empty()) {
      // The token is a message of its own: nothing but the token.
      v1::TensorInfo only_token;
      only_token.set_next_page_token(page->back().next_page_token());
      EXPECT_EQ(page->back().SerializeAsString(),
                only_token.SerializeAsString());
      next = page->back().next_page_token();
      page->pop_back();
      EXPECT_FALSE(page->empty()) << "a page before the last is never empty";
    }
    EXPECT_LE(page->size(), cap);
    for (const v1::TensorInfo& t : *page) {
      EXPECT_TRUE(t.next_page_token().empty()) << t.name();
      EXPECT_EQ(t.list_count(), static_cast<int64_t>(page->size())) << t.name();
      all.push_back(t);
    }
    if (next.empty()) return all;
    req.set_page_token(next);
    EXPECT_LT(pages, 1000);
    if (pages >= 1000) return all;
  }
}

// `tensors` with list_count cleared: a page's count is its own.
std::vector<std::string> Serialized(std::vector<v1::TensorInfo> tensors) {
  std::vector<std::string> out;
  for (v1::TensorInfo& t : tensors) {
    t.clear_list_count();
    out.push_back(t.SerializeAsString());
  }
  return out;
}

class ListTensorsPagesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server = new LoopbackServer(StartLoopbackServer({DemoDir()}));
    stub = v1::Tensormorph::NewStub(
               grpc::CreateChannel(server->address,
                                   grpc::InsecureChannelCredentials()))
               .release();
  }
  static void TearDownTestSuite() {
    delete stub;
    delete server;
  }

  static v1::ListTensorsRequest Request(const std::string& checkpoint,
                                        const std::string& filter, bool parts,
                                        int32_t page_size) {
    v1::ListTensorsRequest req;
    req.set_checkpoint(checkpoint);
    req.set_filter(filter);
    req.set_parts(parts);
    req.set_page_size(page_size);
    return req;
  }

  static LoopbackServer* server;
  static v1::Tensormorph::Stub* stub;
};
LoopbackServer* ListTensorsPagesTest::server = nullptr;
v1::Tensormorph::Stub* ListTensorsPagesTest::stub = nullptr;

TEST_F(ListTensorsPagesTest, PageSizeZeroIsTheWholeListInOneCall) {
  auto whole = OnePage(*stub, Request(kQ8, "", false, 0));
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_GT(whole->size(), 10u);
  for (const v1::TensorInfo& t : *whole) {
    EXPECT_TRUE(t.next_page_token().empty()) << t.name();
    EXPECT_EQ(t.list_count(), static_cast<int64_t>(whole->size()));
  }
}

TEST_F(ListTensorsPagesTest, PagesConcatenateToTheWholeListForFiltersAndParts) {
  struct Listing {
    std::string checkpoint, filter;
    bool parts;
  };
  const std::vector<Listing> listings = {
      {kQ8, "", false},          {kQ8, "blk.0.*", false},
      {kQ8, "*norm*", false},    {kQ8, "", true},
      {kInt8, "", false},        {kInt8, "", true},
      {kInt8, "*q_proj*", true},
  };
  for (const Listing& l : listings) {
    auto whole = OnePage(*stub, Request(l.checkpoint, l.filter, l.parts, 0));
    ASSERT_TRUE(whole.ok()) << whole.status();
    ASSERT_FALSE(whole->empty()) << l.checkpoint << " " << l.filter;
    for (int32_t size : {1, 2, 3, 7}) {
      SCOPED_TRACE(::testing::Message()
                   << l.checkpoint << " filter '" << l.filter << "' parts "
                   << l.parts << " page_size " << size);
      std::vector<v1::TensorInfo> paged =
          AllPages(*stub, Request(l.checkpoint, l.filter, l.parts, size), size);
      EXPECT_THAT(Serialized(paged), ElementsAreArray(Serialized(*whole)));
    }
  }
}

// The C++ client follows the tokens: its caller gets every tensor.
TEST_F(ListTensorsPagesTest, TheClientFollowsTheTokensToTheEnd) {
  auto whole = server->client->ListTensors(kQ8);
  ASSERT_TRUE(whole.ok()) << whole.status();
  std::vector<v1::TensorInfo> paged;
  const absl::Status s = server->client->ListTensors(
      Request(kQ8, "", false, 4),
      [&](const v1::TensorInfo& t) { paged.push_back(t); });
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_THAT(Serialized(paged), ElementsAreArray(Serialized(*whole)));
}

TEST_F(ListTensorsPagesTest, ATokenIsRefusedUnlessItIsThisRequestsOwn) {
  auto first = OnePage(*stub, Request(kQ8, "blk.*", false, 2));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_FALSE(first->back().next_page_token().empty());
  const std::string token = first->back().next_page_token();

  v1::ListTensorsRequest req = Request(kQ8, "blk.*", false, 2);
  // Not base64; base64 of no token; a token's form with a fingerprint of
  // nothing asked.
  for (const std::string& bad :
       {std::string("not a token"), absl::WebSafeBase64Escape("lt1"),
        absl::WebSafeBase64Escape("lt1\n12\nblk.0.attn_k.weight")}) {
    req.set_page_token(bad);
    EXPECT_THAT(OnePage(*stub, req), HasReason(ErrorReason::kPageTokenInvalid))
        << bad;
  }
  // The token of another checkpoint, filter or parts.
  for (v1::ListTensorsRequest other :
       {Request("model-f32.gguf", "blk.*", false, 2),
        Request(kQ8, "blk.0.*", false, 2), Request(kQ8, "blk.*", true, 2)}) {
    other.set_page_token(token);
    EXPECT_THAT(OnePage(*stub, other),
                HasReason(ErrorReason::kPageTokenInvalid))
        << other.ShortDebugString();
  }
  // Its own request goes on, whatever page size it asks for now.
  req.set_page_size(100);
  req.set_page_token(token);
  auto rest = OnePage(*stub, req);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_FALSE(rest->empty());
}

TEST_F(ListTensorsPagesTest, ANegativePageSizeIsInvalid) {
  EXPECT_THAT(OnePage(*stub, Request(kQ8, "", false, -1)),
              HasReason(ErrorReason::kRequestInvalid));
}

// AIP-158: past the server's max_list_page_size, a page is lowered to it.
TEST(ListTensorsPagesCapTest, APageSizePastTheCapIsLoweredToIt) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.roots = {DemoDir()};
  o.limits.max_list_page_size = 3;
  auto server = TensormorphServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::Tensormorph::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                          grpc::InsecureChannelCredentials()));
  v1::ListTensorsRequest req;
  req.set_checkpoint(kQ8);
  auto whole = OnePage(*stub, req);
  ASSERT_TRUE(whole.ok()) << whole.status();
  req.set_page_size(1000);
  auto page = OnePage(*stub, req);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->size(), 4u);  // three tensors and the token
  EXPECT_FALSE(page->back().next_page_token().empty());
  EXPECT_EQ((*page)[0].list_count(), 3);
  EXPECT_THAT(Serialized(AllPages(*stub, req, 3)),
              ElementsAreArray(Serialized(*whole)));
  (*server)->Shutdown(absl::ZeroDuration());
}

}  // namespace
}  // namespace tensormorph::list_tensors_pages_test
