# Writes OUTPUT: a C++ source defining `const char NAME[]` (NUL-terminated)
# and `const size_t NAME##Size` holding the bytes of INPUT, so a file of the
# web page is compiled into the CLI from its one source (as
# server/http/embed_assets.cmake compiles the page into the gateway).
# Run with: cmake -DOUTPUT=... -DINPUT=... -DNAME=... -P embed_text.cmake
file(READ "${INPUT}" hex HEX)
# Character literals, not integers: a UTF-8 byte above 0x7f written as an
# int would be a narrowing conversion to char.
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${hex}")
file(SIZE "${INPUT}" size)
file(WRITE "${OUTPUT}.tmp"
"// Generated from ${INPUT} by client/cli/embed_text.cmake; do not edit.
#include <cstddef>

namespace tensormorph {

extern const char ${NAME}[] = {${bytes}0};
extern const size_t ${NAME}Size = ${size};

}  // namespace tensormorph
")
# Only a changed file is rewritten, so an unchanged page rebuilds nothing.
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
