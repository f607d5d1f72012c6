#include "core/io/root_backing.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/io/object_url.h"

namespace tensormorph {
namespace {

// Segments of '/'-separated `rest` that could step out of where it is
// joined: ".", ".." and empty ones (a doubled '/').
bool HasUnsafeSegment(absl::string_view rest) {
  for (absl::string_view seg : absl::StrSplit(rest, '/')) {
    if (seg.empty() || seg == "." || seg == "..") return true;
  }
  return false;
}

absl::Status CheckRoot(const std::string& root) {
  if (root.empty() || root.front() != '/' ||
      (root != "/" && (absl::EndsWith(root, "/") ||
                       HasUnsafeSegment(absl::string_view(root).substr(1))))) {
    return absl::InvalidArgumentError(
        absl::StrCat("backed root '", root,
                     "': must be an absolute directory path without '.', "
                     "'..' or empty segments"));
  }
  return absl::OkStatus();
}

absl::Status CheckPrefix(const std::string& root, std::string* prefix) {
  const size_t scheme = prefix->find("://");
  if (scheme == std::string::npos || scheme == 0 ||
      absl::StartsWith(*prefix, "file://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backing of '", root, "': '", RedactUrl(*prefix),
        "' is no storage URL (s3://bucket/prefix/, https://host/dir/, "
        "hf://org/repo/)"));
  }
  absl::StatusOr<ObjectUrl> url = ParseObjectUrl(*prefix);
  if (!url.ok()) return url.status();
  const absl::string_view after = absl::string_view(*prefix).substr(scheme + 3);
  if (absl::StrContains(after, "?") || absl::StrContains(after, "#")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backing of '", root, "': '", url->display,
        "' has a query string or fragment: a prefix is joined with file "
        "paths, so it cannot carry one"));
  }
  for (absl::string_view seg : absl::StrSplit(after, '/')) {
    if (seg == "." || seg == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("backing of '", root, "': '", url->display,
                       "' holds a '.' or '..' segment"));
    }
  }
  if (!absl::EndsWith(*prefix, "/")) prefix->push_back('/');
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const RootBackings>> RootBackings::Create(
    std::vector<RootBacking> backings) {
  for (size_t i = 0; i < backings.size(); ++i) {
    RootBacking& b = backings[i];
    if (absl::Status s = CheckRoot(b.root); !s.ok()) return s;
    if (absl::Status s = CheckPrefix(b.root, &b.prefix); !s.ok()) return s;
    for (size_t j = 0; j < i; ++j) {
      if (backings[j].root == b.root) {
        return absl::InvalidArgumentError(
            absl::StrCat("root '", b.root, "' is backed twice ('",
                         RedactUrl(backings[j].prefix), "' and '",
                         RedactUrl(b.prefix), "'): one backing per root"));
      }
    }
  }
  return std::shared_ptr<const RootBackings>(
      new RootBackings(std::move(backings)));
}

std::optional<std::string> RootBackings::UrlOf(absl::string_view path) const {
  const RootBacking* best = nullptr;
  absl::string_view best_rest;
  for (const RootBacking& b : backings_) {
    absl::string_view rest = path;
    if (!absl::ConsumePrefix(&rest, b.root)) continue;
    if (b.root != "/" && !rest.empty() && !absl::ConsumePrefix(&rest, "/")) {
      continue;  // "/data2" is not beneath "/data"
    }
    if (b.root == "/") absl::ConsumePrefix(&rest, "/");
    if (best == nullptr || b.root.size() > best->root.size()) {
      best = &b;
      best_rest = rest;
    }
  }
  if (best == nullptr) return std::nullopt;
  if (!best_rest.empty() && HasUnsafeSegment(best_rest)) return std::nullopt;
  return absl::StrCat(best->prefix, best_rest);
}

}  // namespace tensormorph
