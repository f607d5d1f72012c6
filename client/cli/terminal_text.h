// What the CLI prints is text a terminal shows, and some of it comes from
// files (tensor names, metadata, config values) that anyone may have
// written: a name holding ESC [2J cleared the screen, ESC ]0; set the
// window's title, and a carriage return could overwrite a line of `check`'s
// findings. So every byte the CLI writes to stdout and stderr passes through
// one filter that writes control characters as visible escapes, whatever
// command printed them; the few writes of the CLI's own terminal controls
// (heatmap --term's colours, check's progress bar) go around it.
//
// Escaped, as \xHH per byte: C0 controls other than line feed and tab
// (ESC, CR, BEL, backspace...), DEL, and the C1 controls U+0080..U+009F
// (written in UTF-8 as C2 80..C2 9F, which some terminals obey as ESC
// sequences). Everything else, including all other UTF-8 and the bytes
// that are not UTF-8 (names escape those as \xHH before they reach the
// CLI), passes unchanged.
#ifndef TENSORMORPH_CLIENT_CLI_TERMINAL_TEXT_H_
#define TENSORMORPH_CLIENT_CLI_TERMINAL_TEXT_H_

#include <ostream>
#include <string>

#include "absl/strings/string_view.h"

namespace tensormorph {

// `text` as the filter writes it.
std::string EscapeTerminalControls(absl::string_view text);

// Puts the filter in front of `stream`, std::cout or std::cerr (any other
// is left as it is), for the rest of the process; once. main filters
// std::cerr first thing, and std::cout once it knows the output is text:
// --json output holds no raw control (JSON escapes them), and scanning
// its tens of megabytes cost `--json scalar` a fifth of its time.
void FilterTerminalControls(std::ostream& stream);

// The stream behind std::cout (std::cerr) before the filter: for the CLI's
// own controls only, never for text that holds anything from a file. The
// same stream (std::cout) once the filter is off or was never put there.
std::ostream& UnfilteredStdout();
std::ostream& UnfilteredStderr();

// The columns of the terminal stdout writes to, or else $COLUMNS (a
// positive number); 0 when neither says. What a drawing one character a
// cell fits itself to: wider, each line wraps and the map reads as noise.
int TerminalColumns();

}  // namespace tensormorph

#endif  // TENSORMORPH_CLIENT_CLI_TERMINAL_TEXT_H_
