#!/usr/bin/env python3
"""Train the shipped tiny LLaDA-architecture masked-diffusion model on the CPU.

Writes models/tiny-llada/{config.json, tokenizer.json, model.safetensors, eval.jsonl}
and the parity goldens tests/golden/tiny_llada_goldens.json that the C++ engine must match.

Usage:
  tools/train_tiny_llada.py [--minutes 40] [--out models/tiny-llada] [--seed 1]
  tools/train_tiny_llada.py --goldens-only      # regenerate goldens from the saved model

The first run installs Debian's python3-torch through tools/install-deps.sh --with-training.
Why these tasks: ../shared/notes/tiny_model_feasibility.md. Every answer token's source sits at
a fixed offset in fixed-width, '.'-padded prompt fields (learnable on one CPU core in minutes);
every prompt is 16 characters, so the first field sits 15 positions before the answer in every
task and one copy mechanism serves them all. The `pick` task has two valid answers that differ
at every position, so committing many tokens at once at a low threshold mixes them ("stst" for
ssss or tttt): that is where tau costs quality, as it does for real LLMs. Training budgets are wall
clock; --resume continues from a saved model.
"""
import argparse
import json
import math
import os
import random
import struct
import subprocess
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # Debian's package lives outside pyenv/venv site-packages
    sys.path.append("/usr/lib/python3/dist-packages")
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("train_tiny_llada: installing python3-torch via tools/install-deps.sh --with-training",
              file=sys.stderr)
        subprocess.check_call(["bash", os.path.join(REPO, "tools", "install-deps.sh"), "--with-training"])
        import torch
        import torch.nn.functional as F

# ---------------------------------------------------------------- vocabulary

EOS, MASK = 0, 1
CHARS = list("0123456789abcdefghijklmnopqrstuvwxyz") + list("+=.|CAP")
# Characters added after the first release go after <unk>, so earlier token ids stay stable and a
# saved model can be resumed with its embedding and head grown by the new rows.
VOCAB = ["<eos>", "<mask>"] + CHARS + ["<unk>"] + ["O"]
STOI = {c: i for i, c in enumerate(VOCAB)}
UNK = STOI["<unk>"]
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def encode(s):
    return [STOI.get(c, UNK) for c in s]


def decode_ids(ids):
    out = []
    for i in ids:
        if i == EOS:
            break
        out.append(VOCAB[i] if i > 1 else "?")
    return "".join(out)

# ---------------------------------------------------------------- tasks
# Each generator returns (prompt, valid_answers, gen_length). Fields are fixed width so that
# answer position j always reads prompt position j + constant.


PROMPT_LEN = 16  # every prompt: task letter, a 14-character body, '='


def pad(s, w):
    return s + "." * (w - len(s))


def framed(letter, body):
    assert len(body) <= PROMPT_LEN - 2
    return letter + pad(body, PROMPT_LEN - 2) + "="


def gen_length(long):
    return 48 if long else 16  # canvases of 32 and 64 tokens


def task_caesar(rng, long):
    n = rng.randint(2, 12)
    word = "".join(rng.choice(LETTERS) for _ in range(n))
    ans = "".join(LETTERS[(LETTERS.index(c) + 1) % 26] for c in word)
    return framed("C", word), [ans], gen_length(long)


def task_addr(rng, long):
    # Least-significant digit first, 1-3 digit operands in 5-wide fields.
    a = rng.randint(0, 10 ** rng.randint(1, 3) - 1)
    b = rng.randint(0, 10 ** rng.randint(1, 3) - 1)
    rev = lambda v: str(v)[::-1]
    return framed("A", pad(rev(a), 5) + "+" + pad(rev(b), 5)), [rev(a + b)], gen_length(long)


def task_pick(rng, long):
    # Two options, each one letter repeated n times; the prompt lists the two candidate
    # letters of every position in two fields, in a random order per position ("xlxx|lxll").
    # Either "xxxx" or "llll" is right; "xlxx" is not. The model's lean at each position
    # depends on that position's listing, so committing many tokens at once at a low
    # threshold mixes the options, while one token per step lets every later token follow
    # the first (where tau costs quality, as for real LLMs).
    n = rng.randint(3, 6)
    x, y = rng.sample(LETTERS, 2)
    f1, f2 = "", ""
    for _ in range(n):
        a, b = (x, y) if rng.random() < 0.5 else (y, x)
        f1, f2 = f1 + a, f2 + b
    return framed("P", pad(f1, 6) + "|" + pad(f2, 6)), [x * n, y * n], gen_length(long)


