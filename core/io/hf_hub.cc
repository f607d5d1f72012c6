#include "core/io/hf_hub.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/io/mapped_file.h"

namespace tensormorph {
namespace {

constexpr uint64_t kMaxTokenFileBytes = 4096;

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(path, kMaxTokenFileBytes);
  if (absl::IsNotFound(text.status())) return std::string();
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Hub token file '", path, "': unreadable (",
                     absl::StatusCodeToString(text.status().code()), ")"));
  }
  absl::string_view line = *text;
  line = line.substr(0, line.find('\n'));
  line = absl::StripAsciiWhitespace(line);
  for (unsigned char c : line) {
    if (c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat("Hub token file '", path, "': a control byte"));
    }
  }
  return std::string(line);
}

}  // namespace

absl::StatusOr<HubSettings> LoadHubSettings(const EnvLookup& env) {
  HubSettings hub;
  hub.endpoint = EnvOr(env, "HF_ENDPOINT", kDefaultHubEndpoint);
  while (absl::EndsWith(hub.endpoint, "/")) hub.endpoint.pop_back();
  if (OriginOf(hub.endpoint).empty() || absl::StrContains(hub.endpoint, '?') ||
      absl::StrContains(hub.endpoint, '@')) {
    return absl::InvalidArgumentError(
        absl::StrCat("HF_ENDPOINT '", RedactUrl(hub.endpoint),
                     "': want http(s)://host[:port] without credentials or "
                     "query"));
  }
  hub.token = EnvOr(env, "HF_TOKEN", "");
  for (char c : hub.token) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError("HF_TOKEN: a control byte");
    }
  }
  if (!hub.token.empty()) return hub;
  std::string path = EnvOr(env, "HF_TOKEN_PATH", "");
  if (path.empty()) {
    const std::string home =
        EnvOr(env, "HF_HOME",
              absl::StrCat(HomeDirectory(env), "/.cache/huggingface"));
    path = absl::StrCat(home, "/token");
  }
  absl::StatusOr<std::string> token = ReadToken(path);
  if (!token.ok()) return token.status();
  hub.token = *std::move(token);
  return hub;
}

HttpSource HubSource(const HubSettings& hub, const ObjectUrl& url) {
  HttpSource source;
  // The revision is sent as written: its '/' is already %2F.
  source.url =
      absl::StrCat(hub.endpoint, "/", url.repo, "/resolve/", url.revision, "/",
                   PercentEncode(url.repo_path, true));
  source.display = url.display;
  source.bearer_token = hub.token;
  source.bearer_origin = OriginOf(hub.endpoint);
  source.follow_redirects = true;
  return source;
}

}  // namespace tensormorph
