#include "client/cli/commands.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/cli/arguments.h"
#include "client/cli/command.h"
#include "client/cli/format.h"
#include "client/cli/output_file.h"
#include "client/cli/preview_read.h"
#include "client/cli/servers_listing.h"
#include "client/endpoint_set.h"
#include "core/util/error_reason.h"
#include "core/util/read_whole.h"
#include "render/npy.h"

namespace tensormorph {
namespace {

std::string Hint(const absl::Status& s) {
  const bool controls =
      std::any_of(s.message().begin(), s.message().end(), [](char c) {
        return (static_cast<unsigned char>(c) < 0x20 && c != '\n') || c == 0x7f;
      });
  if (controls && ErrorReasonOf(s) == "TENSOR_NOT_FOUND") {
    // The name the service suggests holds a control character, which the
    // terminal shows as the \xHH the user may have typed in its place.
    return "a name above holds control characters, shown as \\xHH; a name "
           "is taken as typed, so pass the exact bytes (tensormorph --json "
           "ls CHECKPOINT lists them, JSON-escaped).";
  }
  switch (s.code()) {
    case absl::StatusCode::kUnavailable:
      return "is tensormorphd running there? Without --server the CLI reads "
             "local files itself.";
    case absl::StatusCode::kDeadlineExceeded:
      return "raise the deadline with --timeout SECONDS (0 = none); calls "
             "with one reply default to 60 s, `health` to 5 s.";
    case absl::StatusCode::kPermissionDenied:
      if (ErrorReasonOf(s) == "OUTSIDE_ROOTS") {
        // Any path: a checkpoint, a reference, an importance matrix.
        return "the server only serves paths under its --root directories "
               "(the message lists them): name a path inside one.";
      }
      if (absl::StrContains(s.message(), "://")) {
        // The object store or the Hub refused the request's credentials.
        return "the storage refused the credentials of whoever reads it "
               "(tensormorphd, or this CLI without --server): check "
               "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), "
               "HF_TOKEN, or the presigned URL's expiry.";
      }
      return "";
    default:
      return "";
  }
}

// The element judged as the diff judges it, against its own bound.
std::string VerdictText(const v1::SourceScalar& s) {
  const std::string bound =
      absl::StrCat("its bound, ", NumberText(s.bound_steps()), " steps");
  const std::string excess =
      absl::StrCat(NumberText(s.excess_steps()), " steps beyond ", bound);
  switch (s.verdict()) {
    case v1::ELEMENT_VERDICT_WITHIN:
      return absl::StrCat("within ", bound);
    case v1::ELEMENT_VERDICT_NOT_NEAREST:
      return absl::StrCat("not nearest: ", excess,
                          s.chosen_codes()
                              ? " (this quantizer chooses codes: information)"
                              : "");
    case v1::ELEMENT_VERDICT_CLIPPED:
      return absl::StrCat("clipped, as far as the format allows (", bound, ")");
    case v1::ELEMENT_VERDICT_CLIPPED_BEYOND_BOUND:
      return absl::StrCat("clipped: ", excess);
    case v1::ELEMENT_VERDICT_ZEROED_GROUP:
      return "its group's stored scale is 0: no steps to measure in";
    default:
      return "none: a NaN on either side";
  }
}

std::string ParamsText(const v1::ScalarInspection& s) {
  std::vector<std::string> parts;
  for (const v1::Param& p : s.params()) {
    parts.push_back(absl::StrCat(p.name(), "=", NumberText(p.value())));
  }
  return absl::StrJoin(parts, " ");
}

// A lattice codebook element: which grid entry, which coordinate of it,
// and its sign or delta.
std::string CodewordText(const v1::GridCodeword& w) {
  std::vector<std::string> coords;
  for (int i = 0; i < w.entry_size(); ++i) {
    coords.push_back(i == w.position() ? absl::StrCat("[", w.entry(i), "]")
                                       : absl::StrCat(w.entry(i)));
  }
  std::string text =
      absl::StrCat("entry ", w.grid_index(), " of ", w.grid_size(), " (",
                   absl::StrJoin(coords, " "), "), coordinate ", w.position());
  if (w.delta() != 0) {
    absl::StrAppend(&text, ", delta ", NumberText(w.delta()));
  } else {
    std::string bits;
    for (int i = 7; i >= 0; --i) bits += ((w.sign_bits() >> i) & 1) ? '1' : '0';
    absl::StrAppend(&text, ", signs 0b", bits,
                    w.negated() ? " (negated)" : " (positive)");
  }
  return absl::StrCat(text, ", sub-block scale ",
                      NumberText(w.sub_block_scale()));
}

std::string CodeText(const v1::ScalarInspection& s) {
  const uint64_t bits = s.raw_bits();
  std::string binary;
  for (int i = s.code_bits() - 1; i >= 0; --i)
    binary += ((bits >> i) & 1) ? '1' : '0';
  if (s.code_is_float()) {
    return absl::StrCat("0x", absl::Hex(bits), " (", s.code_bits(),
                        "-bit float code 0b", binary, ")");
  }
  return absl::StrCat(s.raw_code(), " (0b", binary, ", ", s.code_bits(),
                      " bits)");
}

}  // namespace

void PrintCompat(const v1::TensorInfo& t) {
  std::vector<std::vector<std::string>> rows;
  for (const v1::BackendSupport& b : t.compat()) {
    rows.push_back(
        {"  " + b.backend(), SupportStatusText(b.status()), b.notes()});
  }
  std::cout << Table(rows);
}

namespace {
// Set once by main from --json (ReportErrorsAsJson), before any command runs.
bool g_json_errors = false;
}  // namespace

void ReportErrorsAsJson(bool on) { g_json_errors = on; }

std::string ErrorJsonObject(const absl::Status& status) {
  std::string metadata;
  for (const auto& [key, value] : ErrorMetadataOf(status)) {
    absl::StrAppend(&metadata, metadata.empty() ? "" : ",", JsonString(key),
                    ":", JsonString(value));
  }
  return absl::StrCat(
      "{\"code\":", JsonString(absl::StatusCodeToString(status.code())),
      ",\"reason\":", JsonString(ErrorReasonOf(status)),
      ",\"message\":", JsonString(status.message()), ",\"metadata\":{",
      metadata, "}}");
}

namespace {
// The one stderr error line of failed calls and usage errors alike, so a
// script reads the code and reason of either the same way.
void PrintErrorLine(const absl::Status& status) {
  std::cerr << "tensormorph: " << absl::StatusCodeToString(status.code())
            << " [" << ErrorReasonOf(status) << "]: " << status.message()
            << '\n';
}
}  // namespace

int ReportFailure(const absl::Status& status, bool json_line) {
  if (g_json_errors && json_line) {
    std::cout << "{\"error\":" << ErrorJsonObject(status) << "}" << std::endl;
  }
  PrintErrorLine(status);
  const std::string hint = Hint(status);
  if (!hint.empty()) std::cerr << "hint: " << hint << '\n';
  return ExitCodeOf(status);
}

int ExitCodeOf(const absl::Status& status) {
  // gRPC's own taxonomy: INVALID_ARGUMENT is a request wrong whatever the
  // state, OUT_OF_RANGE one past what its target holds. Either is the
  // caller's mistake, as a usage error the CLI finds itself is: a script
  // must not see `--group -1` (found here) and `--group 32` (found by the
  // service) exit differently. The CLI's own I/O errors keep to this:
  // those two codes come of a path it was given (ENOTDIR, ENAMETOOLONG),
  // and a file too large for its filesystem is RESOURCE_EXHAUSTED
  // (OutputFile), as a full disk is.
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return kExitUsage;
    default:
      return kExitCallFailed;
  }
}

