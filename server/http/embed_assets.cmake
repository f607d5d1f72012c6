# Writes OUTPUT: a C++ source defining kWebAssets (see web_assets.h) holding
# every file in FILES (absolute paths under BASE, separated by "|"), sorted by path.
# Run with: cmake -DOUTPUT=... -DBASE=... -DFILES="a|b" -P embed_assets.cmake
string(REPLACE "|" ";" FILES "${FILES}")
list(SORT FILES)
set(body "")
set(table "")
set(i 0)
foreach(f IN LISTS FILES)
  file(RELATIVE_PATH rel "${BASE}" "${f}")
  file(READ "${f}" hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  file(SIZE "${f}" size)
  # A trailing 0 keeps an empty file's array legal; size leaves it out.
  string(APPEND body "const unsigned char kAsset${i}[] = {${bytes}0};\n")
  string(APPEND table "    {\"/${rel}\", kAsset${i}, ${size}},\n")
  math(EXPR i "${i} + 1")
endforeach()
file(WRITE "${OUTPUT}.tmp"
"// Generated from client/web by server/http/embed_assets.cmake; do not edit.
#include \"server/http/web_assets.h\"

namespace tensormorph {
namespace {
${body}}  // namespace

extern const WebAsset kWebAssets[] = {
${table}    {nullptr, nullptr, 0}};
extern const size_t kWebAssetCount = ${i};

}  // namespace tensormorph
")
# Only a changed file is rewritten, so an unchanged page rebuilds nothing.
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
