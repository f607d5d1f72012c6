#include "server/wire_check.h"

#include <climits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/util/utf8.h"

namespace tensormorph {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Where a bad string was found: the path is built only then, on the way
// back up, so a message that passes allocates no path at all.
struct Bad {
  std::string path;
  std::string value;
};

// The string and message fields of a message type: the only ones worth a
// look. Cached per type (per thread, so no lock): ListFields on every
// message cost twice as much as the rest of the check.
const std::vector<const FieldDescriptor*>& FieldsToVisit(
    const google::protobuf::Descriptor* d) {
  thread_local absl::flat_hash_map<const google::protobuf::Descriptor*,
                                   std::vector<const FieldDescriptor*>>
      cache;
  auto [it, inserted] = cache.try_emplace(d);
  if (inserted) {
    for (int k = 0; k < d->field_count(); ++k) {
      const FieldDescriptor* f = d->field(k);
      if (f->type() == FieldDescriptor::TYPE_STRING ||
          f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        it->second.push_back(f);
      }
    }
  }
  return it->second;
}

bool CheckStrings(const Message& m, Bad* bad) {
  const Reflection* r = m.GetReflection();
  std::string scratch;
  for (const FieldDescriptor* f : FieldsToVisit(m.GetDescriptor())) {
    const bool is_string = f->type() == FieldDescriptor::TYPE_STRING;
    int n;
    if (f->is_repeated()) {
      n = r->FieldSize(m, f);
    } else {
      // An unset singular message is not walked (its defaults are empty);
      // an unset string is empty, hence valid, and cheap to look at.
      n = is_string || r->HasField(m, f) ? 1 : 0;
    }
    for (int i = 0; i < n; ++i) {
      bool ok;
      if (is_string) {
        const std::string& v =
            f->is_repeated() ? r->GetRepeatedStringReference(m, f, i, &scratch)
                             : r->GetStringReference(m, f, &scratch);
        ok = IsValidUtf8(v);
        if (!ok) bad->value = v;
      } else {
        ok = CheckStrings(f->is_repeated() ? r->GetRepeatedMessage(m, f, i)
                                           : r->GetMessage(m, f),
                          bad);
      }
      if (!ok) {
        bad->path = absl::StrCat(
            f->name(), f->is_repeated() ? absl::StrCat("[", i, "]") : "",
            bad->path.empty() ? "" : ".", bad->path);
        return false;
      }
    }
  }
  return true;
}

}  // namespace

absl::Status CheckWireSafe(const Message& message) {
  if (const size_t size = message.ByteSizeLong(); size > INT_MAX) {
    return absl::InternalError(absl::StrCat(
        "the message is ", size, " bytes, over protobuf's limit of ", INT_MAX));
  }
  Bad bad;
  if (CheckStrings(message, &bad)) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("field '", bad.path, "' is not valid UTF-8 ('",
                   EscapeUtf8(bad.value), "' with its bytes escaped)"));
}

}  // namespace tensormorph
