#!/bin/sh
# Every module of the web page parses (node's own JavaScript parser): a
# syntax error otherwise shows up only as a browser test timing out.
# Usage: check_js_syntax.sh CLIENT_WEB_DIR
set -eu
dir=${1:?usage: check_js_syntax.sh CLIENT_WEB_DIR}
bad=0
for f in $(find "$dir" -name '*.js' | sort); do
  if ! node --experimental-default-type=module --check "$f"; then
    echo "FAIL: $f does not parse" >&2
    bad=1
  fi
done
exit $bad