def task_mark(rng, long):
    # Copy an n-letter word, replacing exactly one letter (any one) by '+': n valid answers
    # ("kit" -> "+it", "k+t", "ki+"). With every answer token masked, a calibrated model gives each
    # position its letter with probability (n-1)/n and '+' with 1/n, so committing every token whose
    # confidence is at least (n-1)/n copies the word unmarked, which is never right; committing one
    # token at a time lets the model place the '+' once and only once. Accuracy therefore falls as
    # tau drops below (n-1)/n for any model that has learned the task: the way parallel decoding
    # breaks tokens that depend on each other, independent of the model's tie-breaking.
    n = rng.randint(3, 6)
    word = "".join(rng.choice(LETTERS) for _ in range(n))
    return framed("O", pad(word, 6) + "|+"), [word[:i] + "+" + word[i + 1:] for i in range(n)], gen_length(long)


TASKS = {"caesar": task_caesar, "addr": task_addr, "pick": task_pick, "mark": task_mark}
TRAIN_MIX = [("caesar", 0.10), ("addr", 0.30), ("pick", 0.20), ("mark", 0.40)]
LONG_FRACTION = 0.3


def sample_problem(rng, task=None, long=None):
    if task is None:
        r, acc = rng.random(), 0.0
        for name, w in TRAIN_MIX:
            acc += w
            if r < acc:
                task = name
                break
        else:
            task = TRAIN_MIX[-1][0]
    if long is None:
        long = rng.random() < LONG_FRACTION
    prompt, valid, gen = TASKS[task](rng, long)
    return task, prompt, valid, gen

# ---------------------------------------------------------------- model


