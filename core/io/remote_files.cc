#include "core/io/remote_files.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/io/object_url.h"
#include "core/util/error_reason.h"

namespace tensormorph {
namespace {

// What a loader tries in a directory that cannot be listed (HTTP, the Hub).
constexpr const char* kProbedNames[] = {
    "model.safetensors.index.json", "model.safetensors", "config.json",
    "quantize_config.json",         "quant_config.json", "hf_quant_config.json",
};

std::string WithSlash(absl::string_view url) {
  return absl::EndsWith(url, "/") ? std::string(url) : absl::StrCat(url, "/");
}

struct stat Directory() {
  struct stat st = {};
  st.st_mode = S_IFDIR | 0555;
  return st;
}

}  // namespace

bool RemoteFiles::IsUrl(absl::string_view path) {
  const size_t colon = path.find("://");
  return colon != absl::string_view::npos && colon > 0 &&
         !absl::StartsWith(path, "file://");
}

absl::StatusOr<std::shared_ptr<const RemoteFiles>> RemoteFiles::Create(
    RemoteFilesOptions options) {
  for (const std::string& root : options.roots) {
    absl::StatusOr<ObjectUrl> url = ParseObjectUrl(root);
    if (!url.ok()) return url.status();
    if (!IsUrl(root) || !absl::EndsWith(root, "/")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "remote root '", url->display,
          "': must be a storage URL ending in '/' (a prefix, like a "
          "directory)"));
    }
  }
  absl::StatusOr<std::shared_ptr<const ObjectStore>> store =
      ObjectStore::Create(options.storage);
  if (!store.ok()) return store.status();
  absl::StatusOr<std::shared_ptr<MirrorBudget>> budget =
      MirrorBudget::Create(options.budget_bytes);
  if (!budget.ok()) return budget.status();
  return std::shared_ptr<const RemoteFiles>(new RemoteFiles(
      std::move(options), *std::move(store), *std::move(budget)));
}

absl::Status RemoteFiles::CheckBeneathRoots(absl::string_view url) const {
  if (options_.roots.empty()) return absl::OkStatus();
  for (const std::string& root : options_.roots) {
    // ParseObjectUrl refuses '.' and '..' segments of hf paths; for the
    // others a textual prefix is the whole rule, so refuse them here too.
    if (absl::StartsWith(url, root) && !absl::StrContains(url, "/../") &&
        !absl::EndsWith(url, "/..") && !absl::StrContains(url, "/./")) {
      return absl::OkStatus();
    }
    if (WithSlash(url) == root) return absl::OkStatus();  // the root itself
  }
  return WithReason(
      absl::PermissionDeniedError(absl::StrCat(
          "'", RedactUrl(url), "' lies beneath none of the server's roots")),
      ErrorReason::kOutsideRoots, {{"path", RedactUrl(url)}});
}

absl::StatusOr<struct stat> RemoteFiles::Stat(absl::string_view url) const {
  if (absl::Status s = CheckBeneathRoots(url); !s.ok()) return s;
  absl::StatusOr<ObjectUrl> parsed = ParseObjectUrl(url);
  if (!parsed.ok()) return parsed.status();
  if (absl::EndsWith(url, "/") ||
      (parsed->scheme == UrlScheme::kHf && parsed->repo_path.empty())) {
    return Directory();
  }
  absl::StatusOr<std::shared_ptr<const MappedFile>> m = Map(url);
  if (m.ok()) {
    struct stat st = {};
    st.st_mode = S_IFREG | 0444;
    st.st_size = static_cast<off_t>((*m)->size());
    return st;
  }
  if (absl::IsNotFound(m.status()) && parsed->scheme == UrlScheme::kS3) {
    absl::StatusOr<std::vector<ObjectInfo>> below =
        store_->List(WithSlash(url));
    if (below.ok() && !below->empty()) return Directory();
  }
  return m.status();
}