int ReportUsage(const absl::Status& status) {
  if (g_json_errors) {
    std::cout << "{\"error\":" << ErrorJsonObject(status) << "}" << std::endl;
  }
  PrintErrorLine(status);
  return kExitUsage;
}

int ReportUsage(const GlobalOptions& g, const absl::Status& status) {
  // Before main's ReportErrorsAsJson (a usage error found first thing),
  // --json is the caller's to tell.
  if (g.json && !g_json_errors) {
    std::cout << "{\"error\":" << ErrorJsonObject(status) << "}" << std::endl;
  }
  return ReportUsage(status);
}

absl::StatusOr<v1::TensorInfo> LookupTensor(Client& client,
                                            const std::string& checkpoint,
                                            const std::string& tensor,
                                            bool part) {
  return client.GetTensor(checkpoint, tensor, part);
}

namespace {

// The servers of a list that a listing could not reach: one stderr line
// each, and with --json one last stdout line {"unreachable":[{"server":...,
// "error":{...}}]} (an empty list when every server answered).
void ReportUnreachable(const GlobalOptions& g,
                       const std::vector<UnreachableServer>& unreachable) {
  std::vector<std::string> json;
  for (const UnreachableServer& u : unreachable) {
    std::cerr << "tensormorph: server " << u.server
              << " unreachable, not listed: " << u.status.message() << '\n';
    json.push_back(absl::StrCat("{\"server\":", JsonString(u.server),
                                ",\"error\":", ErrorJsonObject(u.status), "}"));
  }
  if (g.json) {
    std::cout << "{\"unreachable\":[" << absl::StrJoin(json, ",") << "]}\n";
  }
}

// The checkpoints under `directory` (empty: the roots, or embedded the
// working directory), every page. Over a server list, every server's
// (servers_listing.h): the unreachable ones are named on stderr and, with
// --json, in a last line {"unreachable":[...]}; the listing fails only when
// none answered.
int ListCheckpointsUnder(Client& client, const GlobalOptions& g,
                         const ClientOptions& copts,
                         const std::string& directory, int depth) {
  v1::ListCheckpointsRequest req;
  req.set_directory(directory);
  req.set_max_depth(depth);
  std::vector<std::vector<std::string>> rows = {
      {"PATH", "FORMAT", "FILES", "SIZE", "STORED TENSORS", "MODIFIED"}};
  int64_t count = 0, bytes = 0;
  bool itself = false;              // the directory is a safetensors checkpoint
  std::vector<std::string> broken;  // "PATH: what", after the table
  auto print = [&](const v1::CheckpointEntry& e) {
    ++count;
    bytes += e.total_bytes();
    itself |= !directory.empty() &&
              absl::StripSuffix(e.path(), "/") ==
                  absl::StripSuffix(absl::string_view(directory), "/");
    if (g.json) {
      v1::CheckpointEntry shown = e;
      shown.clear_next_page_token();  // the client followed it
      std::cout << ToJson(shown) << "\n";
      return;
    }
    if (!e.broken().empty()) {
      broken.push_back(absl::StrCat(e.path(), ": ", e.broken()));
    }
    rows.push_back(
        {e.path(), FormatText(e.format()), absl::StrCat(e.file_count()),
         BytesText(e.total_bytes()),
         !e.broken().empty()           ? "broken"
         : e.has_stored_tensor_count() ? absl::StrCat(e.stored_tensor_count())
                                       : "-",
         absl::FormatTime("%Y-%m-%d %H:%M",
                          absl::FromUnixSeconds(e.modified_unix_seconds()),
                          absl::UTCTimeZone())});
  };
  const bool each_server = !g.server.empty() && IsEndpointList(g.server);
  absl::Status s = absl::OkStatus();
  std::vector<UnreachableServer> unreachable;
  if (each_server) {
    auto listing = ListCheckpointsOfServers(g.server, copts, req);
    s = listing.status();
    if (listing.ok()) {
      for (const v1::CheckpointEntry& e : listing->entries) print(e);
      unreachable = std::move(listing->unreachable);
    }
  } else {
    s = client.ListAllCheckpoints(req, print);
  }
  if (s.ok() && each_server) ReportUnreachable(g, unreachable);
  if (!s.ok()) return ReportFailure(s);
  if (!g.json) {
    std::cout << Table(rows);
    std::cout << Count(count, "checkpoint") << ", " << BytesText(bytes) << "\n";
    if (!broken.empty()) {
      std::cout << "broken (" << broken.size()
                << "; tensormorph check PATH says everything):\n";
      for (const std::string& b : broken) std::cout << "  " << b << "\n";
    }
    if (itself && count > 1) {
      std::cout << directory
                << " itself opens as its .safetensors files; its tensors: "
                   "tensormorph ls "
                << directory << "\n";
    }
  }
  return kExitOk;
}

}  // namespace