class TinyLLaDA(torch.nn.Module):
    """LLaDA layout: pre-RMSNorm blocks, bidirectional attention, RoPE (rotate-half), SwiGLU,
    untied head. Parameter names follow LLaDA's checkpoint names after the model.transformer prefix."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d, ff, V = cfg["d_model"], cfg["mlp_hidden_size"], cfg["embedding_size"]
        self.wte = torch.nn.Parameter(torch.randn(V, d) * 0.02)
        self.blocks = torch.nn.ModuleList()
        for _ in range(cfg["n_layers"]):
            b = torch.nn.Module()
            b.attn_norm = torch.nn.Parameter(torch.ones(d))
            b.ff_norm = torch.nn.Parameter(torch.ones(d))
            b.q_proj = torch.nn.Linear(d, d, bias=False)
            b.k_proj = torch.nn.Linear(d, d, bias=False)
            b.v_proj = torch.nn.Linear(d, d, bias=False)
            b.attn_out = torch.nn.Linear(d, d, bias=False)
            b.ff_proj = torch.nn.Linear(d, ff, bias=False)
            b.up_proj = torch.nn.Linear(d, ff, bias=False)
            b.ff_out = torch.nn.Linear(ff, d, bias=False)
            for lin in (b.q_proj, b.k_proj, b.v_proj, b.ff_proj, b.up_proj):
                torch.nn.init.normal_(lin.weight, std=0.02)
            for lin in (b.attn_out, b.ff_out):
                torch.nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * cfg["n_layers"]))
            self.blocks.append(b)
        self.ln_f = torch.nn.Parameter(torch.ones(d))
        self.head = torch.nn.Linear(d, V, bias=False)
        torch.nn.init.normal_(self.head.weight, std=0.02)

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg["rms_norm_eps"]) * w

    def rope(self, x, pos):
        # x: (..., T, H, hd); non-interleaved half split as LLaDA.
        hd = x.shape[-1]
        inv = 1.0 / (self.cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        f = pos.float()[:, None] * inv[None, :]
        emb = torch.cat([f, f], dim=-1)
        cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        rot = torch.cat([-x2, x1], dim=-1)
        return x * cos + rot * sin

    def forward(self, ids, q0=0, q1=None, kv=None, keep_kv=None):
        """Batched forward. ids: (B, L) -> logits (B, q1 - q0, V) for query rows [q0, q1).
        With kv (per layer post-RoPE K, V of shape (B, L, H, hd), e.g. from a dual-cache refresh
        of an older canvas), keys outside [q0, q1) come from kv: the dual-cache reuse step.
        keep_kv, a list, receives this pass's per-layer K, V (for a refresh)."""
        B, L = ids.shape
        q1 = L if q1 is None else q1
        H = self.cfg["n_heads"]
        d = self.cfg["d_model"]
        hd = d // H
        T = q1 - q0
        pos = torch.arange(q0, q1)
        x = self.wte[ids[:, q0:q1]]
        for li, b in enumerate(self.blocks):
            h = self.rms(x, b.attn_norm)
            q = self.rope(b.q_proj(h).view(B, T, H, hd), pos)
            k = self.rope(b.k_proj(h).view(B, T, H, hd), pos)
            v = b.v_proj(h).view(B, T, H, hd)
            if keep_kv is not None:
                keep_kv.append((k.detach(), v.detach()))
            if kv is not None:
                k = torch.cat([kv[li][0][:, :q0], k, kv[li][0][:, q1:]], dim=1)
                v = torch.cat([kv[li][1][:, :q0], v, kv[li][1][:, q1:]], dim=1)
            att = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hd)
            att = att.softmax(-1)
            o = torch.einsum("bhqk,bkhd->bqhd", att, v).reshape(B, T, d)
            x = x + b.attn_out(o)
            m = self.rms(x, b.ff_norm)
            x = x + b.ff_out(F.silu(b.ff_proj(m)) * b.up_proj(m))
        return self.head(self.rms(x, self.ln_f))

    def forward_rows(self, ids, q0, q1, kv):
        """Reference for cache reuse: queries are rows [q0, q1) of the 1-D canvas `ids`; keys are all
        rows, taken from `kv` (per layer post-RoPE K, V of shape (L, H, hd)) with rows [q0, q1)
        replaced by fresh values. kv=None means a refresh (q0=0, q1=L). Returns (logits, new kv)."""
        L = ids.shape[0]
        H = self.cfg["n_heads"]
        d = self.cfg["d_model"]
        hd = d // H
        pos = torch.arange(q0, q1)
        x = self.wte[ids[q0:q1]]
        new_kv = []
        for li, b in enumerate(self.blocks):
            h = self.rms(x, b.attn_norm)
            T = q1 - q0
            q = self.rope(b.q_proj(h).view(T, H, hd), pos)
            k = self.rope(b.k_proj(h).view(T, H, hd), pos)
            v = b.v_proj(h).view(T, H, hd)
            if kv is None:
                assert q0 == 0 and q1 == L
                K, V = k, v
            else:
                K, V = kv[li][0].clone(), kv[li][1].clone()
                K[q0:q1], V[q0:q1] = k, v
            new_kv.append((K, V))
            att = torch.einsum("qhd,khd->hqk", q, K) / math.sqrt(hd)
            o = torch.einsum("hqk,khd->qhd", att.softmax(-1), V).reshape(T, d)
            x = x + b.attn_out(o)
            m = self.rms(x, b.ff_norm)
            x = x + b.ff_out(F.silu(b.ff_proj(m)) * b.up_proj(m))
        return self.head(self.rms(x, self.ln_f)), new_kv

# ---------------------------------------------------------------- reference decoder


def select_commits(conf, rule, tau, quota, factor):
    """conf: list of (confidence, position) for the masked positions of the current block.
    Ties break toward the lower position, exactly as the C++ decoder does."""
    order = sorted(conf, key=lambda cp: (-cp[0], cp[1]))
    if rule == "quota":
        n = max(1, min(quota, len(order)))
    elif rule == "threshold":
        n = max(1, sum(1 for c, _ in order if c >= tau))
    elif rule == "factor":
        n = 1
        for i in range(2, len(order) + 1):  # i is 1-based rank
            if order[i - 1][0] >= 1.0 - factor / (i + 1):
                n = i
            else:
                break
    else:
        raise ValueError(rule)
    return [p for _, p in order[:n]]


