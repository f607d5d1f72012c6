#!/usr/bin/env bash
# Quick start: installs what is missing (apt), builds Tensormorph, writes a
# small demo model, starts tensormorphd on a free loopback port with the web
# inspector on, tours it with the CLI, and prints the inspector's URL; run
# from a terminal it keeps serving until Enter, else it stops the server.
#   deploy/quickstart.sh            build in build/, demo in build/demo
#   TENSORMORPH_HTTP=0.0.0.0:8080 deploy/quickstart.sh
#                                   the inspector on a fixed port, reachable
#                                   from other machines
set -euo pipefail
cd "$(dirname "$0")/.."

deploy/install_deps.sh
echo "==> building (Release, build/)"
# The configuration tests/run.sh and the image build with (deploy/build.sh),
# so switching between them rebuilds nothing.
deploy/build.sh --target tensormorph --target tensormorphd --target tensormorph-make-demo >/dev/null

demo=build/demo
rm -rf "$demo"
build/deploy/demo/tensormorph-make-demo "$demo"

log=$(mktemp)
build/server/tensormorphd --root "$demo" --listen 127.0.0.1:0 \
  --http-listen "${TENSORMORPH_HTTP:-127.0.0.1:0}" >"$log" 2>&1 &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 100); do
  grep -q "http on" "$log" && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
address=$(sed -n 's/^tensormorphd listening on //p' "$log")
url=$(sed -n 's/^tensormorphd http on //p' "$log")
echo "==> tensormorphd serving $demo on $address (gRPC) and $url (HTTP)"

tm() {
  echo
  printf '$ tensormorph --server %s' "$address"; printf ' %q' "$@"; echo
  build/client/cli/tensormorph --server "$address" "$@"
}
tm ls model-q8_0.gguf --filter 'blk.0.*'
tm info model-q8_0.gguf blk.0.ffn_down.weight
tm scalar model-q8_0.gguf blk.0.ffn_down.weight 3,17
tm read model-q8_0.gguf blk.0.attn_q.weight --slice '0:2, ::8'
tm ls int8 --filter '*layers.0.mlp*'
tm arch model-q4_k_m.gguf
tm diff model-q4_k_m.gguf source --filter 'blk.0.*' --top 3
tm stats model-q4_k_m.gguf blk.0.attn_q.weight --bins 8

echo
echo "==> the web inspector answers:"
curl -sS -o /dev/null -w "    GET  ${url} -> %{http_code} (%{size_download} bytes)\n" "$url"
curl -sS -o /dev/null -w "    POST ${url}v1/GetServerInfo -> %{http_code}\n" \
  -H 'Content-Type: application/json' -d '{}' "${url}v1/GetServerInfo"

echo
echo "==> done. Try it on your own files without a server:"
echo "    build/client/cli/tensormorph ls path/to/model.gguf"
echo
echo "==> Open the inspector on the demo: ${url}?checkpoint=model-q4_k_m.gguf"
if [ -t 0 ] && [ -t 1 ]; then
  read -r -p "    (serving; press Enter to stop) " _ || true
else
  echo "    (not a terminal, so the server stops now; run this in a terminal, or"
  echo "     build/server/tensormorphd --root $demo --listen 127.0.0.1:7431 --http-listen 127.0.0.1:8080)"
fi