absl::StatusOr<std::vector<std::string>> RemoteFiles::ListDirectory(
    absl::string_view url) const {
  if (absl::Status s = CheckBeneathRoots(url); !s.ok()) return s;
  absl::StatusOr<ObjectUrl> parsed = ParseObjectUrl(url);
  if (!parsed.ok()) return parsed.status();
  const std::string dir = WithSlash(url);
  std::vector<std::string> names;
  if (parsed->scheme == UrlScheme::kS3) {
    absl::StatusOr<std::vector<ObjectInfo>> below = store_->List(dir);
    if (!below.ok()) return below.status();
    for (const ObjectInfo& o : *below) {
      if (!absl::StartsWith(o.url, dir)) continue;
      absl::string_view rest = absl::string_view(o.url).substr(dir.size());
      const size_t slash = rest.find('/');
      std::string name(rest.substr(0, slash));
      if (!name.empty() && (names.empty() || names.back() != name)) {
        names.push_back(std::move(name));
      }
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
  }
  std::vector<std::string> probes;
  for (const char* name : kProbedNames) probes.push_back(dir + name);
  Prefetch(probes, 0);
  for (const char* name : kProbedNames) {
    absl::StatusOr<std::shared_ptr<const MappedFile>> m = Map(dir + name);
    if (m.ok()) {
      names.push_back(name);
    } else if (!absl::IsNotFound(m.status())) {
      return m.status();  // a refusal or an outage is not an absent name
    }
  }
  return names;
}

absl::StatusOr<std::shared_ptr<const MappedFile>> RemoteFiles::Map(
    absl::string_view url) const {
  if (absl::Status s = CheckBeneathRoots(url); !s.ok()) return s;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = recent_.find(url);
    if (it != recent_.end() && now - it->second.opened < kRecentFor) {
      return it->second.file;
    }
  }
  absl::StatusOr<std::shared_ptr<const MappedFile>> m = MapUncached(url);
  // Other failures (an outage, a refusal) are asked again next time.
  if (!m.ok() && !absl::IsNotFound(m.status())) return m.status();
  std::lock_guard<std::mutex> l(mu_);
  auto [it, fresh] = recent_.insert_or_assign(std::string(url), Recent{m, now});
  if (fresh) recent_order_.push_back(it->first);
  while (recent_order_.size() > kRecentFiles) {
    recent_.erase(recent_order_.front());
    recent_order_.pop_front();
  }
  return m;
}

absl::StatusOr<std::shared_ptr<const MappedFile>> RemoteFiles::MapUncached(
    absl::string_view url) const {
  absl::StatusOr<std::shared_ptr<const ObjectReader>> reader =
      store_->Open(url);
  if (!reader.ok()) return reader.status();
  absl::StatusOr<std::shared_ptr<const RemoteMirror>> mirror =
      RemoteMirror::Create(*std::move(reader), budget_);
  if (!mirror.ok()) return mirror.status();
  return MappedFile::FromMirror(std::string(url), *std::move(mirror));
}

absl::StatusOr<std::string> RemoteFiles::ReadWhole(absl::string_view url,
                                                   uint64_t max_bytes) const {
  absl::StatusOr<std::shared_ptr<const MappedFile>> m = Map(url);
  if (!m.ok()) return m.status();
  const RemoteMirror& mirror = *(*m)->mirror();
  if (mirror.size() > max_bytes) {
    return absl::DataLossError(absl::StrCat(
        "'", mirror.reader().display(), "' is ", mirror.size(),
        " bytes, over the limit of ", max_bytes, " for such a file"));
  }
  // From the reader, not the mirror: no fault, and a small object's bytes
  // came with the request that opened it.
  std::string out(mirror.size(), '\0');
  if (absl::Status s = mirror.reader().ReadAt(0, out.size(), out.data());
      !s.ok()) {
    return s;
  }
  return out;
}

void RemoteFiles::Prefetch(const std::vector<std::string>& urls,
                           uint64_t head_bytes) const {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < urls.size();) {
      absl::StatusOr<std::shared_ptr<const MappedFile>> m = Map(urls[i]);
      if (!m.ok() || head_bytes == 0) continue;
      const RemoteMirror& mirror = *(*m)->mirror();
      (void)mirror.EnsureResident(0, std::min(head_bytes, mirror.size()));
    }
  };
  const size_t threads = std::min<size_t>(
      urls.size(), static_cast<size_t>(std::max(1, options_.parallel_opens)));
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
}

}  // namespace tensormorph
