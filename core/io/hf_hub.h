// Files on the Hugging Face Hub: hf://org/repo[@revision]/path read from
// ${HF_ENDPOINT}/org/repo/resolve/REVISION/path, whose redirect to the CDN
// is followed without the token.
#ifndef TENSORMORPH_CORE_IO_HF_HUB_H_
#define TENSORMORPH_CORE_IO_HF_HUB_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/io/environment.h"
#include "core/io/http_object.h"
#include "core/io/object_url.h"

namespace tensormorph {

inline constexpr char kDefaultHubEndpoint[] = "https://huggingface.co";

struct HubSettings {
  std::string endpoint = kDefaultHubEndpoint;  // no trailing '/'
  std::string token;                           // empty: anonymous
};

// endpoint: $HF_ENDPOINT, else https://huggingface.co. token: $HF_TOKEN,
// else the first line of $HF_TOKEN_PATH, else of $HF_HOME/token (HF_HOME
// defaulting to ~/.cache/huggingface), trimmed; a missing file is no token.
// Errors: INVALID_ARGUMENT when the endpoint is not an http(s) URL without
// credentials or query, or a token file is unreadable (naming the file,
// never its content) or holds a control byte.
absl::StatusOr<HubSettings> LoadHubSettings(const EnvLookup& env);

// The source of an hf:// URL: the resolve URL, the token as a bearer
// token for the endpoint's origin only (a redirect to the CDN, another
// origin, never carries it), redirects followed at open. Its display is the
// hf:// URL.
// REQUIRES: url.scheme == UrlScheme::kHf and url.repo_path is not empty.
HttpSource HubSource(const HubSettings& hub, const ObjectUrl& url);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_HF_HUB_H_
