# Sourced, not run: makes an unpacked tools/gpu_bundle.sh bundle runnable on this machine.
#   source tools/gpu_bundle_env.sh BUNDLE-DIR
# - The bundle's CTest files and test programs name the checkout it was built in (absolute
#   paths compiled in), so that path is made to lead to this checkout where it does not exist.
# - Its libraries come first on the library path and its UCX modules are UCX's; its programs
#   (ucx_perftest) come first on PATH.
# - CUDA's own libraries (cuBLAS, NCCL) come from this machine: the toolkit's folders, else the
#   CUDA wheels of its Python, wherever the dynamic loader does not find them already.
# Returns non-zero, with one line on stderr, when something cannot be set up.
gpu_bundle_env() {
  local bundle root built_in lib dir
  bundle=$(cd "${1:?usage: source tools/gpu_bundle_env.sh BUNDLE-DIR}" && pwd) || return 1
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  built_in=$(cat "$bundle/bundle_root" 2>/dev/null) || {
    echo "gpu_bundle_env: $bundle/bundle_root is missing: is $bundle a tools/gpu_bundle.sh bundle?" >&2; return 1; }
  if [ "$(cd "$built_in" 2>/dev/null && pwd -P)" != "$(cd "$root" && pwd -P)" ]; then
    if [ -e "$built_in" ]; then
      echo "gpu_bundle_env: the bundle was built in $built_in, which exists here and is not this checkout" >&2; return 1
    fi
    mkdir -p "$(dirname "$built_in")" && ln -s "$root" "$built_in" || return 1
    echo "gpu_bundle_env: linked $built_in to this checkout (the bundle's paths)"
  fi
  export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  [ -d "$bundle/lib/ucx" ] && export UCX_MODULE_DIR="$bundle/lib/ucx"
  [ -d "$bundle/bin" ] && export PATH="$bundle/bin:$PATH"
  while read -r lib; do
    dir=$(find /usr/local/cuda/ /usr/lib/x86_64-linux-gnu/ /usr/local/lib /opt -name "$lib" -print -quit 2>/dev/null |
          xargs -r dirname)
    [ -n "$dir" ] || { echo "gpu_bundle_env: $lib is missing on this machine" >&2; return 1; }
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$dir"
    echo "gpu_bundle_env: $lib from $dir"
  done < <(find "$bundle" -type f -perm -u+x ! -name '*.so*' -exec ldd {} + 2>/dev/null | awk '/not found/ {print $1}' | sort -u)
  return 0
}
gpu_bundle_env "$@"