namespace {

// What a short listing of `path` says of it: the first checkpoints under
// it (at most two), and whether more follow. A file, or a path the listing
// refuses, is not `listed`: ListTensors and GetCheckpoint open or explain it.
struct DirectoryProbe {
  bool listed = false;
  std::vector<std::string> found;
  bool more = false;
  // The first checkpoint is the directory itself (a safetensors directory),
  // which the listing puts before what lies beside its shards.
  bool itself = false;
};

DirectoryProbe ProbeDirectory(Client& client, const std::string& path,
                              int depth) {
  v1::ListCheckpointsRequest req;
  req.set_directory(path);
  req.set_max_depth(depth);
  req.set_page_size(2);
  DirectoryProbe p;
  const absl::Status s =
      client.ListCheckpoints(req, [&](const v1::CheckpointEntry& e) {
        if (!e.path().empty()) p.found.push_back(e.path());
        p.more |= !e.next_page_token().empty();
        return true;
      });
  p.listed = s.ok();
  p.itself =
      !p.found.empty() && absl::StripSuffix(p.found[0], "/") ==
                              absl::StripSuffix(absl::string_view(path), "/");
  return p;
}

// Whether `path` is spelled as a checkpoint file (GGUF, safetensors, an
// index): no listing is asked of it, which the service would refuse as not
// a directory (a refused call in its log and metrics for every `ls FILE`).
bool NamesACheckpointFile(absl::string_view path) {
  return absl::EndsWith(path, ".gguf") ||
         absl::EndsWith(path, ".safetensors") || absl::EndsWith(path, ".json");
}

// Whether `path` names a directory to browse rather than one checkpoint: it
// does unless its listing starts with the directory itself (a safetensors
// directory, whatever lies beside its shards: `ls --checkpoints` lists
// that) or is one checkpoint file directly in it (a lone GGUF, which
// opening the directory opens). A lone checkpoint directory in it (a
// models/ folder of one Hugging Face model) is browsed: the directory
// itself opens as nothing.
bool IsDirectoryToBrowse(const DirectoryProbe& p, const std::string& path) {
  if (!p.listed || p.itself) return false;
  if (p.found.size() != 1 || p.more) return true;
  const std::string dir(absl::StripSuffix(path, "/"));
  const std::string entry(absl::StripSuffix(p.found[0], "/"));
  const absl::string_view rest =
      absl::StripPrefix(absl::string_view(entry), dir + "/");
  return rest.size() == entry.size() || absl::StrContains(rest, '/') ||
         !NamesACheckpointFile(rest);
}

// The line `ls` and `info` end with when a safetensors directory holds more
// checkpoints than itself, which only a listing shows.
void PrintMoreBeside(const DirectoryProbe& p, const std::string& path,
                     absl::string_view label) {
  if (p.itself && (p.found.size() > 1 || p.more)) {
    std::cout << label << "more checkpoints in this directory: tensormorph ls "
              << path << " --checkpoints\n";
  }
}

// A directory opens as its safetensors files alone: what else lies beside
// them only a listing shows, so `info` says that there is more.
void PrintMoreBeside(Client& client, const std::string& path,
                     const v1::GetCheckpointResponse& info) {
  if (info.format() != v1::CHECKPOINT_FORMAT_SAFETENSORS ||
      NamesACheckpointFile(path)) {
    return;  // not a directory: no listing to ask
  }
  PrintMoreBeside(ProbeDirectory(client, path, LsOptions().depth), path,
                  "beside it   ");
}

}  // namespace

int RunLs(Client& client, const GlobalOptions& g, const ClientOptions& copts,
          const LsOptions& o) {
  // --filter and --compat are of a checkpoint's tensors: a listing of
  // checkpoints went on without them, as if they had matched everything.
  const auto tensor_options_unused = [&o] {
    return ReportUsage(absl::InvalidArgumentError(absl::StrCat(
        o.compat ? "--compat" : "--filter",
        " applies to one checkpoint's tensors, and '", o.checkpoint,
        "' lists checkpoints: name one of them (tensormorph ls ",
        o.checkpoint.empty() ? "" : absl::StrCat(o.checkpoint, "/"),
        "CHECKPOINT ...)")));
  };
  const bool tensor_options = !o.filter.empty() || o.compat;
  if (o.checkpoint.empty() || o.checkpoints) {
    if (tensor_options) return tensor_options_unused();
    return ListCheckpointsUnder(client, g, copts, o.checkpoint, o.depth);
  }
  const DirectoryProbe probe =
      NamesACheckpointFile(o.checkpoint)
          ? DirectoryProbe{}
          : ProbeDirectory(client, o.checkpoint, o.depth);
  if (IsDirectoryToBrowse(probe, o.checkpoint)) {
    if (tensor_options) return tensor_options_unused();
    return ListCheckpointsUnder(client, g, copts, o.checkpoint, o.depth);
  }
  v1::ListTensorsRequest req;
  req.set_checkpoint(o.checkpoint);
  req.set_filter(o.filter);
  std::vector<std::vector<std::string>> rows = {{"NAME", "DTYPE", "CONVENTION",
                                                 "BITS", "SHAPE", "GRANULARITY",
                                                 "BYTES", "STORED AS"}};
  int64_t count = 0, bytes = 0;
  std::map<std::string, v1::TensorInfo> compat;  // one tensor per encoding
  absl::Status s = client.ListTensors(req, [&](const v1::TensorInfo& t) {
    ++count;
    if (t.compat_size() > 0) {
      compat.emplace(absl::StrCat(t.encoding().scheme(), " (",
                                  t.encoding().convention(), ")"),
                     t);
    }
    bytes += t.stored_bytes();
    if (g.json) {
      std::cout << ToJson(t) << "\n";
      return;
    }
    std::vector<std::string> parts;
    if (t.parts_size() > 1 ||
        (t.parts_size() == 1 && t.parts(0).name() != t.name())) {
      for (const auto& p : t.parts()) {
        parts.push_back(
            absl::StrCat(p.name(), " ", p.dtype(), ShapeText(p.shape())));
      }
    }
    rows.push_back({t.name(), t.encoding().scheme(), t.encoding().convention(),
                    absl::StrCat(t.encoding().bits()), ShapeText(t.shape()),
                    t.encoding().granularity(), BytesText(t.stored_bytes()),
                    absl::StrJoin(parts, ", ")});
  });
  if (!s.ok()) return ReportFailure(s);
  if (!g.json) {
    std::cout << Table(rows);
    std::cout << Count(count, "tensor") << ", " << BytesText(bytes) << "\n";
    PrintMoreBeside(probe, o.checkpoint, "");
    if (o.compat) {
      for (const auto& [scheme, t] : compat) {
        std::cout << "\n" << scheme << "\n";
        PrintCompat(t);
      }
    }
  }
  return kExitOk;
}

