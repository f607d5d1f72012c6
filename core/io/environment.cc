#include "core/io/environment.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>

namespace tensormorph {

EnvLookup ProcessEnvironment() {
  return [](absl::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

std::string EnvOr(const EnvLookup& env, absl::string_view name,
                  absl::string_view fallback) {
  std::optional<std::string> v = env(name);
  return v && !v->empty() ? *v : std::string(fallback);
}

std::string HomeDirectory(const EnvLookup& env) {
  std::string home = EnvOr(env, "HOME", "");
  if (!home.empty()) return home;
  struct passwd pw;
  struct passwd* found = nullptr;
  char buf[4096];
  if (::getpwuid_r(::getuid(), &pw, buf, sizeof(buf), &found) == 0 &&
      found != nullptr && found->pw_dir != nullptr) {
    return found->pw_dir;
  }
  return "";
}

}  // namespace tensormorph
