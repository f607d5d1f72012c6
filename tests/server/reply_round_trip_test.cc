// Every reply the service builds, from every shared fixture, the demo
// checkpoints, every hostile-corpus file and a GGUF of non-UTF-8 names,
// crosses the wire and parses back equal, with every string field (found by
// reflection, at any depth) valid UTF-8; every refusal's message is valid
// UTF-8 too. The calls go to a live server over loopback.
#include <dirent.h>
#include <google/protobuf/util/message_differencer.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "client/client.h"
#include "core/util/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/wire_check.h"
#include "tests/support/demo_checkpoint.h"
#include "tests/support/gguf_writer.h"
#include "tests/support/hostile_corpus.h"
#include "tests/support/loopback_server.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_paths.h"

namespace tensormorph {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using ::tensormorph::testing::BuildGguf;
using ::tensormorph::testing::DemoDir;
using ::tensormorph::testing::FixturesDir;
using ::tensormorph::testing::GgufArray;
using ::tensormorph::testing::GgufSpec;
using ::tensormorph::testing::GgufString;
using ::tensormorph::testing::HasReason;
using ::tensormorph::testing::HostileCorpus;
using ::tensormorph::testing::MakeTempDir;
using ::tensormorph::testing::MessageNames;
using ::tensormorph::testing::WriteFile;
using ::testing::AllOf;

// Independent of server/wire_check: the test's own walk over the fields.
void ExpectUtf8Strings(const Message& m, const std::string& path) {
  const auto* r = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    const std::string at = path + "." + f->name();
    const int n = f->is_repeated() ? r->FieldSize(m, f) : 1;
    for (int i = 0; i < n; ++i) {
      if (f->type() == FieldDescriptor::TYPE_STRING) {
        const std::string v = f->is_repeated() ? r->GetRepeatedString(m, f, i)
                                               : r->GetString(m, f);
        EXPECT_TRUE(IsValidUtf8(v)) << at << "[" << i << "] = " << v;
      } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        ExpectUtf8Strings(f->is_repeated() ? r->GetRepeatedMessage(m, f, i)
                                           : r->GetMessage(m, f),
                          at);
      }
    }
  }
}

void ExpectRoundTrip(const Message& m) {
  std::string wire;
  ASSERT_TRUE(m.SerializeToString(&wire));
  std::unique_ptr<Message> back(m.New());
  ASSERT_TRUE(back->ParseFromString(wire)) << m.GetTypeName();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(m, *back))
      << m.GetTypeName();
  ExpectUtf8Strings(m, m.GetDescriptor()->name());
}

template <typename T>
void ExpectReplyOrUtf8Refusal(const absl::StatusOr<T>& reply) {
  if (reply.ok()) {
    ExpectRoundTrip(*reply);
  } else {
    EXPECT_TRUE(IsValidUtf8(reply.status().message())) << reply.status();
  }
}

