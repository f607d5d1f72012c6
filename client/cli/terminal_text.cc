#include "client/cli/terminal_text.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <streambuf>

#include "absl/strings/numbers.h"

namespace tensormorph {
namespace {

constexpr bool IsC0OrDel(unsigned char b) {
  return (b < 0x20 && b != '\n' && b != '\t') || b == 0x7f;
}

// The bytes the filter looks at twice: controls, and C2 (a C1 control's
// lead byte). A table, so that the scan past the rest is a load and a
// test a byte: text output runs to tens of megabytes (scalar of 100,000
// indices).
constexpr std::array<bool, 256> AttentionTable() {
  std::array<bool, 256> t{};
  for (int b = 0; b < 256; ++b) {
    t[b] = IsC0OrDel(static_cast<unsigned char>(b)) || b == 0xc2;
  }
  return t;
}
constexpr std::array<bool, 256> kAttention = AttentionTable();

void AppendHex(unsigned char b, std::string* out) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const char escape[4] = {'\\', 'x', kHex[b >> 4], kHex[b & 15]};
  out->append(escape, 4);
}

// Escapes what passes through it on its way to `out`, holding nothing but
// a lead byte C2 whose next byte decides whether the pair is a C1 control.
// Nothing buffered otherwise: writes around it (Unfiltered*) stay in order
// once it is flushed.
class EscapingBuf : public std::streambuf {
 public:
  explicit EscapingBuf(std::streambuf* out) : out_(out) {}
  std::streambuf* out() const { return out_; }

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) {
      return sync() == 0 ? traits_type::not_eof(c) : traits_type::eof();
    }
    const char ch = traits_type::to_char_type(c);
    return Put(&ch, 1) ? c : traits_type::eof();
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    return Put(s, n) ? n : 0;
  }
  int sync() override {
    if (pending_lead_) {
      pending_lead_ = false;
      if (out_->sputc('\xC2') == traits_type::eof()) return -1;
    }
    return out_->pubsync();
  }

 private:
  bool Write(const char* s, std::streamsize n) {
    return n == 0 || out_->sputn(s, n) == n;
  }
  bool Put(const char* s, std::streamsize n) {
    std::string escaped;
    std::streamsize run = 0;  // start of the bytes passed on unchanged
    for (std::streamsize i = 0; i < n; ++i) {
      if (!pending_lead_) {
        while (i < n && !kAttention[static_cast<unsigned char>(s[i])]) ++i;
        if (i == n) break;
      }
      const auto b = static_cast<unsigned char>(s[i]);
      if (pending_lead_) {
        pending_lead_ = false;
        escaped.clear();
        if (b >= 0x80 && b <= 0x9f) {
          AppendHex(0xc2, &escaped);
          AppendHex(b, &escaped);
          if (!Write(escaped.data(), 4 + 4)) return false;
          run = i + 1;
          continue;
        }
        if (!Write("\xC2", 1)) return false;
      }
      if (b == 0xc2) {
        if (!Write(s + run, i - run)) return false;
        pending_lead_ = true;
        run = i + 1;
      } else if (IsC0OrDel(b)) {
        if (!Write(s + run, i - run)) return false;
        escaped.clear();
        AppendHex(b, &escaped);
        if (!Write(escaped.data(), 4)) return false;
        run = i + 1;
      }
    }
    return Write(s + run, n - run);
  }

  std::streambuf* out_;
  bool pending_lead_ = false;
};

EscapingBuf* g_stdout_filter = nullptr;
EscapingBuf* g_stderr_filter = nullptr;

}  // namespace

std::string EscapeTerminalControls(absl::string_view text) {
  // Through the filter itself, so that the two never disagree.
  std::ostringstream out;
  EscapingBuf filter(out.rdbuf());
  filter.sputn(text.data(), static_cast<std::streamsize>(text.size()));
  filter.pubsync();  // a last lone C2 byte
  return out.str();
}

void FilterTerminalControls(std::ostream& stream) {
  EscapingBuf** filter = &stream == &std::cout   ? &g_stdout_filter
                         : &stream == &std::cerr ? &g_stderr_filter
                                                 : nullptr;
  if (filter == nullptr || *filter != nullptr) return;
  // Never freed: the stream writes through it until the process ends.
  *filter = new EscapingBuf(stream.rdbuf());
  stream.rdbuf(*filter);
}

std::ostream& UnfilteredStdout() {
  if (g_stdout_filter == nullptr) return std::cout;
  static std::ostream* raw = new std::ostream(g_stdout_filter->out());
  std::cout.flush();
  return *raw;
}

std::ostream& UnfilteredStderr() {
  if (g_stderr_filter == nullptr) return std::cerr;
  static std::ostream* raw = new std::ostream(g_stderr_filter->out());
  std::cerr.flush();
  return *raw;
}

int TerminalColumns() {
  struct winsize ws = {};
  if (::isatty(STDOUT_FILENO) && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 &&
      ws.ws_col > 0) {
    return ws.ws_col;
  }
  int columns = 0;
  if (const char* env = std::getenv("COLUMNS");
      env != nullptr && absl::SimpleAtoi(env, &columns) && columns > 0) {
    return columns;
  }
  return 0;
}

}  // namespace tensormorph