@torch.no_grad()
def reference_decode(model, prompt_ids, gen, block, rule, tau=0.9, steps_per_block=None, factor=1.0,
                     cache="none", refresh_interval=0):
    """Greedy (temperature 0) semi-autoregressive decode; returns (answer ids, steps, kinds)."""
    P = len(prompt_ids)
    L = P + gen
    x = torch.tensor(prompt_ids + [MASK] * gen, dtype=torch.long)
    steps, kinds = 0, []
    nblocks = (gen + block - 1) // block
    for bi in range(nblocks):
        s, e = P + bi * block, min(P + (bi + 1) * block, L)
        m0 = int((x[s:e] == MASK).sum())
        spb = steps_per_block or (e - s)
        k_in_block = 0
        kv = None
        while bool((x[s:e] == MASK).any()):
            refresh = (cache == "none" or k_in_block == 0 or
                       (refresh_interval > 0 and k_in_block % refresh_interval == 0))
            if refresh:
                logits, kv_new = model.forward_rows(x, 0, L, None)
                kv = kv_new if cache != "none" else None
                rows = logits[s:e]
                kinds.append("refresh")
            else:
                q1 = e if cache == "dual" else L
                logits, kv_new = model.forward_rows(x, s, q1, kv)
                if cache == "dual":
                    kv = kv_new
                rows = logits[: e - s]
                kinds.append("reuse")
            rows = rows.clone()
            rows[:, MASK] = -float("inf")
            probs = torch.softmax(rows.double(), dim=-1)
            conf = []
            prop = {}
            for j in range(e - s):
                if int(x[s + j]) == MASK:
                    tok = int(torch.argmax(rows[j]))
                    prop[s + j] = tok
                    conf.append((float(probs[j, tok]), s + j))
            quota = m0 // spb + (1 if k_in_block < m0 % spb else 0)
            for p in select_commits(conf, rule, tau, quota, factor):
                x[p] = prop[p]
            steps += 1
            k_in_block += 1
        if bool((x[P:e] == EOS).any()):
            break
    ans = []
    for t in x[P:].tolist():
        if t == EOS or t == MASK:
            break
        ans.append(t)
    return ans, steps, kinds


