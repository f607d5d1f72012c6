// A small, strict XML parser for the documents an S3 API server answers
// (ListObjectsV2 results, errors): a parser of untrusted bytes, since
// whoever runs the endpoint writes them.
#ifndef TENSORMORPH_CORE_IO_XML_DOCUMENT_H_
#define TENSORMORPH_CORE_IO_XML_DOCUMENT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensormorph {

struct XmlElement {
  std::string name;  // as written, prefix included
  std::string text;  // the element's own character data, entities decoded
  std::vector<XmlElement> children;

  // The first child named `name`, or null.
  const XmlElement* Child(absl::string_view name) const;
};

inline constexpr size_t kMaxXmlBytes = size_t{16} << 20;
inline constexpr int kMaxXmlDepth = 32;
inline constexpr size_t kMaxXmlElements = 1'000'000;

// Parses one document: an optional <?xml ...?> declaration, comments, one
// root element. Attributes are checked for syntax and dropped (S3 results
// carry only xmlns). Character data between elements is kept as the
// parent's text (whitespace included). CDATA sections are text.
// Errors: DATA_LOSS naming the byte offset and the rule: more than
// kMaxXmlBytes, kMaxXmlDepth or kMaxXmlElements; a DOCTYPE (no entity
// definitions, so no expansion attacks) or a processing instruction after
// the start; an unknown entity, a numeric one that is 0, a surrogate or
// beyond U+10FFFF; an end tag that does not match; a malformed name, tag
// or attribute; a '<' or '&' out of place; anything after the root but
// whitespace and comments; no root.
absl::StatusOr<XmlElement> ParseXml(absl::string_view text);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_XML_DOCUMENT_H_
