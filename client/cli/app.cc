#include "client/cli/app.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/arguments.h"
#include "client/embedded/embedded_client.h"
#include "client/endpoint_set.h"

namespace tensormorph {

const char kAppDescription[] =
    "tensormorph: look inside quantized model checkpoints (safetensors, "
    "sharded or not, and GGUF).\n\n"
    "Without --server the CLI opens local files itself (embedded mode); with "
    "--server HOST:PORT (or $TENSORMORPH_SERVER) it asks a tensormorphd, and "
    "checkpoint paths are as that server sees them: relative to one of its "
    "roots or absolute inside one. --server a:7431,b:7431 (or a "
    "dns:///name:port that resolves to several addresses, as a headless "
    "Service's name does) names equivalent servers, each serving every "
    "checkpoint (servers fetch the bytes they lack themselves): each call "
    "goes to one of them in turn, and one that fails UNAVAILABLE before any "
    "reply is tried once on the next; `ls` of checkpoints asks every server "
    "and names the unreachable ones.\n\n"
    "Exit codes: 0 success, 1 usage error, found here or by the service "
    "(INVALID_ARGUMENT, OUT_OF_RANGE; diff-merge: part files that do not "
    "make one whole plan), 2 the call failed otherwise (or ran past "
    "--timeout), "
    "3 a diff or diff-merge --fail-on condition tripped, or a check found "
    "something at or above --fail-level, 4 a diff, diff-merge or compare "
    "compared what it could but some tensors it cannot decode (listed).";

void RegisterGlobalOptions(CLI::App& app, GlobalOptions& g) {
  app.fallthrough();  // global options may follow the command too
  app.require_subcommand(1);
  app.set_version_flag("--version",
                       std::string("tensormorph ") + TENSORMORPH_VERSION);
  app.add_option("--server", g.server,
                 "tensormorphd address HOST:PORT, or several equivalent "
                 "servers separated by commas, each HOST:PORT or "
                 "dns:///NAME:PORT (every address the name resolves to): "
                 "calls take turns, and fail over once to the next server "
                 "when one is unreachable (default $TENSORMORPH_SERVER, "
                 "which takes the same list; unset = embedded)")
      ->envname("TENSORMORPH_SERVER")
      // Given but empty (a script's unset variable) is a mistake, not a
      // request for embedded mode: local files would be read instead.
      ->check(CLI::Validator(
          [](std::string& address) {
            return address.empty()
                       ? std::string(
                             "an empty address: name HOST:PORT, or leave "
                             "--server out to open local files")
                       : std::string();
          },
          ""))
      ->type_name("HOST:PORT[,...]");
  app.add_option(
         "--token-file", g.token_file,
         "file with the bearer token for a server started with --token-file "
         "(default $TENSORMORPH_TOKEN_FILE)")
      ->envname("TENSORMORPH_TOKEN_FILE")
      ->type_name("FILE");
  app.add_option("--tls-ca", g.tls_ca,
                 "CA certificate (PEM) that signed the server's "
                 "certificate")
      ->type_name("FILE");
  app.add_option("--tls-cert", g.tls_cert,
                 "client certificate (PEM), for mutual TLS")
      ->type_name("FILE");
  app.add_option("--tls-key", g.tls_key,
                 "client private key (PEM), for mutual TLS")
      ->type_name("FILE");
  app.add_option("--timeout", g.timeout_seconds,
                 "deadline of each call in SECONDS (default: 60 for calls with "
                 "one reply; none for the streams of ls, read and diff); 0 = "
                 "no deadline")
      // CLI11's NonNegativeNumber named its range's end, all 309 digits
      // of the largest double.
      ->check(CLI::Validator(
          [](std::string& text) {
            double v = 0;
            return absl::SimpleAtod(text, &v) && v >= 0 && std::isfinite(v)
                       ? std::string()
                       : std::string("not a number of seconds >= 0: '") + text +
                             "'";
          },
          ""))
      ->type_name("SECONDS");
  app.add_flag("--json", g.json,
               "machine-readable output: protobuf's JSON mapping, one object "
               "(one per line for streams)");
}

std::vector<std::unique_ptr<Command>> RegisterCommands(CLI::App& app) {
  std::vector<std::unique_ptr<Command>> commands;
  for (auto* add :
       {RegisterLs, RegisterInfo, RegisterRead, RegisterScalar, RegisterStats,
        RegisterHeatmap, RegisterArch, RegisterDiff, RegisterDiffMerge,
        RegisterHealth, RegisterCheck, RegisterCompare, RegisterImatrix}) {
    commands.push_back(add(app));
  }
  return commands;
}

absl::Status ReadClientOptions(const GlobalOptions& g, ClientOptions* out) {
  if (g.timeout_seconds) {
    out->timeout = *g.timeout_seconds == 0 ? absl::InfiniteDuration()
                                           : absl::Seconds(*g.timeout_seconds);
  }
  // A certificate or key without a PEM block would fail only as a
  // connection that never comes up.
  for (const auto& [option, path, text, pem] :
       {std::tuple{"--token-file", &g.token_file, &out->token, false},
        std::tuple{"--tls-ca", &g.tls_ca, &out->tls_root_ca, true},
        std::tuple{"--tls-cert", &g.tls_cert, &out->tls_client_cert, true},
        std::tuple{"--tls-key", &g.tls_key, &out->tls_client_key, true}}) {
    if (path->empty()) continue;
    absl::StatusOr<std::string> read = ReadOptionFile(option, *path);
    if (!read.ok()) return read.status();
    if (pem && !absl::StrContains(*read, "-----BEGIN ")) {
      return absl::InvalidArgumentError(
          absl::StrCat(option, " '", *path, "' holds no PEM block"));
    }
    *text = *std::move(read);
  }
  // A token file holds the token on its first line.
  out->token = out->token.substr(0, out->token.find_first_of("\r\n"));
  return absl::OkStatus();
}

namespace {

// Levenshtein distance, capped: only "is it a typo away" matters.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::vector<std::string> ArgumentsOf(int argc, const char* const* argv) {
  std::vector<std::string> args;
  bool options = true;
  for (int i = 0; i < argc; ++i) {
    const absl::string_view a = argv[i];
    options = options && a != "--";
    if (i > 0 && options && a.size() > 3 && absl::StartsWith(a, "--") &&
        absl::EndsWith(a, "=") && a.find('=') == a.size() - 1) {
      args.emplace_back(a.substr(0, a.size() - 1));
      args.emplace_back();
      continue;
    }
    args.emplace_back(a);
  }
  return args;
}

bool AsksForJson(const std::vector<std::string>& args) {
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    if (args[i] == "--json") return true;
  }
  return false;
}

