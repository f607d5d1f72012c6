// Where core/io reads environment variables and small files of the user's
// (tokens, AWS profiles): through one lookup, so tests hand in their own
// instead of changing the process's environment.
#ifndef TENSORMORPH_CORE_IO_ENVIRONMENT_H_
#define TENSORMORPH_CORE_IO_ENVIRONMENT_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace tensormorph {

// The value of a variable, or nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(absl::string_view)>;

// getenv(3).
EnvLookup ProcessEnvironment();

// The variable when set and non-empty, else `fallback`.
std::string EnvOr(const EnvLookup& env, absl::string_view name,
                  absl::string_view fallback);

// $HOME, else the passwd entry's home; "" when neither.
std::string HomeDirectory(const EnvLookup& env);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_ENVIRONMENT_H_
