// libFuzzer target: the whole service, as a client meets it. Each input is
// written to disk as a checkpoint and taken through the real service
// in-process (EmbeddedClient): open, list, architecture, inspect a few
// elements, read a few, stats. Every reply is serialized and parsed back,
// and every string in it must be valid UTF-8, since a message protobuf
// cannot serialize is a call that fails or hangs on the wire.
//
// Input: one selector byte, then the file. Selector % 3: 0 a GGUF file,
// 1 a safetensors file, 2 a directory of `config.json` NUL `model.safetensors`.
//
// Findings (abort): a reply that does not round-trip, a string that is not
// UTF-8, a listing shorter or longer than the count GetCheckpoint gave, or a
// status no user can act on (INTERNAL, UNKNOWN: an exception caught by the
// fence, or a reply the client could not parse).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/embedded/embedded_client.h"
#include "core/util/utf8.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/message.h"
#include "google/protobuf/reflection.h"

namespace {

namespace fs = std::filesystem;
namespace pb = google::protobuf;

[[noreturn]] void Finding(const std::string& what) {
  std::fprintf(stderr, "FINDING: %s\n", what.c_str());
  std::abort();
}

void CheckStrings(const pb::Message& m, const std::string& path) {
  const pb::Descriptor* d = m.GetDescriptor();
  const pb::Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    const std::string where = absl::StrCat(path, ".", f->name());
    if (f->type() == pb::FieldDescriptor::TYPE_STRING) {
      const int n = f->is_repeated() ? r->FieldSize(m, f) : 1;
      for (int k = 0; k < n; ++k) {
        const std::string s = f->is_repeated() ? r->GetRepeatedString(m, f, k)
                                               : r->GetString(m, f);
        if (!tensormorph::IsValidUtf8(s)) Finding(where + " is not UTF-8");
      }
    } else if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      if (f->is_repeated()) {
        for (int k = 0; k < r->FieldSize(m, f); ++k) {
          CheckStrings(r->GetRepeatedMessage(m, f, k), where);
        }
      } else if (r->HasField(m, f)) {
        CheckStrings(r->GetMessage(m, f), where);
      }
    }
  }
}

// Map fields serialize in any order unless asked for a deterministic one.
std::string Deterministic(const pb::Message& m) {
  std::string out;
  {
    pb::io::StringOutputStream stream(&out);
    pb::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    if (!m.SerializeToCodedStream(&coded)) {
      Finding(m.GetTypeName() + " does not serialize");
    }
  }
  return out;
}

// The reply as another client would receive it: serialized, parsed, equal.
void CheckReply(const pb::Message& m) {
  const std::string wire = Deterministic(m);
  std::unique_ptr<pb::Message> back(m.New());
  if (!back->ParseFromString(wire)) {
    Finding(m.GetTypeName() + " does not parse back");
  }
  if (Deterministic(*back) != wire) {
    Finding(m.GetTypeName() + " changes on a round trip");
  }
  CheckStrings(m, m.GetTypeName());
}

void CheckStatus(const absl::Status& s, const char* call) {
  if (s.code() == absl::StatusCode::kInternal ||
      s.code() == absl::StatusCode::kUnknown) {
    Finding(absl::StrCat(call, " ended ", s.ToString()));
  }
  if (!tensormorph::IsValidUtf8(s.message())) {
    Finding(absl::StrCat(call, "'s error message is not UTF-8"));
  }
}

tensormorph::Client& TheClient() {
  static tensormorph::Client* client = [] {
    tensormorph::ClientOptions options;
    options.timeout = absl::Seconds(20);
    auto c = tensormorph::EmbeddedClient(options);
    if (!c.ok()) Finding("embedded service: " + c.status().ToString());
    return c->release();
  }();
  return *client;
}

void WriteBytes(const fs::path& p, const uint8_t* data, size_t size) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data),
            static_cast<std::streamsize>(size));
}

