#include "server/process_stats.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace tensormorph {
namespace {

// A /proc file's text (its size reads as 0, so it is read to the end), or
// nothing when it cannot be opened. /proc files of interest here are small.
std::optional<std::string> ReadProcFile(const char* path) {
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) return std::nullopt;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  std::fclose(f);
  return text;
}

void ReadMemory(ProcessStats& out) {
  const long page = ::sysconf(_SC_PAGESIZE);
  auto statm = ReadProcFile("/proc/self/statm");
  if (page <= 0 || !statm.has_value()) return;
  // "size resident shared text lib data dt", in pages.
  std::vector<absl::string_view> fields =
      absl::StrSplit(*statm, ' ', absl::SkipWhitespace());
  uint64_t size = 0, resident = 0;
  if (fields.size() < 2 || !absl::SimpleAtoi(fields[0], &size) ||
      !absl::SimpleAtoi(fields[1], &resident)) {
    return;
  }
  out.virtual_bytes = size * static_cast<uint64_t>(page);
  out.resident_bytes = resident * static_cast<uint64_t>(page);
}

void ReadStartTime(ProcessStats& out) {
  const long ticks = ::sysconf(_SC_CLK_TCK);
  auto stat = ReadProcFile("/proc/self/stat");
  auto system = ReadProcFile("/proc/stat");
  if (ticks <= 0 || !stat.has_value() || !system.has_value()) return;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
  // the fields are counted from the last ')'. starttime is field 22, the
  // 20th after comm.
  const size_t paren = stat->rfind(')');
  if (paren == std::string::npos) return;
  std::vector<absl::string_view> fields = absl::StrSplit(
      absl::string_view(*stat).substr(paren + 1), ' ', absl::SkipWhitespace());
  uint64_t start_ticks = 0;
  if (fields.size() < 20 || !absl::SimpleAtoi(fields[19], &start_ticks)) {
    return;
  }
  for (absl::string_view line : absl::StrSplit(*system, '\n')) {
    uint64_t boot = 0;
    if (absl::ConsumePrefix(&line, "btime ") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &boot)) {
      out.start_time_seconds =
          static_cast<double>(boot) +
          static_cast<double>(start_ticks) / static_cast<double>(ticks);
      return;
    }
  }
}

void ReadCpu(ProcessStats& out) {
  struct rusage usage;
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return;
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  out.cpu_seconds = seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

void ReadDescriptors(ProcessStats& out) {
  struct rlimit limit;
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 &&
      limit.rlim_cur != RLIM_INFINITY) {
    out.max_fds = static_cast<int64_t>(limit.rlim_cur);
  }
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return;
  int64_t n = 0;
  const int own = ::dirfd(dir);  // open only to list the others
  while (const dirent* e = ::readdir(dir)) {
    int fd = 0;
    if (absl::SimpleAtoi(e->d_name, &fd) && fd != own) ++n;
  }
  ::closedir(dir);
  out.open_fds = n;
}

}  // namespace

ProcessStats ReadProcessStats() {
  ProcessStats out;
  ReadMemory(out);
  ReadStartTime(out);
  ReadCpu(out);
  ReadDescriptors(out);
  return out;
}

}  // namespace tensormorph