namespace {

// A directory that is no checkpoint but holds some beneath it (a models/
// folder): GetCheckpoint's NOT_FOUND, saying so and how to list them.
absl::Status ExplainDirectoryOfCheckpoints(Client& client,
                                           const std::string& path,
                                           const absl::Status& status) {
  if (!absl::IsNotFound(status) || NamesACheckpointFile(path)) return status;
  const DirectoryProbe probe = ProbeDirectory(client, path, LsOptions().depth);
  if (!probe.listed || probe.itself || probe.found.empty()) return status;
  return CopyReason(
      status,
      absl::NotFoundError(absl::StrCat(
          status.message(), "; it holds checkpoints beneath it, such as '",
          probe.found[0], "': name one, or list them: tensormorph ls ", path)));
}

}  // namespace

int RunInfo(Client& client, const GlobalOptions& g, const InfoOptions& o) {
  if (o.tensor.empty()) {
    auto info = client.GetCheckpoint(o.checkpoint);
    if (!info.ok()) {
      return ReportFailure(
          ExplainDirectoryOfCheckpoints(client, o.checkpoint, info.status()));
    }
    if (g.json) {
      std::cout << ToJson(*info) << "\n";
      return kExitOk;
    }
    std::cout << "checkpoint  " << info->checkpoint() << "\n"
              << "format      " << FormatText(info->format()) << "\n"
              << "tensors     " << info->tensor_count() << " logical, "
              << info->stored_tensor_count() << " stored\n"
              << "size        " << BytesText(info->total_bytes()) << "\n"
              << "conventions " << absl::StrJoin(info->conventions(), ", ")
              << "\n";
    PrintMoreBeside(client, o.checkpoint, *info);
    std::cout << "files\n";
    for (const auto& f : info->files()) {
      std::cout << "  " << f.path() << "  " << BytesText(f.size_bytes())
                << "\n";
    }
    // A server holding some of the shards (--partial-shards) says which it
    // lacks: their tensors are served by other servers, or by none.
    if (info->absent_files_size() > 0) {
      std::cout << "absent files (not on this server)\n";
      for (const std::string& f : info->absent_files()) {
        std::cout << "  " << f << "\n";
      }
    }
    // What the decoders were told, defaults applied: the line to compare
    // with the config file when a tensor decodes unexpectedly.
    if (info->quant_config_size() > 0)
      std::cout << "quantization config (as parsed)\n";
    for (const auto& f : info->quant_config()) {
      std::cout << "  " << f.key() << " = " << f.value() << "\n";
    }
    if (info->config_files_size() > 0) {
      std::vector<std::string> names;
      for (const auto& f : info->config_files()) names.push_back(f.name());
      std::cout << "config files " << absl::StrJoin(names, ", ") << "\n";
    }
    if (info->metadata_size() > 0) std::cout << "metadata\n";
    for (const auto& m : info->metadata()) {
      std::string v = m.value();
      if (v.size() > 100) v = v.substr(0, 97) + "...";
      // A sharded checkpoint's shards each have their own: say whose.
      const std::string file = m.file().empty() ? "" : m.file() + ": ";
      std::cout << "  " << file << m.key() << " (" << m.type() << ") = " << v
                << "\n";
    }
    return kExitOk;
  }
  auto found = client.GetTensor(o.checkpoint, o.tensor, o.part);
  if (!found.ok()) return ReportFailure(found.status());
  const v1::TensorInfo& t = *found;
  if (g.json) {
    std::cout << ToJson(t) << "\n";
    return kExitOk;
  }
  const v1::Encoding& e = t.encoding();
  std::cout << "tensor       " << t.name() << "\n"
            << "shape        " << ShapeText(t.shape()) << "  ("
            << Count(t.num_elements(), "element") << ")\n"
            << "strides      " << ShapeText(t.strides()) << "  ("
            << LayoutText(t.layout()) << ")\n"
            << "dtype        " << e.scheme() << "\n"
            << "encoding     " << e.scheme() << ", " << e.bits()
            << "-bit codes, " << (e.quantized() ? "quantized" : "not quantized")
            << " (" << e.convention() << ")\n"
            << "granularity  " << e.granularity() << "\n"
            << "symmetric    "
            << (e.symmetric() ? "yes" : "no (an offset or zero-point term)")
            << "\n"
            << "stored bytes " << BytesText(t.stored_bytes()) << "\n"
            << "stored as\n";
  for (const auto& p : t.parts()) {
    std::cout << "  " << p.name() << "  " << p.dtype() << ShapeText(p.shape())
              << "  " << p.file() << " @ " << p.offset() << " (+"
              << p.size_bytes() << " bytes)\n";
  }
  if (t.compat_size() > 0) {
    std::cout << "backends (kernels shipped for this encoding; sources in "
                 "core/compat.cc)\n";
    PrintCompat(t);
  }
  return kExitOk;
}

