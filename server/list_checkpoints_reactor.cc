// ListCheckpoints: a page of the checkpoints under a directory of the roots
// (or under every root), found on the worker pool by core's
// ScanCheckpoints and then written one message at a time. Paging is
// stateless: a token is a position in the listing (which root, and the last
// path passed there), so the server keeps nothing between pages and a
// resumed scan skips whole subtrees before the position unread.
//
// The call takes one of max_concurrent_streams slots for its whole life and
// is watched like every stream (max_call_seconds, max_idle_write_seconds),
// so a client that stops reading does not keep the slot: the queued
// stream's skeleton (whole_page_reactor.h), its one task the scan.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/format/checkpoint_scan.h"
#include "core/util/error_reason.h"
#include "core/util/utf8.h"
#include "proto/status_mapping.h"
#include "server/call_log.h"
#include "server/proto_convert.h"
#include "server/service.h"
#include "server/whole_page_reactor.h"

namespace tensormorph {
namespace {

constexpr int32_t kDefaultListDepth = 4;
constexpr int32_t kDefaultPageSize = 100;

constexpr absl::string_view kTokenVersion = "lc1";

// Where a page resumes: root `root` (0 when one directory is listed), after
// `after` below it.
struct Position {
  size_t root = 0;
  std::string after;
};

std::string EncodeToken(const Position& p) {
  return absl::WebSafeBase64Escape(
      absl::StrCat(kTokenVersion, "\n", p.root, "\n", p.after));
}

absl::StatusOr<Position> DecodeToken(const std::string& token) {
  Position p;
  if (token.empty()) return p;
  std::string text;
  auto bad = [&] {
    return WithReason(
        absl::InvalidArgumentError(absl::StrCat(
            "page_token '", EscapeUtf8(token.substr(0, 64)),
            "' is not a token ListCheckpoints gave: pass a next_page_token as "
            "it came, with the same directory")),
        ErrorReason::kPageTokenInvalid);
  };
  if (!absl::WebSafeBase64Unescape(token, &text)) return bad();
  std::vector<std::string> parts =
      absl::StrSplit(text, absl::MaxSplits('\n', 2));
  if (parts.size() != 3 || parts[0] != kTokenVersion ||
      !absl::SimpleAtoi(parts[1], &p.root)) {
    return bad();
  }
  p.after = parts[2];
  return p;
}

// A directory scanned: its canonical path, and how its entries are spelled
// for the caller.
struct Target {
  std::string canonical;
  std::string prefix;  // joined before an entry's path; empty: none
  std::string itself;  // the spelling of the directory itself
};

std::string JoinPath(const std::string& prefix, const std::string& rel) {
  if (prefix.empty()) return rel;
  if (rel.empty()) return prefix;
  if (prefix.back() == '/') return absl::StrCat(prefix, rel);
  return absl::StrCat(prefix, "/", rel);
}

absl::StatusOr<std::vector<Target>> Targets(const PathSandbox& sandbox,
                                            const std::string& directory) {
  std::vector<Target> out;
  if (!directory.empty()) {
    auto canonical = sandbox.Resolve(directory);
    if (!canonical.ok()) {
      // The sandbox speaks of checkpoints; here it is a directory.
      absl::string_view message = canonical.status().message();
      absl::ConsumePrefix(&message, "checkpoint ");
      return CopyReason(canonical.status(),
                        absl::Status(canonical.status().code(),
                                     absl::StrCat("directory ", message)));
    }
    // (A directory only in a backing is one too.)
    absl::StatusOr<struct stat> st =
        CheckpointFiles(sandbox.access(), sandbox.remote(), sandbox.backings())
            .Stat(*canonical);
    if (!st.ok() || !S_ISDIR(st->st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", directory,
          "' is a file, not a directory: GetCheckpoint describes it"));
    }
    std::string prefix = directory;
    while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
    const std::string spelled = prefix;
    if (prefix == ".") prefix.clear();
    out.push_back({*canonical, prefix, spelled});
    return out;
  }
  if (sandbox.unrestricted()) {
    TM_ASSIGN_OR_RETURN(std::string cwd, sandbox.Resolve("."));
    out.push_back({cwd, "", "."});
    return out;
  }
  for (const std::string& root : sandbox.roots()) {
    TM_ASSIGN_OR_RETURN(std::string canonical, sandbox.Resolve(root));
    out.push_back({canonical, "", root});
  }
  // A server whose roots are storage URLs lists them too (their paths
  // relative to the URL root, as the other calls take them).
  for (const std::string& url : sandbox.remote_roots()) {
    out.push_back({url, "", url});
  }
  return out;
}

class ListCheckpointsReactor final
    : public WholePageReactor<v1::CheckpointEntry> {
 public:
  ListCheckpointsReactor(std::shared_ptr<ServiceState> state,
                         grpc::CallbackServerContext* ctx,
                         const v1::ListCheckpointsRequest* req)
      : WholePageReactor(std::move(state), ctx, "ListCheckpoints",
                         req->directory(), ""),
        req_(*req) {
    Start();
  }

 private:
  // On the pool's stream lane: the scan, whose entries are the page.
  absl::StatusOr<std::vector<v1::CheckpointEntry>> BuildPage() override {
    TM_RETURN_IF_ERROR(Build());
    return std::move(entries_);
  }

  absl::Status Build() {
    TM_RETURN_IF_ERROR(AdmitAsStream());
    const int64_t depth =
        req_.has_max_depth() ? req_.max_depth() : kDefaultListDepth;
    TM_RETURN_IF_ERROR(CheckLimit("max_depth", depth, "max_list_depth",
                                  state_->limits.max_list_depth));
    // AIP-158: a page_size past the cap is lowered to it, not refused.
    if (req_.page_size() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("page_size must be >= 0, got ", req_.page_size()));
    }
    const size_t page = static_cast<size_t>(std::min<int64_t>(
        req_.page_size() == 0 ? kDefaultPageSize : req_.page_size(),
        state_->limits.max_list_page_size));
    TM_ASSIGN_OR_RETURN(Position from, DecodeToken(req_.page_token()));
    const PathSandbox& sandbox = state_->registry.sandbox();
    TM_ASSIGN_OR_RETURN(std::vector<Target> targets,
                        Targets(sandbox, req_.directory()));
    if (from.root >= targets.size()) {
      return WithReason(
          absl::InvalidArgumentError(
              "page_token does not fit this directory: pass it with the "
              "directory of the call that gave it"),
          ErrorReason::kPageTokenInvalid);
    }
    std::optional<Position> next;
    for (size_t i = from.root; i < targets.size() && !next; ++i) {
      CheckpointScanOptions o;
      o.max_depth = static_cast<int>(depth);
      o.max_scanned = state_->limits.max_list_scanned_per_call;
      o.max_found = page - entries_.size();
      o.after = i == from.root ? from.after : "";
      o.access = sandbox.access();
      o.remote = sandbox.remote();
      o.backings = sandbox.backings();
      o.allowed = [&sandbox](const std::string& canonical) {
        return sandbox.CheckInside(canonical).ok();
      };
      TM_ASSIGN_OR_RETURN(CheckpointScan scan,
                          ScanCheckpoints(targets[i].canonical, o));
      for (const FoundCheckpoint& f : scan.found) {
        AddEntry(targets, i, f);
      }
      if (!scan.resume_after.empty()) {
        next = Position{i, scan.resume_after};
      } else if (entries_.size() >= page && i + 1 < targets.size()) {
        next = Position{i + 1, ""};
      }
    }
    // The token is the page's own last message, never on a checkpoint's
    // entry (ListCheckpointsRequest says why).
    if (next) entries_.emplace_back().set_next_page_token(EncodeToken(*next));
    return absl::OkStatus();
  }