// Writes the input as a checkpoint under a fresh name (the registry caches by
// path and file identity; a new path is never served from the cache).
std::string WriteCheckpoint(const uint8_t* data, size_t size) {
  static const fs::path root = [] {
    fs::path p = fs::temp_directory_path() /
                 absl::StrCat("tensormorph-fuzz-service-", getpid());
    fs::remove_all(p);
    fs::create_directories(p);
    return p;
  }();
  static uint64_t n = 0;
  const uint8_t selector = data[0] % 3;
  ++data;
  --size;
  const fs::path dir = root / std::to_string(n++);
  fs::create_directories(dir);
  if (selector == 0) {
    WriteBytes(dir / "x.gguf", data, size);
    return (dir / "x.gguf").string();
  }
  if (selector == 1) {
    WriteBytes(dir / "x.safetensors", data, size);
    return (dir / "x.safetensors").string();
  }
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t config_len = nul == nullptr ? size : nul - data;
  WriteBytes(dir / "config.json", data, config_len);
  const size_t rest = nul == nullptr ? 0 : size - config_len - 1;
  WriteBytes(dir / "model.safetensors", nul == nullptr ? data : nul + 1, rest);
  return dir.string();
}

void Exercise(tensormorph::Client& client, const std::string& ckpt) {
  namespace v1 = tensormorph::v1;
  auto info = client.GetCheckpoint(ckpt);
  CheckStatus(info.status(), "GetCheckpoint");
  if (!info.ok()) return;
  CheckReply(*info);

  std::vector<v1::TensorInfo> tensors;
  v1::ListTensorsRequest list;
  list.set_checkpoint(ckpt);
  const absl::Status listed =
      client.ListTensors(list, [&](const v1::TensorInfo& t) {
        CheckReply(t);
        tensors.push_back(t);
      });
  CheckStatus(listed, "ListTensors");
  if (listed.ok() &&
      static_cast<int64_t>(tensors.size()) != info->tensor_count()) {
    Finding(absl::StrCat("ListTensors sent ", tensors.size(), " of ",
                         info->tensor_count(), " tensors"));
  }

  auto arch = client.GetArchitecture(ckpt);
  CheckStatus(arch.status(), "GetArchitecture");
  if (arch.ok()) CheckReply(*arch);

  for (size_t i = 0; i < tensors.size() && i < 4; ++i) {
    const v1::TensorInfo& t = tensors[i];
    v1::InspectScalarsRequest inspect;
    inspect.set_checkpoint(ckpt);
    inspect.set_tensor(t.name());
    int64_t elements = 1;
    for (int64_t d : t.shape()) elements *= d;
    inspect.add_flat_indices(0);
    inspect.add_flat_indices(elements - 1);
    auto scalars = client.InspectScalars(inspect);
    CheckStatus(scalars.status(), "InspectScalars");
    if (scalars.ok()) CheckReply(*scalars);

    for (auto mode : {v1::OUTPUT_MODE_FLOAT32, v1::OUTPUT_MODE_RAW}) {
      v1::ReadSliceRequest read;
      read.set_checkpoint(ckpt);
      read.set_tensor(t.name());
      read.set_mode(mode);
      read.set_max_chunk_bytes(4096);
      int chunks = 0;
      const absl::Status s =
          client.ReadSlice(read, [&](const v1::SliceChunk& c) {
            CheckReply(c);
            return ++chunks < 16;  // a few chunks, then cancel
          });
      if (s.code() != absl::StatusCode::kCancelled) CheckStatus(s, "ReadSlice");
    }

    v1::ComputeStatsRequest stats;
    stats.set_checkpoint(ckpt);
    stats.set_tensor(t.name());
    stats.set_bins(8);
    auto reply = client.ComputeStats(stats);
    CheckStatus(reply.status(), "ComputeStats");
    if (reply.ok()) CheckReply(*reply);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string ckpt = WriteCheckpoint(data, size);
  Exercise(TheClient(), ckpt);
  std::error_code ignored;
  fs::remove_all(fs::path(ckpt).extension().empty()
                     ? fs::path(ckpt)
                     : fs::path(ckpt).parent_path(),
                 ignored);
  return 0;
}