int RunRead(Client& client, const GlobalOptions& g, const ReadOptions& o) {
  auto dims = SliceDimensions(o.slice);
  if (!dims.ok()) return ReportUsage(dims.status());
  if (*dims > 0) {
    // More items than dimensions is as malformed as a bad item.
    auto t = LookupTensor(client, o.checkpoint, o.tensor, o.part);
    if (!t.ok()) return ReportFailure(t.status());
    if (*dims > static_cast<size_t>(t->shape_size())) {
      return ReportUsage(WithReason(
          absl::InvalidArgumentError(absl::StrCat(
              "slice '", o.slice, "' indexes ", Count(*dims, "dimension"),
              " but tensor '", o.tensor, "' has rank ", t->shape_size(),
              " (shape ", ShapeText(t->shape()), ")")),
          ErrorReason::kSliceInvalid));
    }
  }
  v1::ReadSliceRequest req;
  req.set_checkpoint(o.checkpoint);
  req.set_tensor(o.tensor);
  req.set_part(o.part);
  req.set_slice(o.slice);
  req.set_mode(o.raw ? v1::OUTPUT_MODE_RAW : v1::OUTPUT_MODE_FLOAT32);
  if (g.json && o.output.empty()) {
    // One JSON object per chunk, as protobuf maps them (data in base64).
    absl::Status s = client.ReadSlice(req, [](const v1::SliceChunk& c) {
      std::cout << ToJson(c) << "\n";
      return true;
    });
    return s.ok() ? kExitOk : ReportFailure(s);
  }
  if (!o.output.empty()) {
    // Written as it arrives: a 30 GB tensor costs a chunk of memory, not
    // 30 GB. Into a temporary: a read that fails or is interrupted leaves
    // the file that was at the path.
    auto file = CreateOutput("-o", o.output);
    if (!file.ok()) return ReportFailure(file.status());
    NpyFileWriter writer((*file)->fd(), o.output);
    v1::SliceHeader header;
    absl::Status written = absl::OkStatus();
    absl::Status s = client.ReadSlicePieces(
        req,
        [&](const v1::SliceHeader& h) {
          header = h;
          written = writer.Begin(
              h.dtype(),
              std::vector<int64_t>(h.shape().begin(), h.shape().end()),
              h.total_bytes());
          return written.ok();
        },
        [&](absl::Span<const absl::string_view> pieces) {
          written = writer.Append(pieces);  // one writev a chunk
          return written.ok();
        });
    if (!written.ok()) return ReportFailure(written);
    if (!s.ok()) return ReportFailure(s);
    if (absl::Status f = writer.Finish(); !f.ok()) return ReportFailure(f);
    if (absl::Status c = (*file)->Commit(); !c.ok()) return ReportFailure(c);
    const std::vector<int64_t> shape(header.shape().begin(),
                                     header.shape().end());
    if (g.json) {
      // As protobuf's JSON mapping writes them elsewhere: int64 as strings.
      std::vector<std::string> dims_json;
      for (int64_t d : shape) dims_json.push_back(absl::StrCat("\"", d, "\""));
      std::cout << "{\"path\":" << JsonString(o.output)
                << ",\"dtype\":" << JsonString(header.dtype()) << ",\"shape\":["
                << absl::StrJoin(dims_json, ",") << "],\"bytes\":\""
                << header.total_bytes() << "\"}\n";
    } else {
      std::cerr << "wrote " << o.output << ": " << header.dtype()
                << ShapeText(shape) << ", " << BytesText(header.total_bytes())
                << "\n";
    }
    return kExitOk;
  }
  if (o.slice.empty()) {
    // A preview of a whole tensor reads only the items it prints: a 1 GiB
    // tensor costs a few small reads, not 1 GiB.
    auto preview = ReadPreview(client, req);
    if (!preview.ok()) return ReportFailure(preview.status());
    if (preview->dtype != "F32") {
      std::cout << preview->dtype << ShapeText(preview->shape) << ": "
                << BytesText(preview->total_bytes)
                << " of stored bytes; write them with -o FILE.npy\n";
      return kExitOk;
    }
    std::cout << ShownArrayPreview(preview->shown, preview->plan) << "\n"
              << "shape " << ShapeText(preview->shape) << ", float32\n";
    return kExitOk;
  }
  // A slice's preview prints the slice the user named, read whole.
  auto data = client.ReadSliceAll(req);
  if (!data.ok()) return ReportFailure(data.status());
  if (data->dtype != "F32") {
    std::cout << data->dtype << ShapeText(data->shape) << ": "
              << BytesText(static_cast<int64_t>(data->bytes.size()))
              << " of stored bytes; write them with -o FILE.npy\n";
    return kExitOk;
  }
  std::cout << ArrayPreview(data->floats(), data->shape) << "\n"
            << "shape " << ShapeText(data->shape) << ", float32\n";
  return kExitOk;
}

