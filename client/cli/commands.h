// The CLI's commands. Each returns the process exit code: 0 success, 1 a
// usage error (an argument malformed, or not fitting the tensor: checked
// before the call that would use it), 2 the call failed (message on stderr
// with the status code's name).
#ifndef TENSORMORPH_CLIENT_CLI_COMMANDS_H_
#define TENSORMORPH_CLIENT_CLI_COMMANDS_H_

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"

namespace tensormorph {

inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 1;
inline constexpr int kExitCallFailed = 2;
inline constexpr int kExitThreshold = 3;  // diff --fail-on tripped
// diff compared every tensor it could, but some it cannot decode (listed
// in DiffSummary.undecodable); kExitThreshold takes precedence.
inline constexpr int kExitGaps = 4;

struct GlobalOptions {
  std::string server;  // empty = embedded
  bool json = false;
  std::string token_file;
  std::string tls_ca, tls_cert, tls_key;
  // --timeout: unset = the client's defaults; 0 = no deadline.
  std::optional<double> timeout_seconds;
};

// Prints "tensormorph: CODE [REASON]: message" (and a hint where one helps)
// and returns ExitCodeOf(status); after ReportErrorsAsJson(true) (--json)
// also one line {"error":ErrorJsonObject(status)} on stdout, unless
// json_line is false (a command that printed the error in its own --json
// line).
int ReportFailure(const absl::Status& status, bool json_line = true);
// The exit code of a call that failed with `status`: kExitUsage for a
// request refused as wrong (INVALID_ARGUMENT, OUT_OF_RANGE), as for one the
// CLI refuses before calling; kExitCallFailed otherwise.
int ExitCodeOf(const absl::Status& status);
// main's --json, for ReportFailure: call once before any command runs.
void ReportErrorsAsJson(bool on);
// {"code":"NOT_FOUND","reason":"TENSOR_NOT_FOUND","message":"...",
//  "metadata":{"checkpoint":"...","tensor":"..."}}: an error as --json
// prints it (the reason as Client's ErrorReasonOf, docs/errors.md).
std::string ErrorJsonObject(const absl::Status& status);

// Prints "tensormorph: CODE [REASON]: message", the line ReportFailure
// prints (no hint), and returns kExitUsage: for arguments the CLI can tell
// are wrong before or without a call. A status made here carries no reason
// and reads as its code's generic one (INVALID_ARGUMENT: REQUEST_INVALID);
// one from a parser keeps the parser's (SLICE_INVALID, ...). The exit code,
// not the reason, tells a usage error from a refused call. After
// ReportErrorsAsJson(true) (--json) also one line on stdout in the shape
// ReportFailure's is, {"error":ErrorJsonObject(status)}, for scripts that
// parse stdout only: every usage error found once a command runs.
int ReportUsage(const absl::Status& status);
// As above, with --json taken from `g`: for the usage errors main finds
// before ReportErrorsAsJson.
int ReportUsage(const GlobalOptions& g, const absl::Status& status);

// The TensorInfo of `tensor` in `checkpoint` (its shape, to check indices
// against before the call that uses them): the logical tensor of that name
// or else the stored part; with `part`, only the stored part.
// Errors: GetTensor's (NOT_FOUND naming both, with the nearest names).
absl::StatusOr<v1::TensorInfo> LookupTensor(Client& client,
                                            const std::string& checkpoint,
                                            const std::string& tensor,
                                            bool part = false);

// Prints a tensor's backend compatibility rows as a table.
void PrintCompat(const v1::TensorInfo& t);

struct LsOptions {
  std::string checkpoint;
  std::string filter;
  bool compat = false;
  int depth = 4;  // listing checkpoints: subdirectory levels searched
  // List the checkpoints under the path even when it is one checkpoint
  // itself (a safetensors directory with more beside its shards).
  bool checkpoints = false;
};
// Over a --server list, a listing of checkpoints asks every server and names
// the unreachable ones (servers_listing.h): exit 0 when at least one
// answered.
int RunLs(Client& client, const GlobalOptions& g, const ClientOptions& copts,
          const LsOptions& o);

struct InfoOptions {
  std::string checkpoint;
  std::string tensor;  // empty = the checkpoint
  // The name is a stored part's (ls's STORED AS), even where a logical
  // tensor has it too. Without it, a name no logical tensor has is looked
  // up among the stored parts anyway.
  bool part = false;
};
int RunInfo(Client& client, const GlobalOptions& g, const InfoOptions& o);

struct ReadOptions {
  std::string checkpoint;
  std::string tensor;
  std::string slice;
  bool raw = false;
  std::string output;  // .npy path; empty = preview on stdout
  // The name is a stored part's (ls's STORED AS), even where a logical
  // tensor has it too. Without it, a name no logical tensor has is looked
  // up among the stored parts anyway.
  bool part = false;
};
int RunRead(Client& client, const GlobalOptions& g, const ReadOptions& o);

struct ScalarOptions {
  std::string checkpoint;
  std::string tensor;
  std::vector<std::string> indices;  // one index per entry: "3,17"
  // More indices, one per line, after `indices`; "-" is standard input.
  std::string indices_file;
  // The name is a stored part's (ls's STORED AS), even where a logical
  // tensor has it too. Without it, a name no logical tensor has is looked
  // up among the stored parts anyway.
  bool part = false;
  // The full-precision source (a checkpoint), and the tensor in it (empty:
  // found as the diff pairs): each element's source value, signed error and
  // error in steps are shown too.
  std::string reference;
  std::string reference_tensor;
};
int RunScalar(Client& client, const GlobalOptions& g, const ScalarOptions& o);

struct DiffOptionsCli {
  std::string quant;
  std::string reference;
  std::string filter;
  int top_k = 10;  // 0 = no worst elements
  std::vector<std::string> fail_on;
  // --part i/N: only part `part_index` of `part_count` (0 = the whole diff).
  int32_t part_index = 0, part_count = 0;
  // --run-id (or $TENSORMORPH_RUN_ID): the batch run a part belongs to
  // (DiffPart.run_id); empty: derived from the inputs (InputsRunId).
  std::string run_id;
  // --imatrix: an importance matrix weighing each column's squared error
  // (QuantDiffRequest.imatrix); empty: none.
  std::string imatrix;
};
int RunDiff(Client& client, const GlobalOptions& g, const DiffOptionsCli& o);

// A diff's result, from one run or merged from parts.
struct DiffResult {
  std::string quant, reference;    // as the user named them
  std::vector<std::string> gates;  // --fail-on as written
  std::vector<v1::TensorDiffReport> reports;
  v1::DiffSummary summary;
};
// Presents `r` as `tensormorph diff` does, so a merge reads like a run:
// without --json the table (worst error in steps first), the worst
// elements of the worst tensor, the summary lines and, for a part, which
// part it is, on `out`; JSON lines are the caller's to print. Then the
// tensors that tripped a gate, on stderr. Returns kExitThreshold when the
// summary flags any tensor, else kExitGaps when it lists undecodable
// tensors, else kExitOk.
int PrintDiffResult(const GlobalOptions& g, DiffResult r,
                    std::ostream& out = std::cout);

struct DiffMergeOptionsCli {
  std::vector<std::string> parts;    // files of `diff --part i/N --json`
  std::vector<std::string> fail_on;  // empty: the parts' own gates hold
  std::string output;  // -o: what stdout would show, as a file; empty = stdout
};
// Needs no server: reads the part files only. Refusals (parts missing,
// twice, of different plans, cut short, an -o that cannot be written) are
// usage errors (exit 1).
int RunDiffMerge(const GlobalOptions& g, const DiffMergeOptionsCli& o);

struct StatsOptionsCli {
  std::string checkpoint, tensor, reference;
  std::string reference_tensor;  // empty = found by the diff's pairing rules
  int bins = 32;
  std::optional<int64_t> group;  // --group: that group's elements alone
};
int RunStats(Client& client, const GlobalOptions& g, const StatsOptionsCli& o);

struct HeatmapOptionsCli {
  std::string checkpoint, tensor, reference;
  std::string reference_tensor;  // empty = found by the diff's pairing rules
  std::string mode = "value";
  std::string imatrix;  // sq-error mode: weigh by this importance matrix
  int width = 128, height = 64;
  bool size_given = false;  // --size: drawn at that size, whatever the terminal
  // For rank > 2: exactly one index per leading dimension, negative ones
  // counting from the end.
  std::vector<int64_t> leading;
  // --rows / --cols: the region [begin, end) of the view; an end of 0 = to
  // the end.
  int64_t row_begin = 0, row_end = 0, col_begin = 0, col_end = 0;
  std::string output;
  bool term = false;
};
int RunHeatmap(Client& client, const GlobalOptions& g,
               const HeatmapOptionsCli& o);

struct ArchOptionsCli {
  std::string checkpoint;
  bool dot = false;
};
int RunArch(Client& client, const GlobalOptions& g, const ArchOptionsCli& o);

// `tensormorph health`'s deadline unless --timeout sets one: a health check
// that takes longer is a failed one.
inline constexpr absl::Duration kDefaultHealthTimeout = absl::Seconds(5);

struct HealthOptions {
  std::string service;  // empty = the whole server
};
// Asks grpc.health.v1.Health/Check of each --server endpoint (a comma-
// separated list is asked one by one), or embedded of the in-process
// server: prints each status, exits 0 when every one is SERVING, else
// kExitCallFailed naming the status or why the call failed. `copts` gives
// the token, TLS and deadline (default kDefaultHealthTimeout). Defined in
// health_command.cc, which the tensormorph binary links itself (embedded
// mode starts the server), not tensormorph_cli_lib.
int RunHealth(const GlobalOptions& g, const ClientOptions& copts,
              const HealthOptions& o);

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_CLI_COMMANDS_H_
