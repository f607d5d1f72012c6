#include "tests/support/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

extern char** environ;

namespace tensormorph::testing {
namespace {

std::string ReadAll(int fd) {
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  return out;
}

std::vector<char*> CStrings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (std::string& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

pid_t Spawn(std::vector<std::string> argv, std::vector<std::string> env,
            int out_fd, int err_fd) {
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  auto args = CStrings(argv);
  auto envp = CStrings(env);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("fork");
    std::abort();
  }
  if (pid == 0) {
    // Only async-signal-safe calls until exec. A test that dies must not
    // leave its server behind.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    const int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

}  // namespace

std::string TensormorphdPath() { return TENSORMORPH_TENSORMORPHD_PATH; }
std::string CliPath() { return TENSORMORPH_CLI_PATH; }

CommandResult RunCommand(const std::vector<std::string>& argv,
                         const std::vector<std::string>& env) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    std::abort();
  }
  const pid_t pid = Spawn(argv, env, out_pipe[1], err_pipe[1]);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  CommandResult r;
  std::thread err_reader([&] { r.err = ReadAll(err_pipe[0]); });
  r.out = ReadAll(out_pipe[0]);
  err_reader.join();
  ::close(out_pipe[0]);
  ::close(err_pipe[0]);
  int status = 0;
  struct rusage usage {};
  ::wait4(pid, &status, 0, &usage);
  r.max_rss_kb = usage.ru_maxrss;
  r.exit_code =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

ServerProcess::ServerProcess(const std::vector<std::string>& roots,
                             const std::vector<std::string>& extra_flags,
                             int stderr_fd) {
  std::vector<std::string> argv = {TensormorphdPath()};
  if (std::find(extra_flags.begin(), extra_flags.end(), "--listen") ==
      extra_flags.end()) {
    argv.insert(argv.end(), {"--listen", "127.0.0.1:0"});
  }
  if (std::find(extra_flags.begin(), extra_flags.end(), "--log-level") ==
      extra_flags.end()) {
    argv.insert(argv.end(), {"--log-level", "warn"});
  }
  for (const std::string& r : roots) argv.insert(argv.end(), {"--root", r});
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  int out_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) std::abort();
  pid_ = Spawn(argv, {}, out_pipe[1], stderr_fd);
  ::close(out_pipe[1]);
  const auto read_line = [fd = out_pipe[0]] {
    std::string line;
    char c;
    while (::read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
    return line;
  };
  // The first line is "tensormorphd listening on HOST:PORT".
  const std::string line = read_line();
  const size_t colon = line.rfind(':');
  if (line.rfind("tensormorphd listening on ", 0) != 0 ||
      colon == std::string::npos) {
    std::fprintf(stderr, "tensormorphd did not start: '%s'\n", line.c_str());
    std::abort();
  }
  port_ = std::atoi(line.c_str() + colon + 1);
  // With --http-listen, the next is "tensormorphd http on http://HOST:PORT/".
  if (std::find(extra_flags.begin(), extra_flags.end(), "--http-listen") !=
      extra_flags.end()) {
    const std::string http = read_line();
    const size_t http_colon = http.rfind(':');
    if (http.rfind("tensormorphd http on ", 0) != 0 ||
        http_colon == std::string::npos) {
      std::fprintf(stderr, "tensormorphd's HTTP port did not start: '%s'\n",
                   http.c_str());
      std::abort();
    }
    http_port_ = std::atoi(http.c_str() + http_colon + 1);
  }
  ::close(out_pipe[0]);
}

int ServerProcess::Stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int ServerProcess::WaitForExit() {
  if (pid_ <= 0) return -1;
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

ServerProcess::~ServerProcess() { Stop(); }

CommandResult CliModes::Run(bool remote, std::vector<std::string> args) const {
  std::vector<std::string> argv = {CliPath()};
  if (remote) argv.insert(argv.end(), {"--server", server_.address()});
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv);
}

int64_t ProcStatusKb(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  const std::string key = field + ":";
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0) return std::atoll(line.c_str() + key.size());
  }
  return -1;
}

}  // namespace tensormorph::testing
