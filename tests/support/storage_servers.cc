#include "tests/support/storage_servers.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "tests/support/process.h"
#include "tests/support/raw_http.h"
#include "tests/support/test_ca.h"
#include "tests/support/test_paths.h"

namespace tensormorph::testing {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

[[noreturn]] void Die(const std::string& what, const std::string& log) {
  std::cerr << what << "\n" << Slurp(log) << std::endl;
  std::abort();
}

bool Executable(const std::string& path) {
  return !path.empty() && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& argv,
                           const std::string& log) {
  const int fd =
      ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) std::abort();
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (std::string& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) std::abort();
  if (pid_ == 0) {
    // A test that dies must not leave its server behind.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    const int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fd);
}

ChildProcess::~ChildProcess() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  int status = 0;
  ::waitpid(pid_, &status, 0);
}

int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    std::abort();
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

bool WaitForPort(int port, const std::string& host) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    const bool ok =
        ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    ::close(fd);
    if (ok) return true;
    // Polling a server's start: there is no event to wait on.
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::string NginxPath() {
  for (const char* p : {"/usr/sbin/nginx", "/usr/local/sbin/nginx"}) {
    if (Executable(p)) return p;
  }
  return "";
}

std::string S3rverPath() {
  const char* env = std::getenv("TENSORMORPH_S3RVER");
  std::string path = env != nullptr ? env : TENSORMORPH_S3RVER_DEFAULT;
  return ::access(path.c_str(), R_OK) == 0 ? path : "";
}

NginxServer::NginxServer(const std::string& data_dir, bool tls)
    : dir_(MakeTempDir()) {
  const std::string log = dir_ + "/nginx.out";
  for (int attempt = 0; attempt < 5; ++attempt) {
    port_ = FreeLoopbackPort();
    cdn_port_ = FreeLoopbackPort();
    tls_port_ = tls ? FreeLoopbackPort() : 0;
    const std::string conf = dir_ + "/nginx.conf";
    std::ofstream c(conf);
    c << "daemon off;\nmaster_process off;\nworker_processes 1;\n"
      << "pid " << dir_ << "/nginx.pid;\n"
      << "error_log " << dir_ << "/error.log warn;\n"
      << "events { worker_connections 256; }\n"
      << "http {\n"
      << "  default_type application/octet-stream;\n"
      << "  log_format auth '$server_port $request_uri "
         "\"$http_authorization\"';\n"
      << "  access_log " << dir_ << "/access.log auth;\n"
      << "  client_body_temp_path " << dir_ << "/body;\n"
      << "  proxy_temp_path " << dir_ << "/proxy;\n"
      << "  fastcgi_temp_path " << dir_ << "/fastcgi;\n"
      << "  uwsgi_temp_path " << dir_ << "/uwsgi;\n"
      << "  scgi_temp_path " << dir_ << "/scgi;\n"
      << "  sendfile on;\n"
      << "  server {\n"
      << "    listen 127.0.0.1:" << port_ << ";\n"
      << "    root " << data_dir << ";\n"
      << "    location /private/ { return 403; }\n"
      << "    location ~ "
         "^/(?<org>[^/]+)/(?<repo>[^/]+)/resolve/(?<rev>[^/]+)/(?<rest>.*)$ {\n"
      << "      add_header X-Linked-Etag '\"linked-etag-1\"';\n"
      << "      if (-f " << dir_ << "/expired) {\n"
      << "        return 302 http://127.0.0.2:" << cdn_port_
      << "/b/$org/$repo/$rest;\n"
      << "      }\n"
      << "      return 302 http://127.0.0.2:" << cdn_port_
      << "/$org/$repo/$rest;\n"
      << "    }\n"
      << "  }\n"
      << "  server {\n"
      << "    listen 127.0.0.2:" << cdn_port_ << ";\n"
      << "    root " << data_dir << ";\n"
      << "    location /b/ { alias " << data_dir << "/; }\n"
      << "    location / {\n"
      << "      if (-f " << dir_ << "/expired) { return 403; }\n"
      << "    }\n"
      << "  }\n";
    if (tls) {
      c << "  server {\n"
        << "    listen 127.0.0.1:" << tls_port_ << " ssl;\n"
        << "    ssl_certificate " << TestCaFile("server.pem") << ";\n"
        << "    ssl_certificate_key " << TestCaFile("server.key") << ";\n"
        << "    root " << data_dir << ";\n"
        << "  }\n";
    }
    c << "}\n";
    c.close();
    process_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{NginxPath(), "-p", dir_, "-e",
                                 dir_ + "/error.log", "-c", conf},
        log);
    if (WaitForPort(port_) && WaitForPort(cdn_port_, "127.0.0.2") &&
        (!tls || WaitForPort(tls_port_))) {
      return;
    }
    process_.reset();  // a port taken meanwhile: try others
  }
  Die("nginx did not start", dir_ + "/error.log");
}

