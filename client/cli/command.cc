#include "client/cli/command.h"

#include <string>

#include "core/util/utf8.h"

namespace tensormorph {

CLI::Validator OutputPathValidator() {
  return CLI::Validator(
      [](std::string& path) {
        return path.empty() ? std::string("an empty path: name a file")
                            : std::string();
      },
      "PATH");
}

void EscapeTensorName(std::string* name) {
  if (!IsValidUtf8(*name)) *name = EscapeUtf8(*name);
}

CLI::Validator ServedPath() {
  return CLI::Validator(
      [](std::string& path) {
        EscapeTensorName(&path);
        return std::string();
      },
      "");
}

}  // namespace tensormorph
