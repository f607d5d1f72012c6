#include "core/io/ini_file.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace tensormorph {

absl::StatusOr<IniSections> ParseIni(absl::string_view name,
                                     absl::string_view text) {
  auto error = [&](size_t line, absl::string_view rule) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", name, "' line ", line, ": ", rule));
  };
  if (text.size() > kMaxIniBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", name, "': ", text.size(), " bytes, more than ", kMaxIniBytes));
  }
  if (absl::StrContains(text, '\0')) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "': a NUL byte"));
  }
  IniSections sections;
  std::map<std::string, std::string>* section = nullptr;
  bool in_nested = false;  // after "key =" with no value
  size_t number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    absl::ConsumeSuffix(&line, "\r");
    const bool indented =
        !line.empty() && (line.front() == ' ' || line.front() == '\t');
    absl::string_view body = absl::StripAsciiWhitespace(line);
    if (body.empty() || body.front() == '#' || body.front() == ';') continue;
    if (indented && in_nested) continue;
    in_nested = false;
    if (body.front() == '[') {
      const size_t close = body.find(']');
      if (close == absl::string_view::npos) {
        return error(number, "a section header without ']'");
      }
      if (close + 1 != body.size()) {
        return error(number, "text after a section header");
      }
      absl::string_view title =
          absl::StripAsciiWhitespace(body.substr(1, close - 1));
      if (title.empty()) return error(number, "an empty section name");
      if (sections.size() >= kMaxIniSections &&
          sections.find(std::string(title)) == sections.end()) {
        return error(number,
                     absl::StrCat("more than ", kMaxIniSections, " sections"));
      }
      section = &sections[std::string(title)];
      continue;
    }
    const size_t sep = body.find_first_of("=:");
    if (sep == absl::string_view::npos) {
      return error(number, "neither a section, a key = value, nor a comment");
    }
    if (section == nullptr) return error(number, "a key outside any section");
    absl::string_view key = absl::StripAsciiWhitespace(body.substr(0, sep));
    absl::string_view value = absl::StripAsciiWhitespace(body.substr(sep + 1));
    if (key.empty()) return error(number, "an empty key");
    if (value.empty()) in_nested = true;
    (*section)[absl::AsciiStrToLower(key)] = std::string(value);
  }
  return sections;
}

}  // namespace tensormorph
