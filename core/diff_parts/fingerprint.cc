#include "core/diff_parts/fingerprint.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tensormorph {
namespace {

// Feeds fixed-width little-endian integers and length-prefixed strings.
class Feed {
 public:
  void Int(int64_t v) {
    char b[8];
    const uint64_t u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(u >> (8 * i));
    hash_ = Fnv1a64(absl::string_view(b, 8), hash_);
  }
  void Str(absl::string_view s) {
    Int(static_cast<int64_t>(s.size()));
    hash_ = Fnv1a64(s, hash_);
  }
  uint64_t hash() const { return hash_; }

 private:
  uint64_t hash_ = kFnv1a64Basis;
};

// `path` as a path, not as typed: "q", "q/", "./q" and "q//" are one
// checkpoint. Lexical only (no file system here: parts run on other
// machines): repeated slashes and "." segments go, a trailing slash goes;
// ".." stays, as it may cross a symlink.
std::string PathSpelling(absl::string_view path) {
  std::vector<absl::string_view> kept;
  for (absl::string_view seg : absl::StrSplit(path, '/')) {
    if (seg.empty() || seg == ".") continue;
    kept.push_back(seg);
  }
  const std::string joined = absl::StrJoin(kept, "/");
  if (absl::StartsWith(path, "/")) return absl::StrCat("/", joined);
  return joined.empty() && !path.empty() ? std::string(".") : joined;
}

}  // namespace

uint64_t Fnv1a64(absl::string_view bytes, uint64_t hash) {
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::string DiffPlanFingerprint(const DiffPlanKey& key,
                                absl::Span<const DiffPlanItem> plan) {
  Feed f;
  f.Str(PathSpelling(key.checkpoint));
  f.Str(PathSpelling(key.reference));
  f.Str(key.filter);
  f.Int(key.top_k);
  f.Int(key.worst_groups);
  f.Int(static_cast<int64_t>(key.fail_on.size()));
  for (const std::string& gate : key.fail_on) f.Str(gate);
  f.Int(key.count);
  // Fed only when set, so plans without one keep their fingerprints.
  if (!key.imatrix.empty()) f.Str(PathSpelling(key.imatrix));
  f.Int(static_cast<int64_t>(plan.size()));
  for (const DiffPlanItem& item : plan) {
    f.Str(item.name);
    f.Str(item.reference_name);
    f.Int(static_cast<int64_t>(item.shape.size()));
    for (int64_t d : item.shape) f.Int(d);
    // What the pair reads: a checkpoint re-quantized or re-exported at
    // another size between parts is another plan. (The file is left out:
    // a router names non-UTF-8 shard files escaped, a server raw.)
    f.Int(item.bytes);
  }
  return absl::StrFormat("%016x", f.hash());
}

}  // namespace tensormorph
