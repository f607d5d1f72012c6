// Runs the project's real binaries from tests: a tensormorphd on a free
// loopback port, and CLI commands with their output and exit code.
#ifndef TENSORMORPH_TESTS_SUPPORT_PROCESS_H_
#define TENSORMORPH_TESTS_SUPPORT_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tensormorph::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
  // The command's peak resident memory (getrusage's ru_maxrss), in KiB.
  int64_t max_rss_kb = 0;
};

// Runs `argv` (argv[0] a path) to completion with extra environment entries
// ("NAME=value"); stdin is /dev/null.
CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::string>& env = {});

// A tensormorphd child process; killed (SIGTERM, then waited for) when the
// object goes away.
class ServerProcess {
 public:
  // Starts tensormorphd with --listen 127.0.0.1:0 and the given roots and
  // extra flags (--log-level warn unless they name one); returns once it
  // printed its port. Its stderr is `stderr_fd` (the test's own by default).
  // Aborts on failure.
  ServerProcess(const std::vector<std::string>& roots,
                const std::vector<std::string>& extra_flags = {},
                int stderr_fd = 2);
  ~ServerProcess();

  int port() const { return port_; }
  // The HTTP port, when extra_flags hold --http-listen; else 0.
  int http_port() const { return http_port_; }
  pid_t pid() const { return pid_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Sends SIGTERM and returns the exit status.
  int Stop();
  // Waits for the server to exit by itself (after a signal sent with
  // kill(pid(), ...)) and returns its exit status.
  int WaitForExit();

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int http_port_ = 0;
};

// The built CLI run against one shared tensormorphd (remote) or embedded, so
// that a test can run the same commands both ways.
class CliModes {
 public:
  explicit CliModes(const std::vector<std::string>& roots) : server_(roots) {}
  // Runs `tensormorph [--server ADDRESS] args...`.
  CommandResult Run(bool remote, std::vector<std::string> args) const;
  const ServerProcess& server() const { return server_; }

 private:
  ServerProcess server_;
};

// A "kB" field of /proc/PID/status ("RssAnon", "VmRSS"); -1 if absent.
int64_t ProcStatusKb(pid_t pid, const std::string& field);

// Paths of the built binaries (set by CMake).
std::string TensormorphdPath();
std::string CliPath();

}  // namespace tensormorph::testing

#endif  // TENSORMORPH_TESTS_SUPPORT_PROCESS_H_
