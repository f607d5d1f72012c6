#include "core/io/xml_document.h"

#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tensormorph {
namespace {

bool NameStart(char c) {
  return absl::ascii_isalpha(c) || c == '_' || c == ':' ||
         static_cast<unsigned char>(c) >= 0x80;
}
bool NameChar(char c) {
  return NameStart(c) || absl::ascii_isdigit(c) || c == '-' || c == '.';
}
bool Space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

class Parser {
 public:
  explicit Parser(absl::string_view text) : s_(text) {}

  absl::StatusOr<XmlElement> Document() {
    if (s_.size() > kMaxXmlBytes) {
      return Error(absl::StrCat(s_.size(), " bytes, more than ", kMaxXmlBytes));
    }
    if (absl::StartsWith(s_, "<?xml")) {
      const size_t end = s_.find("?>");
      if (end == absl::string_view::npos)
        return Error("an unclosed XML declaration");
      pos_ = end + 2;
    }
    if (absl::Status s = Misc(); !s.ok()) return s;
    if (pos_ >= s_.size()) return Error("no root element");
    XmlElement root;
    if (absl::Status s = Element(&root, 1); !s.ok()) return s;
    if (absl::Status s = Misc(); !s.ok()) return s;
    if (pos_ != s_.size()) return Error("content after the root element");
    return root;
  }