absl::Status CheckServerEnvironment(const GlobalOptions& g) {
  // CLI11 takes an empty variable for none.
  const char* env = std::getenv("TENSORMORPH_SERVER");
  if (env == nullptr || *env != '\0' || !g.server.empty()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      "TENSORMORPH_SERVER is set but empty: set it to HOST:PORT, or unset "
      "it to open local files");
}

std::string ParseErrorMessage(CLI::App& app, const CLI::ParseError& e) {
  if (!app.get_subcommands().empty()) return e.what();
  std::string word;
  for (const std::string& arg : app.remaining()) {
    if (!arg.empty() && arg[0] != '-') {
      word = arg;
      break;
    }
  }
  if (word.empty()) return e.what();
  std::vector<std::string> names;
  std::string closest;
  size_t best = 3;  // at most two edits away
  for (const CLI::App* c : app.get_subcommands({})) {
    names.push_back(c->get_name());
    const size_t d = EditDistance(word, c->get_name());
    if (d < best) best = d, closest = c->get_name();
  }
  return absl::StrCat(
      "'", word, "' is not a command",
      closest.empty() ? "" : absl::StrCat(" (did you mean '", closest, "'?)"),
      "; the commands are ", absl::StrJoin(names, ", "));
}

int RunChosenCommand(const std::vector<std::unique_ptr<Command>>& commands,
                     const GlobalOptions& g) {
  Command* chosen = nullptr;
  for (const std::unique_ptr<Command>& c : commands) {
    if (c->chosen()) chosen = c.get();
  }
  if (chosen == nullptr) return kExitUsage;
  ReportErrorsAsJson(g.json);
  const GuardedOutput output = chosen->Output();
  if (absl::Status s =
          CheckOutputIsNoInput(output.option, output.output, output.inputs);
      !s.ok()) {
    return ReportUsage(g, s);
  }
  if (absl::Status s = chosen->Finish(); !s.ok()) return ReportUsage(g, s);
  ClientOptions copts;
  if (chosen->needs() == Command::Needs::kNothing) {
    return chosen->Run({g, copts});
  }
  if (absl::Status s = ReadClientOptions(g, &copts); !s.ok()) {
    return ReportUsage(s);
  }
  if (chosen->needs() == Command::Needs::kChannel) {
    return chosen->Run({g, copts});
  }
  // A malformed --server is the user's to fix (exit 1), not a failed call.
  if (!g.server.empty()) {
    if (absl::Status s = CheckServerList(g.server); !s.ok()) {
      return ReportUsage(s);
    }
  }
  absl::StatusOr<std::unique_ptr<Client>> client =
      g.server.empty() ? EmbeddedClient(copts)
                       : Client::Connect(g.server, copts);
  if (!client.ok()) return ReportFailure(client.status());
  if (!g.server.empty()) {
    if (absl::Status s = CheckOutputIsNoServerInput(output, **client);
        !s.ok()) {
      return ReportUsage(g, s);
    }
  }
  return chosen->Run({g, copts, client->get()});
}

}  // namespace tensormorph
