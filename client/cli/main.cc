// tensormorph: look inside checkpoints, locally or on a tensormorphd.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>

#include "client/cli/arguments.h"
#include "client/cli/check_command.h"
#include "client/cli/commands.h"
#include "client/cli/output_file.h"
#include "client/endpoint_set.h"
#include "core/util/utf8.h"
#include "process/stream_heap.h"
#include "proto/request_limits.h"

namespace {

using namespace tensormorph;  // NOLINT: a program's main.

constexpr char kDescription[] =
    "tensormorph: look inside quantized model checkpoints (safetensors, "
    "sharded or not, and GGUF).\n\n"
    "Without --server the CLI opens local files itself (embedded mode); with "
    "--server HOST:PORT (or $TENSORMORPH_SERVER) it asks a tensormorphd, and "
    "checkpoint paths are as that server sees them: relative to one of its "
    "roots or absolute inside one. --server a:7431,b:7431 (or a "
    "dns:///name:port that resolves to several addresses, as a headless "
    "Service's name does) asks each server which checkpoints and shard files "
    "it holds and routes every call to one that holds the data: a checkpoint "
    "whose shards are spread over servers run with --partial-shards reads as "
    "one.\n\n"
    "Exit codes: 0 success, 1 usage error (diff-merge: part files that do "
    "not make one whole plan), 2 the call failed (or ran past --timeout), "
    "3 a diff or diff-merge --fail-on condition tripped, or a check found "
    "something at or above --fail-level.";

// -o: a path, not an empty string (which would silently mean "no file").
const CLI::Validator kOutputPath(
    [](std::string& path) {
      return path.empty() ? std::string("an empty path: name a file")
                          : std::string();
    },
    "PATH");

// What every file-writing option's help adds: the guarantees of
// client/cli/output_file.h.
constexpr char kOutputGuarantee[] =
    "; written whole or not at all (a temporary file beside it, renamed into "
    "place when complete: a failure or Ctrl-C leaves the previous file as it "
    "was), and refused (exit 1, before any work) when it is one of the "
    "command's inputs";

// Refuses, before any work (no client, no part file read), an output that
// is or lies inside one of its command's inputs (output_file.h).
absl::Status RefuseOutputsThatAreInputs(const CLI::App& app,
                                        const ReadOptions& read,
                                        const HeatmapOptionsCli& heat,
                                        const CheckOptionsCli& check,
                                        const DiffMergeOptionsCli& merge) {
  constexpr auto kCheckpoint = CommandInput::Kind::kCheckpoint;
  constexpr auto kFile = CommandInput::Kind::kFile;
  if (app.got_subcommand("read")) {
    return CheckOutputIsNoInput("-o", read.output,
                                {{kCheckpoint, read.checkpoint, "checkpoint"}});
  }
  if (app.got_subcommand("heatmap")) {
    return CheckOutputIsNoInput(
        "-o", heat.output,
        {{kCheckpoint, heat.checkpoint, "checkpoint"},
         {kCheckpoint, heat.reference, "--ref checkpoint"}});
  }
  if (app.got_subcommand("check")) {
    return CheckOutputIsNoInput(
        "--manifest", check.manifest,
        {{kCheckpoint, check.checkpoint, "checkpoint"},
         {kCheckpoint, check.source, "--source checkpoint"},
         {kFile, check.verify, "--verify manifest"}});
  }
  if (app.got_subcommand("diff-merge")) {
    std::vector<CommandInput> parts;
    for (const std::string& part : merge.parts) {
      parts.push_back({kFile, part, "part file"});
    }
    return CheckOutputIsNoInput("-o", merge.output, parts);
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  tensormorph::KeepStreamBuffersOnHeap();
  // The embedded server logs like tensormorphd does, to stderr and only when
  // asked ($TENSORMORPH_LOG_LEVEL): the CLI reports failures itself.
  auto logger = spdlog::stderr_color_mt("tensormorph");
  spdlog::set_default_logger(logger);
  const char* level = std::getenv("TENSORMORPH_LOG_LEVEL");
  spdlog::set_level(level ? spdlog::level::from_str(level)
                          : spdlog::level::off);

  GlobalOptions g;
  CLI::App app{kDescription, "tensormorph"};
  app.fallthrough();  // global options may follow the command too
  app.require_subcommand(1);
  app.set_version_flag("--version",
                       std::string("tensormorph ") + TENSORMORPH_VERSION);
  app.add_option("--server", g.server,
                 "tensormorphd address HOST:PORT, or several separated by "
                 "commas, each HOST:PORT or dns:///NAME:PORT (every address "
                 "the name resolves to); calls go to the server holding the "
                 "data (default $TENSORMORPH_SERVER, which takes the same "
                 "list; unset = embedded)")
      ->envname("TENSORMORPH_SERVER");
  app.add_option(
         "--token-file", g.token_file,
         "file with the bearer token for a server started with --token-file "
         "(default $TENSORMORPH_TOKEN_FILE)")
      ->envname("TENSORMORPH_TOKEN_FILE");
  app.add_option("--tls-ca", g.tls_ca,
                 "CA certificate (PEM) that signed the server's");
  app.add_option("--tls-cert", g.tls_cert,
                 "client certificate (PEM), for mutual TLS");
  app.add_option("--tls-key", g.tls_key,
                 "client private key (PEM), for mutual TLS");
  app.add_option("--timeout", g.timeout_seconds,
                 "deadline of each call in SECONDS (default: 60 for calls with "
                 "one reply; none for the streams of ls, read and diff); 0 = "
                 "no deadline")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--json", g.json,
               "machine-readable output: protobuf's JSON mapping, one object "
               "(one per line for streams)");

  LsOptions ls;
  CLI::App* ls_cmd = app.add_subcommand(
      "ls",
      "list the logical tensors of a checkpoint, or the checkpoints under a "
      "directory");
  ls_cmd->add_option(
      "checkpoint", ls.checkpoint,
      "checkpoint file or directory; a directory that is not a checkpoint, "
      "or none, lists the checkpoints under it (none: under the server's "
      "roots, or embedded the current directory)");
  ls_cmd->add_option("--filter", ls.filter,
                     "glob on tensor names, e.g. 'blk.0.*'");
  ls_cmd
      ->add_option("--depth", ls.depth,
                   "listing checkpoints: levels of subdirectories searched")
      ->capture_default_str()
      ->check(CLI::Range(0, 16));
  ls_cmd->footer(
      "Examples:\n  tensormorph ls model.gguf --filter 'blk.0.*'\n"
      "  tensormorph --server host:7000 ls\n"
      "Listing checkpoints prints PATH FORMAT FILES SIZE TENSORS MODIFIED "
      "(TENSORS: stored tensors, '-' when the headers are too big to count "
      "cheaply; MODIFIED in UTC).");

  InfoOptions info;
  CLI::App* info_cmd = app.add_subcommand(
      "info", "describe a checkpoint, or one tensor of it in full");
  info_cmd
      ->add_option("checkpoint", info.checkpoint,
                   "checkpoint file or directory")
      ->required();
  info_cmd->add_option("tensor", info.tensor, "tensor name (optional)");
  info_cmd->add_flag(
      "--part", info.part,
      "the name is a stored part's (ls's STORED AS), read as a plain "
      "tensor of its stored dtype, even where a logical tensor "
      "has the name too");
  info_cmd->footer(
      "Examples:\n  tensormorph info model.gguf\n"
      "  tensormorph info model.gguf blk.0.ffn_down.weight");

  ReadOptions read;
  CLI::App* read_cmd = app.add_subcommand(
      "read", "read a (sliced) tensor: a numpy-like preview, or a .npy file");
  read_cmd
      ->add_option("checkpoint", read.checkpoint,
                   "checkpoint file or directory")
      ->required();
  read_cmd->add_option("tensor", read.tensor, "tensor name")->required();
  read_cmd->add_option(
      "--slice", read.slice,
      "numpy slice per dimension, e.g. '0:4, ::2' or '..., -1'");
  read_cmd->add_flag("--raw", read.raw,
                     "the stored values instead of dequantized float32 (whole "
                     "blocks only for block types)");
  read_cmd
      ->add_option("-o,--output", read.output,
                   std::string("write a .npy file numpy.load reads (raw block "
                               "types: uint8, [rows, bytes per row])") +
                       kOutputGuarantee)
      ->check(kOutputPath);
  read_cmd->add_flag(
      "--part", read.part,
      "the name is a stored part's (ls's STORED AS), read as a plain "
      "tensor of its stored dtype, even where a logical tensor "
      "has the name too");
  read_cmd->footer(
      "Examples:\n  tensormorph read model.gguf blk.0.attn_q.weight --slice "
      "'0, :8'\n"
      "  tensormorph read model.gguf blk.0.attn_q.weight -o q.npy");

  ScalarOptions scalar;
  CLI::App* scalar_cmd =
      app.add_subcommand("scalar",
                         "the Scalar Inspector: raw code, scale, zero-point, "
                         "group, step and value");
  scalar_cmd
      ->add_option("checkpoint", scalar.checkpoint,
                   "checkpoint file or directory")
      ->required();
  scalar_cmd->add_option("tensor", scalar.tensor, "tensor name")->required();
  scalar_cmd->add_option(
      "index", scalar.indices,
      "one or more indices, one per argument, each with exactly "
      "the tensor's rank of comma-separated coordinates "
      "(negative counts from the end), e.g. 3,17; a rank-0 "
      "tensor's one element is ()");
  scalar_cmd->add_option(
      "--indices-file", scalar.indices_file,
      "more indices, one per line as on the command line, after those "
      "given as arguments; '-' reads standard input; blank lines and "
      "'#' comments are skipped");
  scalar_cmd->add_flag(
      "--part", scalar.part,
      "the name is a stored part's (ls's STORED AS), read as a plain "
      "tensor of its stored dtype, even where a logical tensor "
      "has the name too");
  CLI::Option* scalar_ref = scalar_cmd->add_option(
      "--ref", scalar.reference,
      "the full-precision source checkpoint: also show each element's "
      "source value (the source element the diff compares it with: a GGUF's "
      "Hugging Face tensor, Q/K rows through llama.cpp's RoPE permutation), "
      "the signed error (value - source) and the error in steps (|error| "
      "over the step on the source's side, as the error heatmap measures "
      "it; about 0.5 where values round to nearest, the diff gives each "
      "format's own bound)");
  scalar_cmd
      ->add_option("--ref-tensor", scalar.reference_tensor,
                   "the tensor in --ref (default: found as diff pairs)")
      ->needs(scalar_ref);
  scalar_cmd->footer(
      "Examples:\n  tensormorph scalar model.gguf blk.0.ffn_down.weight 3,17 "
      "0,0\n"
      "  tensormorph scalar model.gguf blk.0.attn_q.weight 5,0 --ref source/\n"
      "  seq 0 9 | sed 's/$/,0/' | tensormorph scalar model.gguf "
      "blk.0.ffn_down.weight --indices-file -");

  ls_cmd->add_flag(
      "--compat", ls.compat,
      "per encoding, which inference backends ship kernels for it");

  StatsOptionsCli stats;
  CLI::App* stats_cmd =
      app.add_subcommand("stats",
                         "statistics, a histogram and level usage (codes, "
                         "values at the end levels) of a tensor");
  stats_cmd
      ->add_option("checkpoint", stats.checkpoint,
                   "checkpoint file or directory")
      ->required();
  stats_cmd->add_option("tensor", stats.tensor, "tensor name")->required();
  stats_cmd->add_option("--bins", stats.bins, "histogram bins")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxHistogramBins));
  CLI::Option* stats_ref = stats_cmd->add_option(
      "--ref", stats.reference,
      "the full-precision source: splits zeros into pruned and induced");
  stats_cmd
      ->add_option("--ref-tensor", stats.reference_tensor,
                   "the tensor in --ref (default: found as diff pairs)")
      ->needs(stats_ref);
  int64_t stats_group = 0;
  CLI::Option* stats_group_opt = stats_cmd->add_option(
      "--group", stats_group,
      "only this quantization group (an id as 'scalar' shows it), and list "
      "its representable levels");
  stats_cmd->footer(
      "Example:\n  tensormorph stats model.gguf blk.0.attn_q.weight --bins 16\n"
      "  tensormorph stats model.gguf blk.0.attn_q.weight --group 3");

  HeatmapOptionsCli heat;
  CLI::App* heat_cmd =
      app.add_subcommand("heatmap",
                         "a tensor as a picture: values, absmax, error in "
                         "steps, or quantization groups");
  heat_cmd
      ->add_option("checkpoint", heat.checkpoint,
                   "checkpoint file or directory")
      ->required();
  heat_cmd->add_option("tensor", heat.tensor, "tensor name")->required();
  heat_cmd
      ->add_option("--mode", heat.mode,
                   "value (a cell's mean; also 'mean'), absmax, error (needs "
                   "--ref), group, or zeros (the fraction exactly 0; with "
                   "--ref, induced red and pruned blue)")
      ->capture_default_str()
      ->check(CLI::IsMember(
          {"value", "mean", "absmax", "error", "group", "zeros"}));
  CLI::Option* heat_ref = heat_cmd->add_option(
      "--ref", heat.reference, "the full-precision source (error mode)");
  heat_cmd
      ->add_option("--ref-tensor", heat.reference_tensor,
                   "the tensor in --ref (default: found as diff pairs)")
      ->needs(heat_ref);
  std::string size = "128x64";
  heat_cmd
      ->add_option("--size", size,
                   "cells WxH, each 1 to " + std::to_string(kMaxHeatmapSide) +
                       ", at most " + std::to_string(kMaxHeatmapCells) +
                       " in all (fewer when the tensor is smaller)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& text) {
            auto wh = ParseSize(text, kMaxHeatmapSide, kMaxHeatmapCells);
            return wh.ok() ? std::string() : std::string(wh.status().message());
          },
          "WxH"));
  heat_cmd
      ->add_option("--index", heat.leading,
                   "for rank > 2, one index per leading dimension (negative "
                   "counts from the end), comma-separated or repeated, e.g. "
                   "--index 0,3 for a rank-4 tensor")
      ->delimiter(',')
      ->allow_extra_args(false);
  std::string rows_range, cols_range;
  const CLI::Validator range_check(
      [](std::string& text) {
        auto r = ParseRange(text);
        return r.ok() ? std::string() : std::string(r.status().message());
      },
      "A:B");
  heat_cmd
      ->add_option("--rows", rows_range,
                   "only view rows [A, B) (zoom; either end may be left out)")
      ->check(range_check);
  heat_cmd
      ->add_option("--cols", cols_range,
                   "only view columns [A, B) (zoom; either end may be left "
                   "out)")
      ->check(range_check);
  heat_cmd
      ->add_option("-o,--output", heat.output,
                   std::string("write a PNG") + kOutputGuarantee)
      ->check(kOutputPath);
  heat_cmd->add_flag("--term", heat.term,
                     "draw with 24-bit colour in the terminal");
  heat_cmd->footer(
      "Group mode colours neighbouring groups apart (no lines).\nExamples:\n"
      "  tensormorph heatmap model.gguf blk.0.attn_q.weight --mode group -o "
      "q.png\n"
      "  tensormorph heatmap q.gguf blk.0.attn_q.weight --mode error --ref "
      "src.gguf --term\n"
      "  tensormorph heatmap q.gguf blk.0.attn_q.weight --mode zeros --rows "
      "0:256 --cols 0:512 -o z.png");

  ArchOptionsCli arch;
  CLI::App* arch_cmd =
      app.add_subcommand("arch",
                         "the module tree, with a mark wherever the dtype or "
                         "quantization scheme changes");
  arch_cmd
      ->add_option("checkpoint", arch.checkpoint,
                   "checkpoint file or directory")
      ->required();
  arch_cmd->add_flag("--dot", arch.dot, "Graphviz output");
  arch_cmd->footer(
      "Examples:\n  tensormorph arch model.gguf\n  tensormorph arch model/ "
      "--dot | dot -Tpng > arch.png");

  DiffOptionsCli diff;
  CLI::App* diff_cmd =
      app.add_subcommand("diff",
                         "quantization diff: a quantized checkpoint against "
                         "its full-precision source, "
                         "with error in units of the local quantization step");
  diff_cmd->add_option("quantized", diff.quant, "the quantized checkpoint")
      ->required();
  diff_cmd->add_option("reference", diff.reference, "its full-precision source")
      ->required();
  diff_cmd->add_option("--filter", diff.filter,
                       "glob on the quantized tensors' names");
  diff_cmd
      ->add_option("--top", diff.top_k,
                   "worst elements reported per tensor (0 = none)")
      ->capture_default_str()
      ->check(CLI::Range(0, kMaxDiffTopK));
  diff_cmd->add_option(
      "--fail-on", diff.fail_on,
      "exit 3 when any tensor trips METRIC OP NUMBER (repeatable), e.g. "
      "'max_excess_steps>0', 'not_nearest>0' or 'sqnr_db<25'");
  std::string diff_part;
  diff_cmd
      ->add_option("--part", diff_part,
                   "only part i of N (from 0): a share of the tensors, "
                   "balanced by bytes, one shard file's together where "
                   "balance allows; the same split on every machine. Merge "
                   "the parts' --json output with diff-merge")
      ->check(CLI::Validator(
          [](std::string& text) {
            auto p = ParseDiffPart(text);
            return p.ok() ? std::string() : std::string(p.status().message());
          },
          "i/N"));
  diff_cmd->footer(
      "Error in steps is |x - x_hat| / the gap between quantization levels. "
      "Each format states\n"
      "its bound (BOUND): 0.5 for round-to-nearest, a little more where "
      "the scale is stored\n"
      "as f16 (Q8_0, Q4_x, Q5_x), a designed clip for Q4_0/Q5_0, K-quants "
      "and IQ4.\n"
      "CLIPPED counts sources outside their group's range (by design or "
      "not); NOT NEAREST\n"
      "those inside it with another level closer; EXCESS is how far the "
      "worst lies beyond\n"
      "the bound; zero-scale groups are counted apart (ZEROED).\n"
      "Examples:\n  tensormorph diff model-q4_k.gguf hf-source/ --filter "
      "'blk.0.*'\n"
      "  tensormorph diff quant/ source/ --json --fail-on 'max_excess_steps>0' "
      "--fail-on 'sqnr_db<25'\n"
      "  tensormorph diff quant/ source/ --part 1/3 --json > part-1.jsonl   "
      "(see diff-merge)");

  DiffMergeOptionsCli merge;
  CLI::App* merge_cmd = app.add_subcommand(
      "diff-merge",
      "put the parts of a diff (diff --part i/N --json) back together: the "
      "report one run of the whole diff gives, number for number");
  merge_cmd
      ->add_option("parts", merge.parts,
                   "the part files, one per part, in any order")
      ->required();
  merge_cmd
      ->add_option(
          "--fail-on", merge.fail_on,
          "gate the merged reports again, replacing the parts' gates: exit 3 "
          "when any tensor trips METRIC OP NUMBER (repeatable); without it the "
          "gates the parts ran with hold")
      // One gate per --fail-on: part files after it stay part files.
      ->allow_extra_args(false);
  merge_cmd
      ->add_option("-o,--output", merge.output,
                   std::string("write what stdout would show (the table, or "
                               "with --json the lines) to this file") +
                       kOutputGuarantee)
      ->check(kOutputPath);
  merge_cmd->footer(
      "A diff in 3 parts (say the pods of a Kubernetes Indexed Job), then "
      "merged:\n"
      "  for i in 0 1 2; do\n"
      "    tensormorph diff quant/ source/ --part $i/3 --json > part-$i.jsonl\n"
      "  done\n"
      "  tensormorph diff-merge part-*.jsonl --fail-on 'max_excess_steps>0'\n"
      "Every tensor is diffed whole by exactly one part, so the merge prints "
      "what one run prints\n"
      "(wall time: the slowest part's), as a table or with --json as lines "
      "sorted by tensor name,\n"
      "then the summary. No server is asked. Exit codes as diff: 0, or 3 "
      "when a gate trips;\n"
      "1 when the files are not one whole plan, naming them: a part missing "
      "or given twice,\n"
      "parts of different plans (checkpoints, filter, gates, --top or N), a "
      "file cut short\n"
      "(no summary, or fewer reports than it counts), a tensor reported "
      "twice.");

  HealthOptions health;
  CLI::App* health_cmd = app.add_subcommand(
      "health",
      "ask a server's gRPC health service (grpc.health.v1.Health/Check) "
      "whether it is SERVING");
  health_cmd->add_option("--service", health.service,
                         "the service to ask about (default: the whole "
                         "server)");
  health_cmd->footer(
      "Exit 0 when SERVING; 2 when the server answers another status "
      "(named on stderr), cannot be reached, or does not answer within the "
      "deadline (5 s unless --timeout says otherwise). Health checks need no "
      "token. "
      "Several servers, --server a:7431,b:7431, are asked one by one; "
      "without --server the embedded server is asked.\n"
      "Examples:\n  tensormorph health --server 127.0.0.1:7431\n"
      "  tensormorph --server dns:///tensormorph:7431 health --json");

  CheckOptionsCli check;
  CLI::App* check_cmd = app.add_subcommand(
      "check",
      "validate a checkpoint before serving it: index and companions, "
      "config keys, NaN/Inf, broken scales and groups, convention "
      "mismatches, duplicate tensors, integrity against a manifest, errors "
      "against a source");
  check_cmd
      ->add_option("checkpoint", check.checkpoint,
                   "checkpoint file or directory")
      ->required();
  check_cmd
      ->add_option("--fail-level", check.fail_level,
                   "exit 3 when a finding is at or above this severity")
      ->capture_default_str()
      ->check(CLI::IsMember({"error", "warning", "info"}));
  check_cmd
      ->add_option("--manifest", check.manifest,
                   std::string("write every stored tensor's content hash "
                               "(XXH3-64) to this JSON file") +
                       kOutputGuarantee)
      ->check(kOutputPath);
  check_cmd->add_option(
      "--verify", check.verify,
      "check the stored bytes against a manifest --manifest wrote: every "
      "tensor that differs, is missing or is extra is an error");
  check_cmd->add_option(
      "--source", check.source,
      "also diff every quantized tensor against this full-precision source "
      "and hold it to the scheme's default gates (source-err-steps, "
      "source-sqnr)");
  check_cmd->footer(CheckHelpFooter());

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  ReportErrorsAsJson(g.json);
  if (absl::Status s =
          RefuseOutputsThatAreInputs(app, read, heat, check, merge);
      !s.ok()) {
    return ReportUsage(g, s);
  }
  if (*merge_cmd) return RunDiffMerge(g, merge);  // reads files, no server
  if (!diff_part.empty()) {
    auto part = ParseDiffPart(diff_part);  // checked by CLI11 already
    if (!part.ok()) return ReportUsage(part.status());
    std::tie(diff.part_index, diff.part_count) = *part;
  }
  if (*heat_cmd && heat.mode == "error" && heat.reference.empty()) {
    return ReportUsage(absl::InvalidArgumentError(
        "--mode error measures against a reference: give it with --ref"));
  }

  // A name typed or pasted as its raw bytes (not UTF-8, so no API string
  // can carry it) means the tensor listed under its escaped spelling.
  for (std::string* name : {&info.tensor, &read.tensor, &scalar.tensor,
                            &stats.tensor, &heat.tensor}) {
    if (!IsValidUtf8(*name)) *name = EscapeUtf8(*name);
  }

  ClientOptions copts;
  if (g.timeout_seconds) {
    copts.timeout = *g.timeout_seconds == 0 ? absl::InfiniteDuration()
                                            : absl::Seconds(*g.timeout_seconds);
  }
  auto slurp = [](const std::string& path, std::string* out) {
    std::ifstream in(path);
    if (!in) return false;
    std::stringstream ss;
    ss << in.rdbuf();
    *out = ss.str();
    return true;
  };
  for (const auto& [path, out] :
       {std::pair{&g.token_file, &copts.token},
        std::pair{&g.tls_ca, &copts.tls_root_ca},
        std::pair{&g.tls_cert, &copts.tls_client_cert},
        std::pair{&g.tls_key, &copts.tls_client_key}}) {
    if (!path->empty() && !slurp(*path, out)) {
      std::fprintf(stderr, "tensormorph: cannot read '%s'\n", path->c_str());
      return kExitUsage;
    }
  }
  // A token file holds the token on its first line.
  copts.token = copts.token.substr(0, copts.token.find_first_of("\r\n"));
  // Its own channel: a health check needs no Client, and embedded it asks
  // the in-process server itself.
  if (*health_cmd) return RunHealth(g, copts, health);
  // A malformed --server is the user's to fix (exit 1), not a failed call.
  // (health parses its list itself, above.)
  if (!g.server.empty()) {
    if (absl::Status s = CheckServerList(g.server); !s.ok()) {
      return ReportUsage(s);
    }
  }
  absl::StatusOr<std::unique_ptr<Client>> client =
      g.server.empty() ? Client::Embedded(copts)
                       : Client::Connect(g.server, copts);
  if (!client.ok()) return ReportFailure(client.status());
  Client& c = **client;
  if (*ls_cmd) return RunLs(c, g, ls);
  if (*info_cmd) return RunInfo(c, g, info);
  if (*read_cmd) return RunRead(c, g, read);
  if (*scalar_cmd) return RunScalar(c, g, scalar);
  if (*diff_cmd) return RunDiff(c, g, diff);
  if (*check_cmd) return RunCheck(c, g, check);
  if (*stats_cmd) {
    if (stats_group_opt->count() > 0) stats.group = stats_group;
    return RunStats(c, g, stats);
  }
  if (*heat_cmd) {
    auto wh = ParseSize(size, kMaxHeatmapSide,
                        kMaxHeatmapCells);  // checked by CLI11 already
    if (!wh.ok()) return ReportUsage(wh.status());
    std::tie(heat.width, heat.height) = *wh;
    // Checked by CLI11 already; the server names a region outside the view.
    if (!rows_range.empty()) {
      auto r = ParseRange(rows_range);
      if (!r.ok()) return ReportUsage(r.status());
      std::tie(heat.row_begin, heat.row_end) = *r;
    }
    if (!cols_range.empty()) {
      auto r = ParseRange(cols_range);
      if (!r.ok()) return ReportUsage(r.status());
      std::tie(heat.col_begin, heat.col_end) = *r;
    }
    return RunHeatmap(c, g, heat);
  }
  if (*arch_cmd) return RunArch(c, g, arch);
  return kExitUsage;
}