namespace {

// Indices per InspectScalars call of `scalar` (the server's default
// --max-scalars-per-call is 100,000); the first call asks for fewer, so
// that printing starts after a short call rather than a long one.
constexpr size_t kScalarBatch = 10'000;
constexpr size_t kFirstScalarBatch = 1'000;

// One InspectScalars call's reply, on an arena of its own.
struct ScalarBatch {
  std::unique_ptr<google::protobuf::Arena> arena =
      std::make_unique<google::protobuf::Arena>();
  v1::InspectScalarsResponse* reply = nullptr;  // on `arena`
  absl::Status status;
};

// The indices `scalar` was given, each checked against the tensor's rank,
// in order: the arguments, then --indices-file's lines.
struct ScalarIndices {
  size_t rank = 0;   // the tensor's: every index has as many coordinates
  size_t count = 0;  // indices
  std::vector<int64_t> coords;  // count * rank, an index's after another's
};

// Reads the indices into *out (empty), calling `added` after each.
// Errors: INVALID_ARGUMENT (a usage error) naming the index and where it
// came from.
absl::Status CollectIndices(const ScalarOptions& o, const v1::TensorInfo& t,
                            ScalarIndices* indices,
                            absl::FunctionRef<void()> added) {
  ScalarIndices& out = *indices;
  out.rank = static_cast<size_t>(t.shape_size());
  auto add = [&out, added](absl::Span<const int64_t> index) {
    out.coords.insert(out.coords.end(), index.begin(), index.end());
    ++out.count;
    added();
  };
  // Each argument is one index of exactly the tensor's rank: checked here,
  // since the request carries the coordinates concatenated and "0 1 2 3"
  // would otherwise read as two indices of a matrix.
  for (size_t a = 0; a < o.indices.size(); ++a) {
    const std::string& text = o.indices[a];
    auto index = ParseIndex(text);
    if (!index.ok()) return index.status();
    absl::Status s =
        CheckIndexRank(text, *index, o.tensor, t.shape(), o.indices.size());
    if (!s.ok()) return s;
    s = CheckIndexInShape(absl::StrCat("index argument ", a + 1), text, *index,
                          t.shape());
    if (!s.ok()) return s;
    add(*index);
  }
  if (!o.indices_file.empty()) {
    const bool stdin_file = o.indices_file == "-";
    const std::string name =
        stdin_file ? std::string("--indices-file - (stdin)")
                   : absl::StrCat("--indices-file '", o.indices_file, "'");
    absl::StatusOr<std::string> text =
        stdin_file ? ReadWhole(std::cin, name, kMaxIndexFileBytes)
                   : ReadWholeFile(o.indices_file, name, kMaxIndexFileBytes);
    if (!text.ok()) return text.status();
    // Every coordinate takes two bytes at least ("7," or "7\n"): room for
    // all (up to 16 M), reserved rather than regrown over fresh pages.
    out.coords.reserve(out.coords.size() +
                       std::min(text->size() / 2 + 1, size_t{1} << 24));
    absl::Status read = ReadIndexLines(
        name, *text,
        [&](int line, absl::string_view written,
            absl::Span<const int64_t> index) {
          absl::Status s =
              CheckIndexRank(written, index, o.tensor, t.shape(), 1);
          if (!s.ok()) {
            return absl::InvalidArgumentError(
                absl::StrCat(name, " line ", line, ": ", s.message()));
          }
          s = CheckIndexInShape(absl::StrCat(name, " line ", line), written,
                                index, t.shape());
          if (!s.ok()) return s;
          add(index);
          return absl::OkStatus();
        });
    if (!read.ok()) return read;
  }
  return absl::OkStatus();
}

// The InspectScalars calls of `scalar`, in order: kScalarBatch indices each
// (the first kFirstScalarBatch), each request built on the caller's thread
// from the indices read so far, each call on a thread of its own (where
// none can be had, made when its reply is wanted) and its reply parsed
// there, on an arena of its own (nothing allocated or freed per scalar).
// Thread safety: one caller's thread.
class ScalarCalls {
 public:
  ScalarCalls(Client& client, const ScalarOptions& o,
              const ScalarIndices& indices)
      : client_(client), o_(o), indices_(indices) {}

  // Starts the next calls while fewer than `ahead` are in flight, each once
  // its indices are read (all of them: `all_read`, the last batch short).
  void Start(size_t ahead, bool all_read) {
    while (in_flight_.size() < ahead && next_ < indices_.count) {
      const size_t size = next_ == 0 ? kFirstScalarBatch : kScalarBatch;
      if (!all_read && indices_.count < next_ + size) return;
      const size_t to = std::min(indices_.count, next_ + size);
      auto call = [&client = client_, req = Request(next_, to)] {
        ScalarBatch b;
        b.reply =
            google::protobuf::Arena::CreateMessage<v1::InspectScalarsResponse>(
                b.arena.get());
        b.status = client.InspectScalars(req, b.reply);
        return b;
      };
      // (A copy for the thread: std::async moves what it is given into its
      // state before it makes the thread, so a moved call would be empty in
      // the fallback.)
      try {
        in_flight_.push_back(std::async(std::launch::async, call));
      } catch (const std::system_error&) {
        in_flight_.push_back(
            std::async(std::launch::deferred, std::move(call)));
      }
      next_ = to;
    }
  }
  bool pending() const { return !in_flight_.empty(); }
  // The next reply in order. REQUIRES: pending().
  ScalarBatch Next() {
    ScalarBatch b = in_flight_.front().get();
    in_flight_.pop_front();
    return b;
  }

 private:
  v1::InspectScalarsRequest Request(size_t from, size_t to) const {
    v1::InspectScalarsRequest req;
    req.set_checkpoint(o_.checkpoint);
    req.set_tensor(o_.tensor);
    req.set_part(o_.part);
    req.set_reference(o_.reference);
    req.set_reference_tensor(o_.reference_tensor);
    const auto coords = indices_.coords.begin();
    req.mutable_coords()->Add(coords + from * indices_.rank,
                              coords + to * indices_.rank);
    if (indices_.rank == 0) {  // "()", each
      for (size_t i = from; i < to; ++i) req.add_flat_indices(0);
    }
    return req;
  }

  Client& client_;
  const ScalarOptions& o_;
  const ScalarIndices& indices_;
  size_t next_ = 0;  // the first index not yet asked for
  std::deque<std::future<ScalarBatch>> in_flight_;
};

// The text of a reply's scalars, appended to `out` (written a reply at a
// time: through std::cout a piece at a time, printing was a fifth of the
// command's time).
void AppendScalarText(const std::string& tensor,
                      const v1::InspectScalarsResponse& resp,
                      std::string* out) {
  const v1::Encoding& e = resp.encoding();
  const std::string heading =
      absl::StrCat("  (", e.scheme(), ", ", e.granularity(), ")\n");
  for (const v1::ScalarInspection& s : resp.scalars()) {
    absl::StrAppend(out, tensor, ShapeText(s.index()), heading,
                    "  raw code    ", CodeText(s), "\n");
    if (s.block() >= 0) {
      absl::StrAppend(out, "  block       ", s.block());
      if (s.sub_block() >= 0) {
        absl::StrAppend(out, ", sub-block ", s.sub_block());
      }
      out->push_back('\n');
    }
    if (s.group() >= 0) absl::StrAppend(out, "  group       ", s.group(), "\n");
    if (s.has_codeword()) {
      absl::StrAppend(out, "  grid        ", CodewordText(s.codeword()), "\n");
    }
    if (s.params_size() > 0) {
      absl::StrAppend(out, "  params      ", ParamsText(s), "\n");
    }
    absl::StrAppend(out, "  scale       ", NumberText(s.scale()),
                    "   zero-point ", NumberText(s.zero_point()), "   offset ",
                    NumberText(s.offset()), "\n");
    absl::StrAppend(out, "  level       ", NumberText(s.level()), "\n",
                    "  step        ", NumberText(s.step()), " (below ",
                    NumberText(s.step_below()), ", above ",
                    NumberText(s.step_above()), ")\n");
    absl::StrAppend(out, "  range       [", NumberText(s.range_min()), ", ",
                    NumberText(s.range_max()), "]\n", "  value       ",
                    NumberText(s.value()), "\n");
    if (s.has_source()) {
      const v1::SourceScalar& src = s.source();
      absl::StrAppend(out, "  source      ", NumberText(src.value()), "   (",
                      resp.reference_tensor(), ShapeText(src.index()),
                      resp.reference_rows_mapped() ? ", rows mapped" : "",
                      ")\n");
      absl::StrAppend(out, "  error       ", NumberText(src.error()),
                      " (value - source), ", NumberText(src.error_steps()),
                      " steps\n");
      absl::StrAppend(out, "  verdict     ", VerdictText(src), "\n");
    }
  }
}

}  // namespace

