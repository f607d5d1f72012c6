#include "server/wire_check.h"

#include <climits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/util/utf8.h"

namespace tensormorph {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

absl::Status BadString(const std::string& path, const std::string& value) {
  return absl::InternalError(
      absl::StrCat("field '", path, "' is not valid UTF-8 ('",
                   EscapeUtf8(value), "' with its bytes escaped)"));
}

absl::Status CheckStrings(const Message& m, const std::string& prefix) {
  const Reflection* r = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  std::string scratch;
  for (const FieldDescriptor* f : fields) {
    const std::string path = absl::StrCat(prefix, f->name());
    const bool is_string = f->type() == FieldDescriptor::TYPE_STRING;
    const bool is_message = f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE;
    if (!is_string && !is_message) continue;
    if (f->is_repeated()) {
      const int n = r->FieldSize(m, f);
      for (int i = 0; i < n; ++i) {
        const std::string at = absl::StrCat(path, "[", i, "]");
        if (is_string) {
          const std::string& v =
              r->GetRepeatedStringReference(m, f, i, &scratch);
          if (!IsValidUtf8(v)) return BadString(at, v);
        } else if (absl::Status s =
                       CheckStrings(r->GetRepeatedMessage(m, f, i), at + ".");
                   !s.ok()) {
          return s;
        }
      }
    } else if (is_string) {
      const std::string& v = r->GetStringReference(m, f, &scratch);
      if (!IsValidUtf8(v)) return BadString(path, v);
    } else if (absl::Status s = CheckStrings(r->GetMessage(m, f), path + ".");
               !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckWireSafe(const Message& message) {
  if (const size_t size = message.ByteSizeLong(); size > INT_MAX) {
    return absl::InternalError(absl::StrCat(
        "the message is ", size, " bytes, over protobuf's limit of ", INT_MAX));
  }
  return CheckStrings(message, "");
}

}  // namespace tensormorph
