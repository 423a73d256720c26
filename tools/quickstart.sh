#!/usr/bin/env bash
# The README's first command: install dependencies, build, then run the main job with the
# shipped model. Safe to re-run (installs are idempotent, builds incremental).
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"

bin=build/tools/dilaserve
model=models/tiny-llada
echo
echo "== The shipped model answers three prompts (tau 0.9, dual cache) =="
for p in "Cdiffusion.....=" "A8341.+962.....=" "Pstop..|spot...="; do
  printf '%-18s -> ' "$p"
  "$bin" generate --model "$model" --prompt "$p" --gen-length 16
done
echo
echo "== Accuracy on 60 held-out problems =="
"$bin" eval --model "$model" --n 60