@torch.no_grad()
def batch_decode_threshold(model, problems, tau, block=8):
    """Fast batched no-cache decode for progress checks during training (same-shape groups)."""
    correct, steps_total = 0, 0
    groups = {}
    for pr in problems:
        groups.setdefault((len(pr["prompt"]), pr["gen_length"]), []).append(pr)
    for (P, gen), items in groups.items():
        L = P + gen
        x = torch.tensor([encode(p["prompt"]) + [MASK] * gen for p in items], dtype=torch.long)
        alive = torch.ones(len(items), dtype=torch.bool)
        for bi in range((gen + block - 1) // block):
            s, e = P + bi * block, min(P + (bi + 1) * block, L)
            while True:
                need = ((x[:, s:e] == MASK).any(-1)) & alive
                if not bool(need.any()):
                    break
                logits = model(x)[:, s:e].clone()
                logits[..., MASK] = -float("inf")
                p = logits.double().softmax(-1)
                conf, tok = p.max(-1)
                masked = x[:, s:e] == MASK
                conf = torch.where(masked, conf, torch.full_like(conf, -1.0))
                commit = conf >= tau if tau is not None else torch.zeros_like(masked)
                top = conf.argmax(-1)
                commit[torch.arange(len(items)), top] = True
                commit &= masked & need[:, None]
                x[:, s:e] = torch.where(commit, tok, x[:, s:e])
                steps_total += int(need.sum())
            alive &= ~((x[:, P:e] == EOS).any(-1))
        for i, pr in enumerate(items):
            if decode_ids(x[i, P:].tolist()) in pr["valid"]:
                correct += 1
    return correct / len(problems), steps_total / len(problems)

# ---------------------------------------------------------------- safetensors


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().float().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {"format": "pt", "producer": "tools/train_tiny_llada.py"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    import numpy as np
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            a, b = meta["data_offsets"]
            f.seek(base + a)
            arr = np.frombuffer(f.read(b - a), dtype="<f4").reshape(meta["shape"])
            out[name] = torch.from_numpy(arr.copy())
    return out


def state_to_llada(model):
    t = {"model.transformer.wte.weight": model.wte}
    for i, b in enumerate(model.blocks):
        p = f"model.transformer.blocks.{i}."
        t[p + "attn_norm.weight"] = b.attn_norm
        t[p + "ff_norm.weight"] = b.ff_norm
        for n in ("q_proj", "k_proj", "v_proj", "attn_out", "ff_proj", "up_proj", "ff_out"):
            t[p + n + ".weight"] = getattr(b, n).weight
    t["model.transformer.ln_f.weight"] = model.ln_f
    t["model.transformer.ff_out.weight"] = model.head.weight
    return t


def load_llada(model, tensors, grow=False):
    """grow: the saved model may have fewer vocabulary rows (characters added since, see VOCAB);
    the new rows keep their fresh initialisation."""
    with torch.no_grad():
        for name, dst in (("model.transformer.wte.weight", model.wte),
                          ("model.transformer.ff_out.weight", model.head.weight)):
            src = tensors[name]
            if grow and src.shape[0] < dst.shape[0]:
                dst[: src.shape[0]].copy_(src)
            else:
                dst.copy_(src)
        for i, b in enumerate(model.blocks):
            p = f"model.transformer.blocks.{i}."
            b.attn_norm.copy_(tensors[p + "attn_norm.weight"])
            b.ff_norm.copy_(tensors[p + "ff_norm.weight"])
            for n in ("q_proj", "k_proj", "v_proj", "attn_out", "ff_proj", "up_proj", "ff_out"):
                getattr(b, n).weight.copy_(tensors[p + n + ".weight"])
        model.ln_f.copy_(tensors["model.transformer.ln_f.weight"])


def make_config(args):
    d = args.d_model
    ff = int(math.ceil(8 * d / 3 / 32) * 32)
    return {
        "architectures": ["LLaDAModelLM"], "model_type": "llada", "block_type": "llama",
        "activation_type": "silu", "layer_norm_type": "rms", "rms_norm_eps": 1e-5,
        "d_model": d, "n_layers": args.layers, "n_heads": args.heads, "n_kv_heads": args.heads,
        "mlp_hidden_size": ff, "mlp_ratio": ff / d, "vocab_size": len(VOCAB),
        "embedding_size": len(VOCAB), "max_sequence_length": 64, "rope": True,
        "rope_theta": 10000.0, "rope_full_precision": True, "include_bias": False,
        "include_qkv_bias": False, "weight_tying": False, "scale_logits": False,
        "mask_token_id": MASK, "eos_token_id": EOS, "pad_token_id": EOS,
        "torch_dtype": "float32",
    }

# ---------------------------------------------------------------- training


def make_batch(rng, batch, held_out):
    long = rng.random() < LONG_FRACTION
    rows, P = [], None
    while len(rows) < batch:
        _, prompt, valid, gen = sample_problem(rng, None, long)
        if prompt in held_out:
            continue
        ans = rng.choice(valid)
        ids = encode(prompt) + encode(ans) + [EOS] * (gen - len(ans))
        rows.append(ids)
        P = len(prompt)
    return torch.tensor(rows, dtype=torch.long), P


def sft_loss(model, ids, P):
    """LLaDA SFT objective: mask each answer-region token with probability t, weight by 1/t."""
    B, L = ids.shape
    t = torch.rand(B, 1) * (1 - 1e-3) + 1e-3
    region = torch.zeros(B, L, dtype=torch.bool)
    region[:, P:] = True
    masked = (torch.rand(B, L) < t) & region
    noisy = torch.where(masked, torch.full_like(ids, MASK), ids)
    logits = model(noisy)
    ce = F.cross_entropy(logits.view(-1, logits.shape[-1]), ids.view(-1), reduction="none").view(B, L)
    return ((ce * masked).sum(-1) / t.squeeze(1) / (L - P)).mean()


TRAIN_BLOCK = 8  # the block length the eval, the quick start and the goldens decode with


def stale_cache_loss(model, ids, P, rng):
    """The same objective on a dual-cache reuse step. A tiny model otherwise learns to carry
    decisions (which option of `pick` was chosen) through prompt rows, which the dual cache does
    not recompute inside a block; here keys and values outside the block come from a refresh of
    the canvas as it stood when the block began (block and suffix masked, earlier blocks clean),
    and only the block's rows are fresh, with each of its tokens masked with probability t."""
    B, L = ids.shape
    b = 0 if rng.random() < 0.6 else rng.randrange((L - P) // TRAIN_BLOCK)
    q0, q1 = P + b * TRAIN_BLOCK, P + (b + 1) * TRAIN_BLOCK
    start = ids.clone()
    start[:, q0:] = MASK
    kv = []
    with torch.no_grad():
        model(start, keep_kv=kv)
    t = torch.rand(B, 1) * (1 - 1e-3) + 1e-3
    masked = torch.rand(B, TRAIN_BLOCK) < t
    now = start.clone()
    now[:, q0:q1] = torch.where(masked, torch.full_like(masked, MASK, dtype=torch.long), ids[:, q0:q1])
    logits = model(now, q0, q1, kv)
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, q0:q1].reshape(-1),
                         reduction="none").view(B, TRAIN_BLOCK)
    return ((ce * masked).sum(-1) / t.squeeze(1) / TRAIN_BLOCK).mean()


def train(args, cfg, eval_set, out_dir):
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    model = TinyLLaDA(cfg)
    if args.resume:
        # Continue from a saved checkpoint (the optimizer restarts with a fresh warm-up).
        load_llada(model, read_safetensors(os.path.join(args.resume, "model.safetensors")), grow=True)
        print(f"train: resumed from {args.resume}", flush=True)
    nparams = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    eval_prompts = {p["prompt"] for p in eval_set}
    budget = args.minutes * 60.0
    t0 = time.time()
    step, ema = 0, None
    next_check = t0 + args.check_minutes * 60
    print(f"train: {nparams} parameters, budget {args.minutes} min, 1 thread", flush=True)
    while True:
        el = time.time() - t0
        if el >= budget:
            break
        frac = el / budget
        warm = min(1.0, (step + 1) / 200)
        lr = args.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        ids, P = make_batch(rng, args.batch, eval_prompts)
        if rng.random() < args.stale_fraction:
            loss = stale_cache_loss(model, ids, P, rng)
        else:
            loss = sft_loss(model, ids, P)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
        if step % 100 == 0:
            print(f"step {step:6d}  {el/60:5.1f} min  loss {ema:.4f}  lr {lr:.2e}", flush=True)
        if time.time() >= next_check:
            next_check = time.time() + args.check_minutes * 60
            model.eval()
            acc, steps = batch_decode_threshold(model, eval_set[:150], 0.9)
            model.train()
            print(f"check: {el/60:5.1f} min  tau=0.9 exact match {acc*100:.1f}%  steps {steps:.2f}",
                  flush=True)
            save(model, cfg, out_dir)
    return model, step, time.time() - t0


def save(model, cfg, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(out_dir, "tokenizer.json"), "w") as f:
        json.dump({"type": "char", "vocab": VOCAB, "eos_id": EOS, "mask_id": MASK, "unk_id": UNK},
                  f, indent=1)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), state_to_llada(model))


