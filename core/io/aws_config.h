// The credentials, region and endpoint S3 requests use, found where the AWS
// SDKs find them.
#ifndef TENSORMORPH_CORE_IO_AWS_CONFIG_H_
#define TENSORMORPH_CORE_IO_AWS_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "core/io/environment.h"

namespace tensormorph {

struct AwsSettings {
  std::string profile;     // the profile read ("default" unless named)
  std::string access_key;  // empty: requests go unsigned (public buckets)
  std::string secret_key;
  std::string session_token;  // sent as x-amz-security-token
  std::string region = "us-east-1";
  // A custom endpoint ("http://127.0.0.1:9000"): objects are addressed
  // path-style beneath it. Empty: AWS's own virtual-hosted endpoints.
  std::string endpoint;
};

inline constexpr char kDefaultAwsRegion[] = "us-east-1";

// In the SDKs' order of precedence:
// - credentials: AWS_ACCESS_KEY_ID with AWS_SECRET_ACCESS_KEY (and
//   AWS_SESSION_TOKEN); else the profile's aws_access_key_id,
//   aws_secret_access_key, aws_session_token in the credentials file
//   ($AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials, section
//   [PROFILE]), else in the config file ($AWS_CONFIG_FILE, default
//   ~/.aws/config, section [profile PROFILE], or [default]);
// - the profile: $AWS_PROFILE, else "default";
// - the region: AWS_REGION, AWS_DEFAULT_REGION, the profile's region in the
//   config file, else us-east-1;
// - the endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
//   endpoint_url in the config file.
// Missing files are no error.
// Errors: INVALID_ARGUMENT when a file is malformed (ParseIni's errors,
// never a line of it), unreadable, or when AWS_PROFILE names a profile
// that neither file has; when a key id comes without a secret or a secret
// without a key id (naming the source, never the values); when the region
// is not of [a-z0-9-]; when the endpoint is not an http(s) URL.
absl::StatusOr<AwsSettings> LoadAwsSettings(const EnvLookup& env);

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_AWS_CONFIG_H_
