// Real servers for the storage tests (tests/core/io), each started on free
// loopback ports in its own temporary directory and stopped with the
// object: Debian's nginx, npm's s3rver, and the tests' own fault proxy
// (fault_proxy.py).
#ifndef TENSORMORPH_TESTS_SUPPORT_STORAGE_SERVERS_H_
#define TENSORMORPH_TESTS_SUPPORT_STORAGE_SERVERS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace tensormorph::testing {

// A child process with stdout and stderr in `log`; SIGTERM and waited for
// when destroyed.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::string& log);
  ~ChildProcess();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// A port that was free a moment ago on 127.0.0.1.
int FreeLoopbackPort();
// Connects until `port` accepts on `host` (5 s at most). False on timeout.
bool WaitForPort(int port, const std::string& host = "127.0.0.1");

// Where a server binary is, or "" when absent (the test then skips).
std::string NginxPath();
std::string S3rverPath();  // $TENSORMORPH_S3RVER, else the build dir's

// nginx serving `data_dir` on 127.0.0.1:port() with byte ranges and ETags,
// plus a Hub-like /{org}/{repo}/resolve/{rev}/{path} that answers 302 to
// a second server on 127.0.0.2:cdn_port() serving `data_dir`/{org}/{repo}/
// {path} (the 302 carries X-Linked-Etag: "linked-etag-1", as the Hub's
// name a file's content), and /private/ (403). With `tls`, also HTTPS on
// 127.0.0.1:tls_port() with TestCaFile's server certificate. The servers
// log "PORT URI AUTHORIZATION" per request to AccessLog().
class NginxServer {
 public:
  // Aborts (with nginx's error log) when it does not start.
  explicit NginxServer(const std::string& data_dir, bool tls = false);
  ~NginxServer();
  int port() const { return port_; }
  int cdn_port() const { return cdn_port_; }
  int tls_port() const { return tls_port_; }
  std::string Url(const std::string& path) const;  // path starts with '/'
  std::string AccessLog() const;
  // As a CDN's signed URLs expire: from now on the resolve location
  // redirects to /b/{org}/{repo}/{path} (served alike) and the first
  // location answers 403.
  void ExpireRedirects() const;

 private:
  std::string dir_;
  int port_ = 0;
  int cdn_port_ = 0;
  int tls_port_ = 0;
  std::unique_ptr<ChildProcess> process_;
};

// s3rver with bucket `bucket` on 127.0.0.1:port(), its objects in a
// temporary directory.
class S3rverServer {
 public:
  S3rverServer(const std::string& s3rver_js, const std::string& bucket);
  int port() const { return port_; }
  // Uploads `bytes` as `key` (curl --aws-sigv4 with s3rver's own key).
  void Put(const std::string& key, const std::string& bytes) const;

 private:
  std::string dir_;
  std::string bucket_;
  int port_ = 0;
  std::unique_ptr<ChildProcess> process_;
};

// fault_proxy.py in front of 127.0.0.1:`upstream_port`, with its extra
// flags (--sigv4-*, --if-match).
class FaultProxy {
 public:
  FaultProxy(int upstream_port, const std::vector<std::string>& flags = {});
  int port() const { return port_; }
  std::string Url(const std::string& path) const;
  // GET /__fault?`query`.
  void Inject(const std::string& query) const;
  // Requests proxied so far (control requests excluded).
  int Requests() const;

 private:
  std::string dir_;
  int port_ = 0;
  std::unique_ptr<ChildProcess> process_;
};

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_STORAGE_SERVERS_H_
