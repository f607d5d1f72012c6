// tensormorph health: asks a server's standard gRPC health service
// (grpc.health.v1.Health/Check), what a container's HEALTHCHECK and a
// script waiting for a server need from the one binary the image ships.
//
// The two messages are encoded and decoded here by hand rather than from a
// compiled health.proto: gRPC's own copy (the server's default health
// service) already sits in the process's descriptor pool, and a second
// registration of grpc.health.v1 would abort at start-up.
//
// Built into the tensormorph binary, not tensormorph_cli_lib: embedded mode
// checks the in-process server, which only the binary links.
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cli/command.h"
#include "client/cli/commands.h"
#include "client/cli/format.h"
#include "client/endpoint_set.h"
#include "core/util/error_reason.h"
#include "proto/status_mapping.h"
#include "server/server.h"

namespace tensormorph {
namespace {

constexpr char kCheckMethod[] = "/grpc.health.v1.Health/Check";

// HealthCheckResponse.ServingStatus, as grpc/health/v1/health.proto numbers
// it.
constexpr uint64_t kServing = 1;

std::string StatusName(uint64_t status) {
  switch (status) {
    case 0:
      return "UNKNOWN";
    case 1:
      return "SERVING";
    case 2:
      return "NOT_SERVING";
    case 3:
      return "SERVICE_UNKNOWN";
    default:
      return absl::StrCat("status ", status);
  }
}

// HealthCheckRequest { string service = 1; }: an empty service is the
// empty message (proto3 leaves a default field out).
std::string EncodeRequest(absl::string_view service) {
  std::string out;
  if (service.empty()) return out;
  out.push_back(0x0a);  // field 1, length-delimited
  for (uint64_t n = service.size();; n >>= 7) {
    if (n < 0x80) {
      out.push_back(static_cast<char>(n));
      break;
    }
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
  }
  out.append(service.data(), service.size());
  return out;
}

// Reads a varint at `*pos`, advancing it; false past the end or past the
// ten bytes a 64-bit varint takes.
bool ReadVarint(absl::string_view bytes, size_t* pos, uint64_t* value) {
  *value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*pos >= bytes.size()) return false;
    const auto byte = static_cast<uint8_t>(bytes[(*pos)++]);
    *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// HealthCheckResponse { ServingStatus status = 1; }: the status (0, UNKNOWN,
// when absent, as proto3 reads it); fields this client does not know are
// skipped, as a newer server may send them.
absl::StatusOr<uint64_t> DecodeStatus(absl::string_view bytes) {
  uint64_t status = 0;
  size_t pos = 0;
  while (pos < bytes.size()) {
    uint64_t tag = 0, value = 0;
    bool ok = ReadVarint(bytes, &pos, &tag);
    switch (ok ? tag & 7 : 8) {
      case 0:  // varint
        ok = ReadVarint(bytes, &pos, &value);
        if (ok && (tag >> 3) == 1) status = value;
        break;
      case 1:  // 64-bit
        ok = bytes.size() - pos >= 8;
        pos += ok ? 8 : 0;
        break;
      case 2:  // length-delimited
        ok = ReadVarint(bytes, &pos, &value) && value <= bytes.size() - pos;
        pos += ok ? value : 0;
        break;
      case 5:  // 32-bit
        ok = bytes.size() - pos >= 4;
        pos += ok ? 4 : 0;
        break;
      default:
        ok = false;
    }
    if (!ok) {
      return absl::InternalError(absl::StrCat(
          "the reply to ", kCheckMethod, " (", bytes.size(),
          " bytes) does not parse as grpc.health.v1.HealthCheckResponse: "
          "field data ends or breaks at byte ",
          pos));
    }
  }
  return status;
}

// One Check call on `channel`: the serving status, or why there is none.
absl::StatusOr<uint64_t> Check(grpc::Channel* channel,
                               const ClientOptions& copts,
                               absl::string_view service) {
  grpc::ClientContext ctx;
  // Health checks need no token (the server exempts them); one is sent
  // anyway, so a server that wanted it would still answer.
  if (!copts.token.empty())
    ctx.AddMetadata("authorization", "Bearer " + copts.token);
  const absl::Duration timeout = copts.timeout.value_or(kDefaultHealthTimeout);
  if (timeout != absl::InfiniteDuration()) {
    ctx.set_deadline(std::chrono::system_clock::now() +
                     absl::ToChronoMilliseconds(timeout));
  }
  const std::string encoded = EncodeRequest(service);
  grpc::Slice slice(encoded);
  grpc::ByteBuffer request(&slice, 1), reply;
  const grpc::internal::RpcMethod method(kCheckMethod,
                                         grpc::internal::RpcMethod::NORMAL_RPC);
  const grpc::Status s =
      grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
          channel, method, &ctx, request, &reply);
  if (!s.ok()) {
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      return absl::DeadlineExceededError(
          absl::StrCat("no answer within ", absl::FormatDuration(timeout),
                       " (--timeout sets it)"));
    }
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
      return absl::NotFoundError(
          absl::StrCat("the server knows no service '", service,
                       "' (--service; the empty name is the whole server)"));
    }
    return FromGrpcStatus(s);
  }
  std::vector<grpc::Slice> slices;
  if (!reply.Dump(&slices).ok()) {
    return absl::InternalError("the health reply could not be read");
  }
  std::string bytes;
  for (const grpc::Slice& part : slices) {
    bytes.append(reinterpret_cast<const char*>(part.begin()), part.size());
  }
  return DecodeStatus(bytes);
}

