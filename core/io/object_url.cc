#include "core/io/object_url.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tensormorph {
namespace {

absl::Status Invalid(absl::string_view display, absl::string_view rule) {
  return absl::InvalidArgumentError(
      absl::StrCat("storage URL '", display, "': ", rule));
}

bool HasControlByte(absl::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

// S3's bucket naming rules (the subset every region enforces).
bool ValidBucket(absl::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '.' ||
          c == '-')) {
      return false;
    }
  }
  auto alnum = [](char c) {
    return absl::ascii_islower(c) || absl::ascii_isdigit(c);
  };
  return alnum(b.front()) && alnum(b.back());
}

// The Hub's names of users, organizations and repositories.
bool ValidHubName(absl::string_view n) {
  if (n.empty() || n.size() > 96 || n == "." || n == "..") return false;
  for (char c : n) {
    if (!(absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-')) {
      return false;
    }
  }
  return true;
}

bool ValidRevision(absl::string_view r) {
  if (r.empty() || r.size() > 256 || r == "." || r == "..") return false;
  for (char c : r) {
    if (!(absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-' ||
          c == '%')) {
      return false;
    }
  }
  return true;
}

absl::Status CheckRepoPath(absl::string_view display, absl::string_view p) {
  if (p.empty()) return absl::OkStatus();
  if (absl::StrContains(p, '\\') || absl::StrContains(p, '?') ||
      absl::StrContains(p, '#')) {
    return Invalid(display, "a path in a repository has no '\\', '?' or '#'");
  }
  for (absl::string_view seg : absl::StrSplit(p, '/')) {
    if (seg.empty() || seg == "." || seg == "..") {
      return Invalid(display,
                     "a path in a repository has no empty, '.' or '..' "
                     "segments");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ObjectUrl> ParseHttp(absl::string_view text, UrlScheme scheme,
                                    size_t rest_at, ObjectUrl url) {
  absl::string_view rest = text.substr(rest_at);
  const size_t end = rest.find_first_of("/?#");
  absl::string_view authority = rest.substr(0, end);
  if (authority.empty()) return Invalid(url.display, "no host");
  if (absl::StrContains(authority, '@')) {
    return Invalid(url.display,
                   "credentials in the URL are refused (use a token or a "
                   "presigned URL)");
  }
  for (char c : text) {
    if (absl::ascii_isspace(c)) return Invalid(url.display, "whitespace");
  }
  url.scheme = scheme;
  url.http_url = std::string(text);
  return url;
}

absl::StatusOr<ObjectUrl> ParseS3(absl::string_view rest, ObjectUrl url) {
  if (absl::StrContains(rest, '?') || absl::StrContains(rest, '#')) {
    return Invalid(url.display, "an s3 URL has no query string or fragment");
  }
  const size_t slash = rest.find('/');
  absl::string_view bucket = rest.substr(0, slash);
  if (!ValidBucket(bucket)) {
    return Invalid(url.display,
                   absl::StrCat("bucket '", bucket,
                                "' is not 3-63 of [a-z0-9.-] beginning and "
                                "ending alphanumeric"));
  }
  url.scheme = UrlScheme::kS3;
  url.bucket = std::string(bucket);
  if (slash != absl::string_view::npos) {
    url.key = std::string(rest.substr(slash + 1));
  }
  return url;
}

absl::StatusOr<ObjectUrl> ParseHf(absl::string_view rest, ObjectUrl url) {
  std::vector<absl::string_view> parts =
      absl::StrSplit(rest, absl::MaxSplits('/', 2));
  if (parts.size() < 2) {
    return Invalid(url.display, "want hf://org/repo[@revision]/path");
  }
  absl::string_view org = parts[0];
  absl::string_view repo = parts[1];
  absl::string_view revision = "main";
  const size_t at = repo.find('@');
  if (at != absl::string_view::npos) {
    revision = repo.substr(at + 1);
    repo = repo.substr(0, at);
    if (!ValidRevision(revision)) {
      return Invalid(url.display,
                     "a revision is 1-256 of [A-Za-z0-9._-] ('/' written "
                     "%2F)");
    }
  }
  if (!ValidHubName(org) || !ValidHubName(repo)) {
    return Invalid(url.display,
                   "org and repo are 1-96 of [A-Za-z0-9._-], not '.' or "
                   "'..'");
  }
  absl::string_view path = parts.size() == 3 ? parts[2] : "";
  if (absl::Status s = CheckRepoPath(url.display, path); !s.ok()) return s;
  url.scheme = UrlScheme::kHf;
  url.repo = absl::StrCat(org, "/", repo);
  url.revision = std::string(revision);
  url.repo_path = std::string(path);
  return url;
}

}  // namespace

std::string RedactUrl(absl::string_view url) {
  const size_t q = url.find_first_of("?#");
  absl::string_view kept = url.substr(0, q);
  const size_t scheme_end = kept.find("://");
  if (scheme_end == absl::string_view::npos) return std::string(kept);
  const size_t host_at = scheme_end + 3;
  const size_t path_at = kept.find('/', host_at);
  absl::string_view authority = kept.substr(
      host_at, path_at == absl::string_view::npos ? absl::string_view::npos
                                                  : path_at - host_at);
  const size_t user_end = authority.rfind('@');
  if (user_end == absl::string_view::npos) return std::string(kept);
  return absl::StrCat(kept.substr(0, host_at),
                      kept.substr(host_at + user_end + 1));
}

std::string PercentEncode(absl::string_view s, bool keep_slash) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' ||
        c == '~' || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

std::string OriginOf(absl::string_view url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == absl::string_view::npos) return "";
  const size_t end = url.find_first_of("/?#", scheme_end + 3);
  std::string origin = absl::AsciiStrToLower(url.substr(0, end));
  absl::string_view scheme = absl::string_view(origin).substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") return "";
  // The default port is the same origin as none.
  if (scheme == "https" && absl::EndsWith(origin, ":443"))
    origin.resize(origin.size() - 4);
  if (scheme == "http" && absl::EndsWith(origin, ":80"))
    origin.resize(origin.size() - 3);
  return origin;
}

absl::StatusOr<ObjectUrl> ParseObjectUrl(absl::string_view text) {
  ObjectUrl url;
  url.display = RedactUrl(text);
  if (text.empty()) return Invalid("", "empty");
  if (HasControlByte(text))
    return Invalid(url.display, "a NUL or control byte");
  const size_t sep = text.find("://");
  if (sep == absl::string_view::npos) {
    url.scheme = UrlScheme::kLocal;
    url.path = std::string(text);
    return url;
  }
  const std::string scheme = absl::AsciiStrToLower(text.substr(0, sep));
  absl::string_view rest = text.substr(sep + 3);
  if (scheme == "http") return ParseHttp(text, UrlScheme::kHttp, sep + 3, url);
  if (scheme == "https")
    return ParseHttp(text, UrlScheme::kHttps, sep + 3, url);
  if (scheme == "s3") return ParseS3(rest, url);
  if (scheme == "hf") return ParseHf(rest, url);
  if (scheme == "file") {
    if (!absl::StartsWith(rest, "/")) {
      return Invalid(url.display, "a file URL is absolute (file:///path)");
    }
    url.scheme = UrlScheme::kLocal;
    url.path = std::string(rest);
    return url;
  }
  return Invalid(url.display,
                 absl::StrCat("unsupported scheme '", scheme,
                              "' (want http, https, s3, hf, file or a path)"));
}

}  // namespace tensormorph
