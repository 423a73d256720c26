#!/usr/bin/env bash
# The README's first command: install dependencies, build, then run the main job on the
# default local cluster (configs/local.yaml: a head and one node with 2 CPU device slots)
# with the shipped model. Safe to re-run: installs are idempotent, builds incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"

bin=$PWD/build/tools/dilaserve
export DILASERVE_STATE_DIR=${DILASERVE_STATE_DIR:-$PWD/build/quickstart-state}
"$bin" down >/dev/null 2>&1 || true   # a cluster left over from an interrupted run
trap '"$bin" down >/dev/null 2>&1 || true' EXIT

echo
echo "== Starting the local cluster =="
"$bin" up configs/local.yaml
"$bin" status

echo
echo "== One prompt, streamed block by block =="
"$bin" submit --prompt "Cdiffusion.....=" --stream

echo
echo "== 62 held-out problems (every 13th of the shipped model's eval set, all four tasks), checked against their answers =="
sed -n '1~13p' models/tiny-llada/eval.jsonl > "$DILASERVE_STATE_DIR/quickstart-prompts.jsonl"
"$bin" submit --file "$DILASERVE_STATE_DIR/quickstart-prompts.jsonl"

echo
echo "== The same cluster through its OpenAI-compatible HTTP API (docs/http.md) =="
http_port=$(sed -n 's/.*"http_port": *\([0-9]*\).*/\1/p' "$DILASERVE_STATE_DIR/cluster.json")
key=$(grep -v '^#' configs/local-api-keys | head -1)
curl -sS --fail-with-body --max-time 60 "http://127.0.0.1:$http_port/v1/completions" \
     -H "Authorization: Bearer $key" -H "Content-Type: application/json" \
     -d '{"model": "tiny-llada", "prompt": "Cdiffusion.....=", "gen_length": 48}'
echo

echo
"$bin" actors --kind tp_group
"$bin" down
trap - EXIT