bool IsDir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(dir + "/" + n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// Every checkpoint the test replays, as absolute paths inside the roots.
std::vector<std::string> Checkpoints(const std::string& scratch) {
  std::vector<std::string> out;
  for (const std::string& p : Entries(FixturesDir() + "/gguf")) {
    if (absl::EndsWith(p, ".gguf")) out.push_back(p);
  }
  for (const std::string& p : Entries(FixturesDir() + "/safetensors")) {
    if (!IsDir(p)) continue;
    out.push_back(p);
    if (IsDir(p + "/source")) out.push_back(p + "/source");
  }
  for (const char* d : {"source", "int8", "model-q8_0.gguf", "model-f32.gguf",
                        "model-q4_k_m.gguf"}) {
    out.push_back(DemoDir() + "/" + d);
  }
  for (const auto& h : HostileCorpus()) {
    WriteFile(scratch + "/" + h.name, h.bytes);
    out.push_back(scratch + "/" + h.name);
  }
  GgufSpec odd;
  for (const std::string name : {"a", "b\xE3", "c\xED\xA0\x80", "d\\x"}) {
    odd.tensors.push_back({name, {8}, 0, std::string(32, '\0')});
  }
  odd.kv = {{"general.name", GgufString("\xFF")},
            {"general.architecture", GgufString("ll\xE3ma")},
            {"k\xC0", GgufArray(8, {GgufString("\xE3"), GgufString("ok")})}};
  WriteFile(scratch + "/odd.gguf", BuildGguf(odd));
  out.push_back(scratch + "/odd.gguf");
  return out;
}

TEST(ReplyRoundTripTest, EveryReplyFromEveryCheckpointSerializesAndParses) {
  const std::string scratch = MakeTempDir();
  const std::vector<std::string> checkpoints = Checkpoints(scratch);
  ASSERT_GT(checkpoints.size(), 40u) << "fixtures missing?";
  ClientOptions o;
  o.timeout = absl::Seconds(60);
  auto loopback =
      testing::StartLoopbackServer({FixturesDir(), DemoDir(), scratch}, 0, o);
  Client& client = *loopback.client;
  int opened = 0, tensors_seen = 0;
  for (const std::string& ckpt : checkpoints) {
    SCOPED_TRACE(ckpt);
    auto info = client.GetCheckpoint(ckpt);
    ExpectReplyOrUtf8Refusal(info);
    ExpectReplyOrUtf8Refusal(client.GetArchitecture(ckpt));
    auto list = client.ListTensors(ckpt);
    if (!list.ok()) {
      EXPECT_TRUE(IsValidUtf8(list.status().message())) << list.status();
      continue;
    }
    ++opened;
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(static_cast<int64_t>(list->size()), info->tensor_count());
    for (size_t i = 0; i < list->size(); ++i) {
      const v1::TensorInfo& t = (*list)[i];
      ExpectRoundTrip(t);
      EXPECT_EQ(t.list_count(), static_cast<int64_t>(list->size()));
      ++tensors_seen;
      if (i >= 3 || t.num_elements() == 0) continue;  // a few per checkpoint
      v1::InspectScalarsRequest q;
      q.set_checkpoint(ckpt);
      q.set_tensor(t.name());
      q.add_flat_indices(0);
      q.add_flat_indices(t.num_elements() - 1);
      auto scalars = client.InspectScalars(q);
      ExpectReplyOrUtf8Refusal(scalars);
      // The views' newer fields: one group's stats with its levels, and a
      // region in zeros mode.
      v1::ComputeStatsRequest st;
      st.set_checkpoint(ckpt);
      st.set_tensor(t.name());
      st.set_group(0);
      ExpectReplyOrUtf8Refusal(client.ComputeStats(st));
      v1::GetHeatmapRequest hm;
      hm.set_checkpoint(ckpt);
      hm.set_tensor(t.name());
      hm.set_mode(v1::HEATMAP_MODE_ZEROS);
      hm.set_width(8);
      hm.set_height(8);
      hm.set_col_end(1);
      ExpectReplyOrUtf8Refusal(client.GetHeatmap(hm));
    }
  }
  EXPECT_GT(opened, 25);
  EXPECT_GT(tensors_seen, 100);
  EXPECT_TRUE(client.GetServerInfo().ok()) << "the server still serves";
}

TEST(WireCheckTest, NamesTheFieldThatIsNotUtf8) {
  v1::TensorInfo t;
  t.set_name("ok");
  t.add_parts()->set_name("fine");
  t.add_parts()->set_name("b\xE3");
  absl::Status s = CheckWireSafe(t);
  EXPECT_THAT(s,
              AllOf(HasReason(ErrorReason::kInternal),
                    MessageNames("'parts[1].name'"), MessageNames("b\\xE3")));
  t.mutable_parts(1)->set_name("b");
  EXPECT_TRUE(CheckWireSafe(t).ok());
  // bytes fields may hold anything.
  v1::MetadataEntry m;
  m.set_raw("\xFF");
  EXPECT_TRUE(CheckWireSafe(m).ok());
}

}  // namespace
}  // namespace tensormorph