int RunScalar(Client& client, const GlobalOptions& g, const ScalarOptions& o) {
  // Syntax first, so that a malformed index is a usage error before any call.
  for (const std::string& text : o.indices) {
    if (auto index = ParseIndex(text); !index.ok()) {
      return ReportUsage(index.status());
    }
  }
  if (o.indices.empty() && o.indices_file.empty()) {
    return ReportUsage(absl::InvalidArgumentError(
        "no index given: name one or more as arguments (e.g. 3,17) or "
        "with --indices-file"));
  }
  auto t = LookupTensor(client, o.checkpoint, o.tensor, o.part);
  if (!t.ok()) return ReportFailure(t.status());
  // Each reply is printed as it comes, the next call in flight meanwhile, so
  // the server's work and this process's printing overlap; 100,000 scalars
  // cost two batches of memory, and their output starts at once. The first
  // two calls go out while the rest of an --indices-file is parsed and
  // checked: a call only reads, and a bad line further on still ends the
  // command as a usage error with nothing printed (once the calls under way
  // have ended, within their deadline).
  ScalarIndices indices;
  ScalarCalls calls(client, o, indices);
  absl::Status collected =
      CollectIndices(o, *t, &indices, [&calls] { calls.Start(2, false); });
  // An index past the tensor's shape fails as the server would fail it
  // (OUT_OF_RANGE INDEX_OUT_OF_RANGE, exit 1), before anything is printed.
  if (absl::IsOutOfRange(collected)) return ReportFailure(collected);
  if (!collected.ok()) return ReportUsage(collected);
  if (indices.count == 0) {
    return ReportUsage(absl::InvalidArgumentError(
        "no index given: name one or more as arguments (e.g. 3,17) or "
        "with --indices-file"));
  }
  ScalarsJsonWriter json(std::cout);
  std::string text;  // a reply's text, kept from reply to reply
  bool printed_any = false;
  calls.Start(1, true);
  while (calls.pending()) {
    ScalarBatch b = calls.Next();
    if (!b.status.ok()) {
      // What was printed stays a prefix: a JSON document left unclosed (a
      // consumer's parse fails), text ending at the last whole scalar; the
      // error's own JSON on a line of its own after it.
      if (g.json && printed_any) std::cout << '\n';
      return ReportFailure(b.status);
    }
    printed_any = true;
    calls.Start(1, true);
    if (g.json) {
      json.Add(*b.reply);
    } else {
      text.clear();
      AppendScalarText(o.tensor, *b.reply, &text);
      std::cout << text;
    }
  }
  if (g.json) json.Finish();
  return kExitOk;
}

namespace {

class LsCommand : public Command {
 public:
  explicit LsCommand(CLI::App& app)
      : Command(app.add_subcommand(
            "ls",
            "list the logical tensors of a checkpoint, or the checkpoints "
            "under a directory")) {
    CLI::App& cmd = *this->app();
    cmd.add_option(
           "checkpoint", o_.checkpoint,
           "checkpoint file or directory; a directory that is not a "
           "checkpoint, "
           "or none, lists the checkpoints under it (none: under the server's "
           "roots, or embedded the current directory)")
        ->transform(ServedPath());
    cmd.add_flag("--checkpoints", o_.checkpoints,
                 "list the checkpoints under the directory even when it is "
                 "one: a safetensors directory, then the GGUF files and "
                 "subdirectory checkpoints beside its shards");
    cmd.add_option("--filter", o_.filter,
                   "glob on tensor names, e.g. 'blk.0.*'");
    cmd.add_option("--depth", o_.depth,
                   "listing checkpoints: levels of subdirectories searched")
        ->capture_default_str()
        ->check(CLI::Range(0, 16));
    cmd.footer(
        "Examples:\n  tensormorph ls model.gguf --filter 'blk.0.*'\n"
        "  tensormorph --server host:7000 ls\n"
        "Listing checkpoints prints PATH FORMAT FILES SIZE STORED TENSORS "
        "MODIFIED (STORED TENSORS: '-' when the headers are too big to count "
        "cheaply, 'broken' when the header read found a file broken, listed "
        "after the table with what it found; MODIFIED in UTC).\n"
        "Over a server list (--server a:7431,b:7431) a listing of checkpoints "
        "asks every server and lists each path once: exit 0 when at least "
        "one answered, the others named on stderr (with --json, in a last "
        "line {\"unreachable\":[...]}); 2 when none did.");
    cmd.add_flag("--compat", o_.compat,
                 "per encoding, which inference backends ship kernels for it");
  }
  int Run(const CommandContext& c) override {
    return RunLs(*c.client, c.global, c.client_options, o_);
  }