// The channel Client::Connect would open to `target`: the same TLS
// credentials.
std::shared_ptr<grpc::Channel> RemoteChannel(const std::string& target,
                                             const ClientOptions& copts) {
  std::shared_ptr<grpc::ChannelCredentials> creds =
      grpc::InsecureChannelCredentials();
  if (!copts.tls_root_ca.empty() || !copts.tls_client_cert.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = copts.tls_root_ca;
    ssl.pem_cert_chain = copts.tls_client_cert;
    ssl.pem_private_key = copts.tls_client_key;
    creds = grpc::SslCredentials(ssl);
  }
  return grpc::CreateChannel(target, creds);
}

// Prints one endpoint's outcome; returns whether it is SERVING.
bool Report(const GlobalOptions& g, const HealthOptions& o,
            const std::string& where, const absl::StatusOr<uint64_t>& status) {
  if (g.json) {
    std::string line =
        absl::StrCat("{\"server\":", JsonString(where),
                     ",\"service\":", JsonString(o.service), ",\"status\":",
                     JsonString(status.ok() ? StatusName(*status) : "UNKNOWN"));
    if (!status.ok()) {
      absl::StrAppend(&line, ",\"error\":", ErrorJsonObject(status.status()));
    }
    std::cout << line << "}\n";
  } else if (status.ok()) {
    std::cout << where << ": " << StatusName(*status) << "\n";
  }
  if (!status.ok()) {
    ReportFailure(
        CopyReason(status.status(),
                   absl::Status(status.status().code(),
                                absl::StrCat("health check of ", where, ": ",
                                             status.status().message()))),
        /*json_line=*/false);
    return false;
  }
  if (*status != kServing) {
    std::fprintf(stderr, "tensormorph: %s is %s\n", where.c_str(),
                 StatusName(*status).c_str());
    return false;
  }
  return true;
}

}  // namespace

int RunHealth(const GlobalOptions& g, const ClientOptions& copts,
              const HealthOptions& o) {
  bool all_serving = true;
  if (g.server.empty()) {
    ServerOptions options;
    options.unrestricted = true;
    auto server = TensormorphServer::StartInProcess(options);
    if (!server.ok()) return ReportFailure(server.status());
    all_serving =
        Report(g, o, "embedded",
               Check((*server)->InProcessChannel().get(), copts, o.service));
    return all_serving ? kExitOk : kExitCallFailed;
  }
  // Each endpoint of a list, and each address a dns:/// name resolves to
  // (every pod of a headless Service), is asked on its own: a script learns
  // which one is down, by name. The list is read as every command reads it
  // (client/endpoint_set.h).
  if (absl::Status s = CheckServerList(g.server); !s.ok()) {
    return ReportUsage(s);
  }
  std::vector<std::string> targets = {g.server};
  const absl::string_view spelled = absl::StripAsciiWhitespace(g.server);
  if (absl::StrContains(spelled, ',') || absl::StartsWith(spelled, "dns:///")) {
    auto resolved = ResolveEndpoints(g.server);
    if (!resolved.ok()) {
      return resolved.status().code() == absl::StatusCode::kInvalidArgument
                 ? ReportUsage(resolved.status())
                 : ReportFailure(resolved.status());
    }
    targets = *std::move(resolved);
  }
  for (const std::string& target : targets) {
    all_serving &=
        Report(g, o, target,
               Check(RemoteChannel(target, copts).get(), copts, o.service));
  }
  return all_serving ? kExitOk : kExitCallFailed;
}

namespace {

class HealthCommand : public Command {
 public:
  explicit HealthCommand(CLI::App& app)
      : Command(app.add_subcommand(
                    "health",
                    "ask a server's gRPC health service "
                    "(grpc.health.v1.Health/Check) whether it is SERVING"),
                Needs::kChannel) {
    CLI::App& cmd = *this->app();
    cmd.add_option("--service", o_.service,
                   "the service to ask about (default: the whole "
                   "server)");
    cmd.footer(
        "Exit 0 when SERVING; 2 when the server answers another status "
        "(named on stderr), cannot be reached, or does not answer within the "
        "deadline (5 s unless --timeout says otherwise). Health checks need "
        "no token. "
        "Several servers, --server a:7431,b:7431, are asked one by one; "
        "without --server the embedded server is asked.\n"
        "Examples:\n  tensormorph health --server 127.0.0.1:7431\n"
        "  tensormorph --server dns:///tensormorph:7431 health --json");
  }
  // Its own channel: a health check needs no Client, and embedded it asks
  // the in-process server itself (it parses the --server list itself too).
  int Run(const CommandContext& c) override {
    return RunHealth(c.global, c.client_options, o_);
  }

 private:
  HealthOptions o_;
};

}  // namespace

std::unique_ptr<Command> RegisterHealth(CLI::App& app) {
  return std::make_unique<HealthCommand>(app);
}

}  // namespace tensormorph