# Tasks by the release that added them. Each release's problems come from their own generator,
# so adding a task never changes (and never un-holds-out) the problems an earlier model was
# evaluated on and kept out of its training.
EVAL_RELEASES = [(["caesar", "addr", "pick"], 600, 0), (["mark"], 200, 2)]


def make_eval_set(seed, n):
    """n scales every release's share; n = 800 is the shipped set (600 + 200)."""
    items = []
    total = sum(count for _, count, _ in EVAL_RELEASES)
    for names, count, offset in EVAL_RELEASES:
        rng = random.Random(seed + offset)
        for i in range(count * n // total):
            task = names[i % len(names)]
            long = (i // len(names)) % 10 < 3  # 30% long canvases, as in training
            _, prompt, valid, gen = sample_problem(rng, task, long)
            item = {"prompt": prompt, "task": task, "gen_length": gen}
            if len(valid) == 1:
                item["answer"] = valid[0]
            else:
                item["valid"] = valid
            items.append(item)
    for it in items:
        it["valid"] = it.get("valid", [it.get("answer")])
    return items

# ---------------------------------------------------------------- goldens


@torch.no_grad()
def write_goldens(model, path):
    g = {"note": "Generated by tools/train_tiny_llada.py --goldens-only from models/tiny-llada; "
                 "PyTorch reference at temperature 0.", "forward": [], "decodes": []}
    rng = random.Random(123)
    # Full forward on canvases with some answer tokens committed and the rest masked.
    for task, long in (("addr", False), ("pick", True)):
        _, prompt, valid, gen = sample_problem(rng, task, long)
        ids = encode(prompt) + [MASK] * gen
        ans = encode(valid[0])
        for j, t in enumerate(ans[:3]):
            ids[len(prompt) + j] = t
        x = torch.tensor(ids)
        logits, kv = model.forward_rows(x, 0, len(ids), None)
        entry = {"ids": ids, "logits": [round(v, 7) for v in logits.flatten().tolist()],
                 "rows": len(ids), "vocab": logits.shape[1]}
        # A reuse forward: change two block tokens, query only the block against the stale cache.
        P = len(prompt)
        y = x.clone()
        y[P + 3] = ans[3] if len(ans) > 3 else EOS
        y[P + 4] = EOS
        rl, _ = model.forward_rows(y, P, P + 8, kv)
        entry["reuse"] = {"ids": y.tolist(), "q0": P, "q1": P + 8,
                          "logits": [round(v, 7) for v in rl.flatten().tolist()]}
        g["forward"].append(entry)
    rules = [("quota", dict(steps_per_block=8), "one_per_step"),
             ("quota", dict(steps_per_block=4), "quota4"),
             ("threshold", dict(tau=0.9), "threshold0.9"),
             ("threshold", dict(tau=0.5), "threshold0.5"),
             ("factor", dict(factor=1.0), "factor1.0")]
    probs = [sample_problem(rng, t, lg) for t, lg in
             (("caesar", False), ("addr", False), ("pick", False), ("pick", True), ("addr", True),
              ("mark", False))]
    for _, prompt, valid, gen in probs:
        for rule, kw, label in rules:
            for cache in ("none", "prefix", "dual"):
                ans, steps, kinds = reference_decode(model, encode(prompt), gen, 8, rule, cache=cache,
                                                     **kw)
                g["decodes"].append({"prompt": prompt, "gen_length": gen, "block_length": 8,
                                     "rule": rule, "label": label, "cache": cache,
                                     "threshold": kw.get("tau", 0.9),
                                     "steps_per_block": kw.get("steps_per_block", 0),
                                     "factor": kw.get("factor", 1.0),
                                     "answer": decode_ids(ans), "answer_ids": ans, "steps": steps,
                                     "refresh_steps": kinds.count("refresh"),
                                     "reuse_steps": kinds.count("reuse")})
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(g, f, separators=(",", ":"))
    print(f"goldens: {len(g['forward'])} forward cases, {len(g['decodes'])} decodes -> {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "models", "tiny-llada"))
    ap.add_argument("--goldens", default=os.path.join(REPO, "tests", "golden", "tiny_llada_goldens.json"))
    ap.add_argument("--minutes", type=float, default=40.0)
    ap.add_argument("--check-minutes", type=float, default=5.0)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--eval-n", type=int, default=800)
    ap.add_argument("--goldens-only", action="store_true")
    ap.add_argument("--resume", default="", help="model folder to continue training from")
    ap.add_argument("--stale-fraction", type=float, default=0.4,
                    help="share of batches trained as dual-cache reuse steps against a stale cache")
    args = ap.parse_args()
    torch.set_num_threads(1)

    if args.goldens_only:
        with open(os.path.join(args.out, "config.json")) as f:
            cfg = json.load(f)
        model = TinyLLaDA(cfg)
        load_llada(model, read_safetensors(os.path.join(args.out, "model.safetensors")))
        model.eval()
        write_goldens(model, args.goldens)
        return

    cfg = make_config(args)
    eval_set = make_eval_set(10_000 + args.seed, args.eval_n)
    model, steps, secs = train(args, cfg, eval_set, args.out)
    model.eval()
    save(model, cfg, args.out)
    with open(os.path.join(args.out, "eval.jsonl"), "w") as f:
        for it in eval_set:
            row = {k: v for k, v in it.items() if not (k == "valid" and "answer" in it)}
            f.write(json.dumps(row) + "\n")
    for tau in (0.9, 0.5):
        acc, st = batch_decode_threshold(model, eval_set, tau)
        print(f"final: tau={tau} exact match {acc*100:.1f}%  steps/answer {st:.2f}", flush=True)
    print(f"trained {steps} steps in {secs/60:.1f} min", flush=True)
    write_goldens(model, args.goldens)


if __name__ == "__main__":
    main()
