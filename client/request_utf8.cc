#include "client/request_utf8.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/util/error_reason.h"
#include "core/util/utf8.h"

namespace tensormorph {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Whether a message of type `d` can hold a string at any depth: the
// 100,000 coordinates of an InspectScalars request are not walked one by
// one for none.
bool MayHoldStrings(const Descriptor* d,
                    absl::flat_hash_set<const Descriptor*>& seen) {
  if (!seen.insert(d).second) return false;  // on the walk already
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->type() == FieldDescriptor::TYPE_STRING) return true;
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
        MayHoldStrings(f->message_type(), seen)) {
      return true;
    }
  }
  return false;
}

// The path of the first string field beneath `m` that is not UTF-8 (its
// value in *bad), or "" when there is none.
std::string FirstNonUtf8(const Message& m, const std::string& prefix,
                         std::string* bad) {
  const Reflection& r = *m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r.ListFields(m, &fields);  // the set ones only
  for (const FieldDescriptor* f : fields) {
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      absl::flat_hash_set<const Descriptor*> seen;
      if (!MayHoldStrings(f->message_type(), seen)) continue;
    } else if (f->type() != FieldDescriptor::TYPE_STRING) {
      continue;
    }
    const std::string path = absl::StrCat(prefix, f->name());
    const int n = f->is_repeated() ? r.FieldSize(m, f) : 1;
    for (int i = 0; i < n; ++i) {
      if (f->type() == FieldDescriptor::TYPE_STRING) {
        std::string scratch;
        const std::string& s =
            f->is_repeated() ? r.GetRepeatedStringReference(m, f, i, &scratch)
                             : r.GetStringReference(m, f, &scratch);
        if (!IsValidUtf8(s)) {
          *bad = s;
          return path;
        }
      } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        const Message& sub = f->is_repeated() ? r.GetRepeatedMessage(m, f, i)
                                              : r.GetMessage(m, f);
        std::string hit = FirstNonUtf8(sub, path + ".", bad);
        if (!hit.empty()) return hit;
      }
    }
  }
  return "";
}

}  // namespace

absl::Status CheckRequestUtf8(const Message& request) {
  std::string bad;
  const std::string field = FirstNonUtf8(request, "", &bad);
  if (field.empty()) return absl::OkStatus();
  return RequestFieldError(
      field, absl::StrCat("'", EscapeUtf8(bad), "' (", field,
                          ") holds bytes "
                          "that are not UTF-8, which the API cannot carry: "
                          "spell each such byte as \\xHH, as listings show it "
                          "(tensormorph ls)"));
}

}  // namespace tensormorph
