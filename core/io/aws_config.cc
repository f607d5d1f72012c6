#include "core/io/aws_config.h"

#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/io/ini_file.h"
#include "core/io/mapped_file.h"
#include "core/io/object_url.h"

namespace tensormorph {
namespace {

using Section = std::map<std::string, std::string>;

// The sections of `path`, or none when it does not exist.
absl::StatusOr<IniSections> ReadIniFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(path, kMaxIniBytes);
  if (absl::IsNotFound(text.status())) return IniSections{};
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AWS shared file: ", text.status().message()));
  }
  return ParseIni(path, *text);
}

const Section* Find(const IniSections& s, const std::string& name) {
  auto it = s.find(name);
  return it == s.end() ? nullptr : &it->second;
}

std::string Get(const Section* s, const std::string& key) {
  if (s == nullptr) return "";
  auto it = s->find(key);
  return it == s->end() ? "" : it->second;
}

// Both or neither.
absl::Status CheckPair(const std::string& id, const std::string& secret,
                       absl::string_view source) {
  if (id.empty() != secret.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ",
                     id.empty() ? "a secret access key without a key id"
                                : "an access key id without a secret"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AwsSettings> LoadAwsSettings(const EnvLookup& env) {
  AwsSettings out;
  const std::string home = HomeDirectory(env);
  const std::optional<std::string> named = env("AWS_PROFILE");
  out.profile = named && !named->empty() ? *named : "default";
  const std::string cred_path = EnvOr(env, "AWS_SHARED_CREDENTIALS_FILE",
                                      absl::StrCat(home, "/.aws/credentials"));
  const std::string conf_path =
      EnvOr(env, "AWS_CONFIG_FILE", absl::StrCat(home, "/.aws/config"));
  absl::StatusOr<IniSections> creds = ReadIniFile(cred_path);
  if (!creds.ok()) return creds.status();
  absl::StatusOr<IniSections> conf = ReadIniFile(conf_path);
  if (!conf.ok()) return conf.status();
  const Section* cred_section = Find(*creds, out.profile);
  const Section* conf_section =
      out.profile == "default"
          ? Find(*conf, "default")
          : Find(*conf, absl::StrCat("profile ", out.profile));
  if (named && !named->empty() && cred_section == nullptr &&
      conf_section == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("AWS_PROFILE '", out.profile, "': no such profile in '",
                     cred_path, "' or '", conf_path, "'"));
  }

  const std::string env_id = EnvOr(env, "AWS_ACCESS_KEY_ID", "");
  const std::string env_secret = EnvOr(env, "AWS_SECRET_ACCESS_KEY", "");
  if (absl::Status s = CheckPair(env_id, env_secret, "environment"); !s.ok()) {
    return s;
  }
  if (!env_id.empty()) {
    out.access_key = env_id;
    out.secret_key = env_secret;
    out.session_token = EnvOr(env, "AWS_SESSION_TOKEN", "");
  } else {
    for (const auto& [section, path] : {std::pair{cred_section, cred_path},
                                        std::pair{conf_section, conf_path}}) {
      const std::string id = Get(section, "aws_access_key_id");
      const std::string secret = Get(section, "aws_secret_access_key");
      if (absl::Status s = CheckPair(
              id, secret, absl::StrCat("'", path, "' profile ", out.profile));
          !s.ok()) {
        return s;
      }
      if (!id.empty()) {
        out.access_key = id;
        out.secret_key = secret;
        out.session_token = Get(section, "aws_session_token");
        break;
      }
    }
  }

  out.region =
      EnvOr(env, "AWS_REGION",
            EnvOr(env, "AWS_DEFAULT_REGION", Get(conf_section, "region")));
  if (out.region.empty()) out.region = kDefaultAwsRegion;
  for (char c : out.region) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-')) {
      return absl::InvalidArgumentError(
          absl::StrCat("AWS region '", out.region, "': want [a-z0-9-]"));
    }
  }
  out.endpoint =
      EnvOr(env, "AWS_ENDPOINT_URL_S3",
            EnvOr(env, "AWS_ENDPOINT_URL", Get(conf_section, "endpoint_url")));
  while (absl::EndsWith(out.endpoint, "/")) out.endpoint.pop_back();
  if (!out.endpoint.empty() &&
      (OriginOf(out.endpoint).empty() || absl::StrContains(out.endpoint, '?') ||
       absl::StrContains(out.endpoint, '@'))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AWS endpoint '", RedactUrl(out.endpoint),
        "': want http(s)://host[:port][/path] without credentials or query"));
  }
  return out;
}

}  // namespace tensormorph