 private:
  LsOptions o_;
};

class InfoCommand : public Command {
 public:
  explicit InfoCommand(CLI::App& app)
      : Command(app.add_subcommand(
            "info", "describe a checkpoint, or one tensor of it in full")) {
    CLI::App& cmd = *this->app();
    cmd.add_option("checkpoint", o_.checkpoint, "checkpoint file or directory")
        ->transform(ServedPath())
        ->required();
    cmd.add_option("tensor", o_.tensor, "tensor name (optional)");
    cmd.add_flag("--part", o_.part, kPartHelp);
    cmd.footer(
        "Examples:\n  tensormorph info model.gguf\n"
        "  tensormorph info model.gguf blk.0.ffn_down.weight");
  }
  absl::Status Finish() override {
    EscapeTensorName(&o_.tensor);
    return absl::OkStatus();
  }
  int Run(const CommandContext& c) override {
    return RunInfo(*c.client, c.global, o_);
  }

 private:
  InfoOptions o_;
};

class ReadCommand : public Command {
 public:
  explicit ReadCommand(CLI::App& app)
      : Command(app.add_subcommand(
            "read",
            "read a (sliced) tensor: a numpy-like preview, or a .npy file")) {
    CLI::App& cmd = *this->app();
    cmd.add_option("checkpoint", o_.checkpoint, "checkpoint file or directory")
        ->transform(ServedPath())
        ->required();
    cmd.add_option("tensor", o_.tensor, "tensor name")->required();
    cmd.add_option("--slice", o_.slice,
                   "numpy slice per dimension, e.g. '0:4, ::2' or '..., -1'");
    cmd.add_flag("--raw", o_.raw,
                 "the stored values instead of dequantized float32 (whole "
                 "blocks only for block types)");
    cmd.add_option("-o,--output", o_.output,
                   std::string("write a .npy file numpy.load reads (raw block "
                               "types: uint8, [rows, bytes per row])") +
                       kOutputGuarantee)
        ->check(OutputPathValidator());
    cmd.add_flag("--part", o_.part, kPartHelp);
    cmd.footer(
        "Examples:\n  tensormorph read model.gguf blk.0.attn_q.weight --slice "
        "'0, :8'\n"
        "  tensormorph read model.gguf blk.0.attn_q.weight -o q.npy\n"
        "Without -o it prints a numpy-like preview of the slice (reading "
        "only the elements it prints); --json gives the values as protobuf's "
        "JSON maps bytes, base64 (dequantized: numpy.frombuffer("
        "base64.b64decode(data), '<f4'); with --raw, the stored bytes); -o "
        "writes a .npy.");
  }
  GuardedOutput Output() const override {
    return {"-o",
            o_.output,
            {{CommandInput::Kind::kCheckpoint, o_.checkpoint, "checkpoint"}}};
  }
  absl::Status Finish() override {
    EscapeTensorName(&o_.tensor);
    return absl::OkStatus();
  }
  int Run(const CommandContext& c) override {
    return RunRead(*c.client, c.global, o_);
  }

 private:
  ReadOptions o_;
};

class ScalarCommand : public Command {
 public:
  explicit ScalarCommand(CLI::App& app)
      : Command(app.add_subcommand("scalar",
                                   "the Scalar Inspector: raw code, scale, "
                                   "zero-point, group, step and value")) {
    CLI::App& cmd = *this->app();
    cmd.add_option("checkpoint", o_.checkpoint, "checkpoint file or directory")
        ->transform(ServedPath())
        ->required();
    cmd.add_option("tensor", o_.tensor, "tensor name")->required();
    cmd.add_option("index", o_.indices,
                   "one or more indices, one per argument, each with exactly "
                   "the tensor's rank of comma-separated coordinates "
                   "(negative counts from the end), e.g. 3,17; a rank-0 "
                   "tensor's one element is ()");
    cmd.add_option(
        "--indices-file", o_.indices_file,
        "more indices, one per line as on the command line, after those "
        "given as arguments; '-' reads standard input; blank lines and "
        "'#' comments are skipped; at most 256 MiB (about 25 million)");
    cmd.add_flag("--part", o_.part, kPartHelp);
    CLI::Option* ref =
        cmd.add_option(
               "--ref", o_.reference,
               "the full-precision source checkpoint: also show each element's "
               "source value (the source element the diff compares it with: a "
               "GGUF's Hugging Face tensor, Q/K rows through llama.cpp's RoPE "
               "permutation), the signed error (value - source) and the error "
               "in "
               "steps (|error| over the step on the source's side, as the "
               "error "
               "heatmap measures it; about 0.5 where values round to nearest, "
               "the "
               "diff gives each format's own bound)")
            ->transform(ServedPath());
    cmd.add_option("--ref-tensor", o_.reference_tensor,
                   "the tensor in --ref (default: found as diff pairs)")
        ->needs(ref);
    cmd.footer(
        "Examples:\n  tensormorph scalar model.gguf blk.0.ffn_down.weight "
        "3,17 0,0\n"
        "  tensormorph scalar model.gguf blk.0.attn_q.weight 5,0 --ref "
        "source/\n"
        "  seq 0 9 | sed 's/$/,0/' | tensormorph scalar model.gguf "
        "blk.0.ffn_down.weight --indices-file -\n"
        "Each element prints: raw code (the stored integer and its bits); "
        "block, sub-block and group (the quantization group's id, as stats "
        "--group takes it); params (the format's stored fields); scale, "
        "zero-point and offset, and level (value = scale * level + offset, "
        "level = code - zero-point, computed as the decoder computes it, bit "
        "for bit); step (the distance to the "
        "neighbouring levels below and above); range (the group's lowest "
        "and highest representable values); value (the dequantized "
        "float32). --json prints the same fields (ScalarInspection).");
  }
  absl::Status Finish() override {
    EscapeTensorName(&o_.tensor);
    return absl::OkStatus();
  }
  int Run(const CommandContext& c) override {
    return RunScalar(*c.client, c.global, o_);
  }

 private:
  ScalarOptions o_;
};

}  // namespace

std::unique_ptr<Command> RegisterLs(CLI::App& app) {
  return std::make_unique<LsCommand>(app);
}
std::unique_ptr<Command> RegisterInfo(CLI::App& app) {
  return std::make_unique<InfoCommand>(app);
}
std::unique_ptr<Command> RegisterRead(CLI::App& app) {
  return std::make_unique<ReadCommand>(app);
}
std::unique_ptr<Command> RegisterScalar(CLI::App& app) {
  return std::make_unique<ScalarCommand>(app);
}

}  // namespace tensormorph