  void AddEntry(const std::vector<Target>& targets, size_t i,
                const FoundCheckpoint& f) {
    const Target& t = targets[i];
    std::string path = f.path.empty() ? t.itself : JoinPath(t.prefix, f.path);
    // Under every root: a relative path is taken by the first root that has
    // it, so one an earlier root shadows is spelled absolute.
    if (req_.directory().empty() && !f.path.empty() && t.prefix.empty() &&
        !state_->registry.sandbox().unrestricted()) {
      for (size_t j = 0; j < i; ++j) {
        struct stat st;
        if (::lstat(JoinPath(targets[j].canonical, f.path).c_str(), &st) == 0) {
          path = JoinPath(t.itself, f.path);
          break;
        }
      }
    }
    v1::CheckpointEntry& e = entries_.emplace_back();
    e.set_path(EscapeUtf8(path));
    e.set_format(ToProto(f.format));
    e.set_file_count(f.file_count);
    e.set_total_bytes(f.total_bytes);
    if (f.stored_tensor_count) {
      e.set_stored_tensor_count(*f.stored_tensor_count);
    }
    e.set_modified_unix_seconds(f.modified_unix_seconds);
    e.set_broken(EscapeUtf8(f.broken));
  }

  const v1::ListCheckpointsRequest req_;
  // The page, built by the task before it is queued.
  std::vector<v1::CheckpointEntry> entries_;
};

}  // namespace

grpc::ServerWriteReactor<v1::CheckpointEntry>* NewListCheckpointsReactor(
    std::shared_ptr<ServiceState> state, grpc::CallbackServerContext* ctx,
    const v1::ListCheckpointsRequest* req) {
  return new ListCheckpointsReactor(std::move(state), ctx, req);
}

}  // namespace tensormorph