 private:
  absl::Status Error(absl::string_view rule) const {
    return absl::DataLossError(absl::StrCat("XML at byte ", pos_, ": ", rule));
  }
  bool Consume(absl::string_view lit) {
    if (!absl::StartsWith(s_.substr(pos_), lit)) return false;
    pos_ += lit.size();
    return true;
  }
  void SkipSpace() {
    while (pos_ < s_.size() && Space(s_[pos_])) ++pos_;
  }
  // Whitespace and comments between top-level parts.
  absl::Status Misc() {
    for (;;) {
      SkipSpace();
      if (absl::StartsWith(s_.substr(pos_), "<!--")) {
        if (absl::Status s = Comment(); !s.ok()) return s;
        continue;
      }
      if (absl::StartsWith(s_.substr(pos_), "<!"))
        return Error("a DOCTYPE or declaration");
      if (absl::StartsWith(s_.substr(pos_), "<?"))
        return Error("a processing instruction");
      return absl::OkStatus();
    }
  }
  absl::Status Comment() {
    const size_t end = s_.find("-->", pos_ + 4);
    if (end == absl::string_view::npos) return Error("an unclosed comment");
    pos_ = end + 3;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Name() {
    const size_t start = pos_;
    if (pos_ >= s_.size() || !NameStart(s_[pos_]))
      return Error("a malformed name");
    while (pos_ < s_.size() && NameChar(s_[pos_])) ++pos_;
    return std::string(s_.substr(start, pos_ - start));
  }
  absl::Status Entity(std::string* out) {
    const size_t semi = s_.find(';', pos_);
    if (semi == absl::string_view::npos || semi - pos_ > 12) {
      return Error("an unterminated entity");
    }
    absl::string_view e = s_.substr(pos_ + 1, semi - pos_ - 1);
    if (e == "amp")
      out->push_back('&');
    else if (e == "lt")
      out->push_back('<');
    else if (e == "gt")
      out->push_back('>');
    else if (e == "quot")
      out->push_back('"');
    else if (e == "apos")
      out->push_back('\'');
    else if (absl::StartsWith(e, "#")) {
      uint32_t cp = 0;
      const bool hex = absl::StartsWith(e, "#x");
      absl::string_view digits = e.substr(hex ? 2 : 1);
      if (digits.empty() || digits.size() > 8)
        return Error("a malformed character reference");
      for (char c : digits) {
        if (!(hex ? absl::ascii_isxdigit(c) : absl::ascii_isdigit(c))) {
          return Error("a malformed character reference");
        }
      }
      bool ok = hex ? absl::SimpleHexAtoi(digits, &cp)
                    : absl::SimpleAtoi(digits, &cp);
      if (!ok || cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return Error("a character reference outside Unicode's scalar values");
      }
      AppendUtf8(cp, out);
    } else {
      return Error("an unknown entity");
    }
    pos_ = semi + 1;
    return absl::OkStatus();
  }
  absl::Status Attributes(bool* self_closing) {
    for (;;) {
      const size_t before = pos_;
      SkipSpace();
      if (Consume("/>")) {
        *self_closing = true;
        return absl::OkStatus();
      }
      if (Consume(">")) {
        *self_closing = false;
        return absl::OkStatus();
      }
      if (pos_ == before) return Error("a malformed tag");
      absl::StatusOr<std::string> name = Name();
      if (!name.ok()) return name.status();
      SkipSpace();
      if (!Consume("=")) return Error("an attribute without '='");
      SkipSpace();
      if (pos_ >= s_.size() || (s_[pos_] != '"' && s_[pos_] != '\'')) {
        return Error("an unquoted attribute value");
      }
      const char quote = s_[pos_++];
      const size_t end = s_.find(quote, pos_);
      if (end == absl::string_view::npos)
        return Error("an unclosed attribute value");
      if (s_.substr(pos_, end - pos_).find('<') != absl::string_view::npos) {
        return Error("'<' in an attribute value");
      }
      pos_ = end + 1;
    }
  }
  absl::Status Element(XmlElement* out, int depth) {
    if (depth > kMaxXmlDepth)
      return Error(absl::StrCat("deeper than ", kMaxXmlDepth));
    if (++elements_ > kMaxXmlElements) {
      return Error(absl::StrCat("more than ", kMaxXmlElements, " elements"));
    }
    if (!Consume("<")) return Error("an element expected");
    absl::StatusOr<std::string> name = Name();
    if (!name.ok()) return name.status();
    out->name = *std::move(name);
    bool self_closing = false;
    if (absl::Status s = Attributes(&self_closing); !s.ok()) return s;
    if (self_closing) return absl::OkStatus();
    for (;;) {
      if (pos_ >= s_.size())
        return Error(absl::StrCat("<", out->name, "> is not closed"));
      const char c = s_[pos_];
      if (c == '&') {
        if (absl::Status s = Entity(&out->text); !s.ok()) return s;
      } else if (c != '<') {
        out->text.push_back(c);
        ++pos_;
      } else if (Consume("</")) {
        absl::StatusOr<std::string> end = Name();
        if (!end.ok()) return end.status();
        if (*end != out->name) {
          return Error(absl::StrCat("</", *end, "> closes <", out->name, ">"));
        }
        SkipSpace();
        if (!Consume(">")) return Error("a malformed end tag");
        return absl::OkStatus();
      } else if (absl::StartsWith(s_.substr(pos_), "<!--")) {
        if (absl::Status s = Comment(); !s.ok()) return s;
      } else if (Consume("<![CDATA[")) {
        const size_t end = s_.find("]]>", pos_);
        if (end == absl::string_view::npos)
          return Error("an unclosed CDATA section");
        absl::StrAppend(&out->text, s_.substr(pos_, end - pos_));
        pos_ = end + 3;
      } else if (absl::StartsWith(s_.substr(pos_), "<!") ||
                 absl::StartsWith(s_.substr(pos_), "<?")) {
        return Error(
            "a declaration or processing instruction inside an element");
      } else {
        out->children.emplace_back();
        if (absl::Status s = Element(&out->children.back(), depth + 1); !s.ok())
          return s;
      }
    }
  }

  absl::string_view s_;
  size_t pos_ = 0;
  size_t elements_ = 0;
};

}  // namespace

const XmlElement* XmlElement::Child(absl::string_view name) const {
  for (const XmlElement& c : children) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

absl::StatusOr<XmlElement> ParseXml(absl::string_view text) {
  return Parser(text).Document();
}

}  // namespace tensormorph