NginxServer::~NginxServer() = default;

std::string NginxServer::Url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

void NginxServer::ExpireRedirects() const {
  std::ofstream(dir_ + "/expired") << "1";
}

std::string NginxServer::AccessLog() const {
  return Slurp(dir_ + "/access.log");
}

S3rverServer::S3rverServer(const std::string& s3rver_js,
                           const std::string& bucket)
    : dir_(MakeTempDir()), bucket_(bucket) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    port_ = FreeLoopbackPort();
    // s3rver makes continuation tokens with DES, which OpenSSL 3 keeps in
    // its legacy provider.
    process_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{
            "/usr/bin/env", "node", "--openssl-legacy-provider", s3rver_js,
            "-d", dir_ + "/data", "-a", "127.0.0.1", "-p",
            std::to_string(port_), "--configure-bucket", bucket, "--silent"},
        dir_ + "/s3rver.log");
    if (WaitForPort(port_)) return;
    process_.reset();
  }
  Die("s3rver did not start", dir_ + "/s3rver.log");
}

void S3rverServer::Put(const std::string& key, const std::string& bytes) const {
  const std::string file = dir_ + "/upload";
  std::ofstream(file, std::ios::binary) << bytes;
  const CommandResult r =
      RunCommand({"/usr/bin/curl", "-s", "-f", "-o", "/dev/null", "--aws-sigv4",
                  "aws:amz:us-east-1:s3", "--user", "S3RVER:S3RVER", "-H",
                  "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-T", file,
                  "http://127.0.0.1:" + std::to_string(port_) + "/" + bucket_ +
                      "/" + key});
  if (r.exit_code != 0) {
    std::cerr << "PUT " << key << " failed: " << r.err << std::endl;
    std::abort();
  }
}

FaultProxy::FaultProxy(int upstream_port, const std::vector<std::string>& flags)
    : dir_(MakeTempDir()) {
  std::vector<std::string> argv = {
      "/usr/bin/python3",
      std::string(TENSORMORPH_SOURCE_DIR) + "/tests/support/fault_proxy.py",
      "--upstream", "127.0.0.1:" + std::to_string(upstream_port)};
  argv.insert(argv.end(), flags.begin(), flags.end());
  const std::string log = dir_ + "/proxy.log";
  process_ = std::make_unique<ChildProcess>(argv, log);
  // It prints "PORT n" once it listens.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string out = Slurp(log);
    const size_t at = out.find("PORT ");
    if (at != std::string::npos && out.find('\n', at) != std::string::npos) {
      port_ = std::atoi(out.c_str() + at + 5);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Die("fault_proxy.py did not start", log);
}

std::string FaultProxy::Url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

void FaultProxy::Inject(const std::string& query) const {
  const RawResponse r = RawGet(port_, "/__fault?" + query);
  if (r.status != 200) std::abort();
}

int FaultProxy::Requests() const {
  const RawResponse r = RawGet(port_, "/__stats");
  const size_t at = r.body.find("\"requests\": ");
  return at == std::string::npos ? -1 : std::atoi(r.body.c_str() + at + 12);
}

}  // namespace tensormorph::testing
