// Local root directories backed by storage URL prefixes: `tensormorphd
// --root /data/ckpts --backing /data/ckpts=s3://bucket/prefix/`. A file
// beneath a backed root that is absent on the local disk is read from the
// prefix joined with the file's path relative to the root, so a server
// whose volume holds some of a checkpoint's shards serves all of it, and
// the local copy of a file, when present, is the one read
// (CheckpointFiles).
#ifndef TENSORMORPH_CORE_IO_ROOT_BACKING_H_
#define TENSORMORPH_CORE_IO_ROOT_BACKING_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tensormorph {

struct RootBacking {
  // An absolute, normalised local directory: the spelling FileAccess opens
  // beneath (a root's realpath).
  std::string root;
  // A storage URL prefix (s3://, https://, http://, hf://); '/' is added
  // when it does not end in one.
  std::string prefix;
};

// Thread safety: immutable after Create; every method is thread-safe.
class RootBackings {
 public:
  // Errors: INVALID_ARGUMENT naming the rule: a root that is not absolute
  // or not normalised (a '.', '..' or empty segment); a prefix that is no
  // storage URL, or that ParseObjectUrl refuses, or that has a query string
  // or a '.' or '..' segment; two backings of one root.
  static absl::StatusOr<std::shared_ptr<const RootBackings>> Create(
      std::vector<RootBacking> backings);

  // The URL that backs local `path` (absolute and normalised, as a
  // checkpoint's files are spelled): the prefix of the innermost backed
  // root `path` lies beneath, joined with the rest of `path` ("" for the
  // root itself). nullopt when `path` lies beneath no backed root, or holds
  // a '.', '..' or empty segment below it (never mapped: it could name
  // something outside the prefix).
  std::optional<std::string> UrlOf(absl::string_view path) const;

  const std::vector<RootBacking>& backings() const { return backings_; }
  bool empty() const { return backings_.empty(); }

 private:
  explicit RootBackings(std::vector<RootBacking> b) : backings_(std::move(b)) {}
  std::vector<RootBacking> backings_;
};

}  // namespace tensormorph

#endif  // TENSORMORPH_CORE_IO_ROOT_BACKING_H_
